//! `fleetwire bench`: Fleetwire's load generator.
//!
//! Device fleets over raw MQTT (Fleetwire's own codec, no client library) and over the HTTP device API,
//! driven by scenarios (`bench/scenarios/*.toml`), with PUBACK latency in HDR histograms, the server's CPU
//! and memory sampled from `/proc`, and a verification pass that compares, per device, the points the
//! server stored with the points it acknowledged. A null server (accepts CONNECT, acknowledges every
//! PUBLISH, nothing else) measures the box's own limit.

pub mod cli;
pub mod error;
pub mod fleet;
pub mod fsync_probe;
pub mod http;
pub mod null_journal;
pub mod null_server;
pub mod pacing;
pub mod payload;
pub mod query;
pub mod report;
pub mod rest;
pub mod rpc;
pub mod run;
pub mod scenario;
pub mod server_log;
pub mod stats;
pub mod verify;

pub use error::{Error, Result};
pub use scenario::{MqttVersion, Profile, Rate, Scenario, Transport};
