//! Fleetwire's data model, shared by every other crate.
//!
//! - [`value`]: the typed values ThingsBoard knows (`BOOLEAN`, `LONG`, `DOUBLE`, `STRING`, `JSON`) and
//!   key/value entries.
//! - [`payload`]: parsing of ThingsBoard device payloads (telemetry and attribute JSON, every form of
//!   reference sections 1.5-1.6, lenient JSON included) into typed entries.
//! - [`hint`]: cache prefetch hints for hot paths that touch memory known to be cold.
//! - [`record`]: the records that travel through the ingest log, and their compact binary encoding.
//!
//! Architecture invariant: this crate does no I/O and knows nothing of tokio, the network or the disk.

pub mod hint;
pub mod payload;
pub mod record;
pub mod value;

pub use payload::{encode_telemetry_record, parse_attributes, parse_telemetry, PayloadError};
pub use record::{Record, RecordError};
pub use value::{DataType, Kv, TsKv, TsRecord, Value, ValueRef};
