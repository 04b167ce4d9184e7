//! Fleetwire's time-series store.
//!
//! A **series** is one key of one entity (device): `(entity: u128, key)`, interned into a stable
//! [`SeriesId`]. Values are typed per point (BOOLEAN, LONG, DOUBLE, STRING, JSON) and a key may
//! change type between writes.
//!
//! Data flow, one file per step:
//! - `points.rs`: the columnar, ts-sorted form of a series' points (no allocation per numeric
//!   point), used by heads and decoded chunks alike.
//! - `head.rs`: writes land in a per-series in-memory **head**; an equal ts replaces the value,
//!   so replaying the ingest log is idempotent. Each head remembers the lowest ingest-log
//!   position ([`Source`]) per partition it holds data from.
//! - `chunk.rs`: a full head (or one forced by `seal_*`) is **sealed** into a chunk: timestamps
//!   numbers and booleans compressed with pco, texts as lengths plus bytes, a CRC32C at the
//!   end (byte layout: `docs/format/chunk.md`).
//! - `store.rs`: chunks live in fjall, one keyspace per UTC month (`month.rs`), keyed by series
//!   id and chunk start. A chunk overlapping stored ones (log replay after a crash, late data) is
//!   merged with them, the new points winning on an equal ts: sealing never loses points.
//! - `series.rs` / `latest.rs`: the series index and each series' latest value, in memory and
//!   persisted in their own keyspaces.
//! - `query.rs` / `aggregate.rs`: range queries merge stored chunks (decoded one at a time) with
//!   the head and fold points into raw rows or ThingsBoard-style interval buckets
//!   (NONE/AVG/MIN/MAX/SUM/COUNT) without materialising the raw rows.
//! - `tsdb.rs`: [`Tsdb`], the `Send + Sync` entry point, with entities sharded over mutexes.
//!
//! # Durability contract
//! Head data is NOT durable. Sealing writes chunks to fjall without fsync; [`Tsdb::persist`]
//! writes the changed latest values and fsyncs, after which everything sealed before the call
//! is durable. [`Tsdb::min_unsealed_source`] tells, per log partition, the lowest position
//! whose data is not durable yet (in a head, or sealed but not persisted): the server trims
//! its ingest log below it and, after a crash, replays from there to rebuild the heads.
//! A typical checkpoint: `seal_heads_below(p, target)`, `persist()`, then trim the log of `p`
//! to `min_unsealed_source(p)` (or to its end when `None`).
//!
//! Time is always passed in (`seal_older_than(now_ms, ..)`); the crate never reads the clock.
//! After a failed write or fsync the store is poisoned and refuses writes. After a failed write
//! (a full disk) [`Tsdb::reopen`] recovers it in process: it reopens the storage engine from its
//! files, and the caller then replays its ingest log from its last checkpoint, as after a crash
//! ([`Tsdb::generation`] tells it when). After a failed fsync only a restart does.

mod aggregate;
mod chunk;
mod error;
mod head;
mod latest;
mod month;
mod points;
mod query;
mod series;
mod store;
mod tsdb;

#[doc(hidden)]
pub mod fuzzing;

pub use aggregate::Agg;
pub use error::{Error, Result};
pub use head::Source;
pub use latest::Latest;
pub use query::{Order, Query};
pub use series::SeriesId;
pub use store::{ChunkStats, WriteState};
pub use tsdb::{HeadStats, Tsdb, TsdbConfig};
