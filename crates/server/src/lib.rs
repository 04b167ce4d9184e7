//! Fleetwire's server: the only crate that knows tokio and axum.
//!
//! - [`config`]: the typed configuration (`fleetwire.toml`).
//! - [`state`]: [`AppState`], everything a request or a connection needs, opened once at start.
//! - [`mqtt`]: the MQTT listener: one task per connection, our codec, device authentication, PUBACK after
//!   the ingest log says the record is durable.
//! - [`ingest`]: the write path shared by MQTT and HTTP (payload → log record → durable ack), the HTTP device
//!   API, and the processors that move records from the log into the time-series store.
//! - [`api`]: the ThingsBoard-compatible REST API.
//! - [`client_rpc`]: client-side RPC methods handed to a profile's webhook.
//! - [`claim`]: device claiming announcements.
//! - [`provision`]: device provisioning over MQTT and HTTP.
//! - [`limits`]: rate limits per tenant, device, gateway and customer (ThingsBoard's `capacity:seconds`), and
//!   the failed-authentication limit per source address.
//! - [`rpc`]: server-side RPC: requests from REST to a device's MQTT session or HTTP poll, and its replies.
//! - [`metrics`]: counters, `GET /metrics` (Prometheus text) and `GET /readyz`.
//! - [`serve`]: starts everything and runs until shutdown.

pub mod activity;
pub mod api;
pub mod claim;
pub mod client_rpc;
pub mod config;
pub mod ingest;
pub mod limits;
pub mod metrics;
pub mod mqtt;
pub mod provision;
pub mod rpc;
pub mod serve;
pub mod state;

pub use config::Config;
pub use state::AppState;
