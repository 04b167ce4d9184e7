//! Chunk storage in fjall: where sealed chunks live and how a new chunk is merged with the ones
//! already stored.
//!
//! Keyspaces: `series` (the series index, see `series.rs`), `latest` (see `latest.rs`) and one
//! `chunks_YYYY_MM` keyspace per UTC month. In a month keyspace, key = series id (u64 BE) +
//! chunk first ts (i64 with the sign bit flipped, BE, so byte order is time order), value =
//! the chunk blob (`chunk.rs`); one more key, [`STATS_KEY`], holds the month's [`ChunkStats`]. fjall 3 keyspaces are separate LSM trees sharing one journal,
//! so a keyspace per month costs little, and retention drops a month with one
//! `delete_keyspace` instead of deleting millions of keys.
//!
//! Invariants, relied on by queries: a chunk never spans two months, and the chunks of one
//! series never overlap in time. Sealing keeps them by splitting points at month boundaries
//! and by merging new points into any stored chunk whose range they fall in.
//!
//! After a failed write fjall poisons itself and refuses every later write. The fjall handles
//! therefore live in an [`Engine`] behind a lock, so that [`Store::reopen`] can close the
//! poisoned instance and recover a new one from the files (fjall cuts a torn journal tail off)
//! while the process keeps running. What the old instance had not written to its journal is
//! lost from the store by then; the caller replays it from its ingest log.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use fleetwire_model::Value;
use parking_lot::{MappedRwLockReadGuard, Mutex, RwLock, RwLockReadGuard};

use crate::chunk::{self, Header};
use crate::error::{Error, Result};
use crate::month::{keyspace_name, month_of, next_month_start_ms, parse_keyspace_name};
use crate::points::Points;
use crate::query::Order;
use crate::series::{self, SeriesId};

/// Size of the chunks stored, as reported by `Tsdb::chunk_stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkStats {
    pub chunk_count: u64,
    pub point_count: u64,
    /// Key + value bytes of all chunks (before fjall's own block overhead).
    pub bytes: u64,
}

impl ChunkStats {
    /// One chunk of `points` points whose blob is `blob_len` bytes.
    fn chunk(points: u32, blob_len: usize) -> ChunkStats {
        ChunkStats {
            chunk_count: 1,
            point_count: u64::from(points),
            bytes: (CHUNK_KEY_LEN + blob_len) as u64,
        }
    }

    fn add(&mut self, other: ChunkStats) {
        self.chunk_count += other.chunk_count;
        self.point_count += other.point_count;
        self.bytes += other.bytes;
    }

    fn sub(&mut self, other: ChunkStats) {
        self.chunk_count = self.chunk_count.saturating_sub(other.chunk_count);
        self.point_count = self.point_count.saturating_sub(other.point_count);
        self.bytes = self.bytes.saturating_sub(other.bytes);
    }
}

/// A chunk key's length: series id and start ts, 8 bytes each.
const CHUNK_KEY_LEN: usize = 16;

/// The key of a month keyspace's own [`ChunkStats`] record, beside its chunks. It is a proper prefix of the
/// chunk keys of series `u64::MAX`, so it sorts after every other series' chunks and just before that
/// one's: never inside a series' range `chunk_key(id, a) ..= chunk_key(id, b)`, which is all any read of
/// chunks asks for. It is not 16 bytes long, so a full scan tells it from a chunk.
///
/// Why in the month's keyspace rather than a keyspace of its own: fjall recovers each keyspace from its
/// own flushed tables plus the journal's batches after them. It syncs the journal before each flush (fjall
/// issue #329), but a memtable sealed between that sync and the flush goes into the table with batches the
/// journal may not have synced yet, so after a power loss two keyspaces can come back at different points
/// of the journal (a narrow window, not one to build counts across). One keyspace comes back as a prefix
/// of its batches, and a record written in each batch that changes the chunks matches them.
const STATS_KEY: [u8; 8] = [0xFF; 8];

/// A month's [`STATS_KEY`] record: chunk count, point count and bytes, u64 LE each.
fn encode_stats(stats: &ChunkStats) -> [u8; 24] {
    let mut value = [0u8; 24];
    value[..8].copy_from_slice(&stats.chunk_count.to_le_bytes());
    value[8..16].copy_from_slice(&stats.point_count.to_le_bytes());
    value[16..].copy_from_slice(&stats.bytes.to_le_bytes());
    value
}

fn decode_stats(value: &[u8]) -> Option<ChunkStats> {
    let value: &[u8; 24] = value.try_into().ok()?;
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&value[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    Some(ChunkStats {
        chunk_count: word(0),
        point_count: word(1),
        bytes: word(2),
    })
}

pub(crate) fn chunk_key(id: SeriesId, start_ts: i64) -> [u8; CHUNK_KEY_LEN] {
    let mut key = [0u8; CHUNK_KEY_LEN];
    key[..8].copy_from_slice(&id.to_key());
    key[8..].copy_from_slice(&((start_ts as u64) ^ (1 << 63)).to_be_bytes());
    key
}

fn key_start_ts(key: &[u8]) -> Option<i64> {
    let ts: [u8; 8] = key.get(8..16)?.try_into().ok()?;
    Some((u64::from_be_bytes(ts) ^ (1 << 63)) as i64)
}

/// Counts the chunks of one month keyspace from their headers: reads every chunk, so only when a month has
/// no readable record (a store written before records existed) and for [`Store::count_chunk_stats`]. A
/// chunk whose header cannot be read is counted without its points: such a chunk is never replaced or
/// removed (reading it fails first), so the count stays what later writes keep, and the store still opens.
fn count_chunks(ks: &Keyspace) -> Result<ChunkStats> {
    let mut stats = ChunkStats::default();
    let mut unreadable = 0u64;
    for guard in ks.iter() {
        let (key, blob) = guard.into_inner()?;
        if key.len() != CHUNK_KEY_LEN {
            continue;
        }
        match chunk::header(&blob) {
            Ok(header) => stats.point_count += u64::from(header.point_count),
            Err(_) => unreadable += 1,
        }
        stats.chunk_count += 1;
        stats.bytes += (key.len() + blob.len()) as u64;
    }
    if unreadable > 0 {
        tracing::warn!(keyspace = %ks.name(), chunks = unreadable, "chunks whose header cannot be read, counted without their points");
    }
    Ok(stats)
}

/// The record of `ks`, or, where it has none that reads, a count of its chunks, recorded. Not synced: a
/// crash that loses the record means one more count at the next open.
fn recorded_or_counted(ks: &Keyspace) -> Result<ChunkStats> {
    if let Some(value) = ks.get(STATS_KEY)? {
        match decode_stats(&value) {
            Some(stats) => return Ok(stats),
            None => {
                tracing::warn!(keyspace = %ks.name(), "malformed chunk stats record; counting the chunks again");
            }
        }
    }
    let counted = count_chunks(ks)?;
    tracing::info!(keyspace = %ks.name(), chunks = counted.chunk_count, "counted the chunks of a month without a stats record");
    ks.insert(STATS_KEY, encode_stats(&counted))?;
    Ok(counted)
}

/// One month keyspace and its chunk counts.
#[derive(Clone)]
struct Month {
    ks: Keyspace,
    stats: Arc<MonthStats>,
}

/// A month's [`ChunkStats`]: as last committed, and a copy for readers.
struct MonthStats {
    /// Held by a chunk write from reading the counts to committing its batch (with the new record) and
    /// updating them, so that the month's records go into the journal in the order of its writes.
    committed: Mutex<ChunkStats>,
    /// What `chunk_stats` sums: a scrape must not wait for a commit, which can wait on fjall's write stall.
    published: [AtomicU64; 3],
}

impl Month {
    fn new(ks: Keyspace, stats: ChunkStats) -> Month {
        let month_stats = MonthStats {
            committed: Mutex::new(stats),
            published: Default::default(),
        };
        month_stats.publish(stats);
        Month {
            ks,
            stats: Arc::new(month_stats),
        }
    }
}

impl MonthStats {
    fn publish(&self, stats: ChunkStats) {
        self.published[0].store(stats.chunk_count, Ordering::Relaxed);
        self.published[1].store(stats.point_count, Ordering::Relaxed);
        self.published[2].store(stats.bytes, Ordering::Relaxed);
    }

    fn published(&self) -> ChunkStats {
        ChunkStats {
            chunk_count: self.published[0].load(Ordering::Relaxed),
            point_count: self.published[1].load(Ordering::Relaxed),
            bytes: self.published[2].load(Ordering::Relaxed),
        }
    }
}

/// A stored chunk found by a seek: its start ts (from the key), header and blob.
struct Found {
    start_ts: i64,
    header: Header,
    blob: fjall::Slice,
}

impl Found {
    /// What this chunk adds to [`ChunkStats`].
    fn stats(&self) -> ChunkStats {
        ChunkStats::chunk(self.header.point_count, self.blob.len())
    }
}

/// Whether the store takes writes, as [`crate::Tsdb::write_state`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteState {
    Writable,
    /// A write failed (a full disk, an I/O error): writes are refused until
    /// [`crate::Tsdb::reopen`] succeeds.
    RefusedUntilReopen,
    /// An fsync failed: writes are refused until the process restarts.
    RefusedUntilRestart,
}

/// Longest [`Store::reopen`] waits for the operations on the old engine to finish.
const REOPEN_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The store accepts writes.
const WRITABLE: u8 = 0;
/// A write failed: writes are refused until [`Store::reopen`] succeeds.
const POISONED: u8 = 1;
/// An fsync failed: writes are refused until the process restarts. After a failed fsync the
/// kernel may have dropped the dirty pages while the files still read back as written, so a
/// reopen could take for durable what never reached the disk.
const POISONED_FSYNC: u8 = 2;

pub(crate) struct Store {
    dir: PathBuf,
    /// `None` only after a reopen that failed (the next one tries again).
    engine: RwLock<Option<Engine>>,
    chunk_points_max: usize,
    /// WRITABLE, POISONED or POISONED_FSYNC.
    state: AtomicU8,
    /// Successful reopens so far.
    generation: AtomicU64,
}

/// One open fjall instance and its keyspaces.
struct Engine {
    db: Database,
    series: Keyspace,
    latest: Keyspace,
    /// The month keyspaces with their chunk counts. Each write that adds, replaces or removes a chunk puts
    /// its month's new [`STATS_KEY`] record in the same batch, so that a crash leaves the records as exact as
    /// the chunks it leaves. A scrape of `/metrics` read every chunk instead: 180 ms of a core for 183,000
    /// chunks (163M points) on a server under load, growing with the store; counting them when the store
    /// opens would make every start read the whole store.
    months: RwLock<BTreeMap<i64, Month>>,
    chunk_points_max: usize,
}

fn chunk_keyspace_options() -> KeyspaceCreateOptions {
    // pco output does not compress further; LZ4 over it would only cost CPU.
    KeyspaceCreateOptions::default()
        .data_block_compression_policy(fjall::config::CompressionPolicy::disabled())
}

impl Store {
    pub(crate) fn open(dir: &Path, chunk_points_max: usize) -> Result<Store> {
        Ok(Store {
            dir: dir.to_path_buf(),
            engine: RwLock::new(Some(Engine::open(dir, chunk_points_max)?)),
            chunk_points_max,
            state: AtomicU8::new(WRITABLE),
            generation: AtomicU64::new(0),
        })
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.state.load(Ordering::Acquire) == WRITABLE {
            Ok(())
        } else {
            Err(Error::Poisoned)
        }
    }

    pub(crate) fn write_state(&self) -> WriteState {
        match self.state.load(Ordering::Acquire) {
            WRITABLE => WriteState::Writable,
            POISONED => WriteState::RefusedUntilReopen,
            _ => WriteState::RefusedUntilRestart,
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The open engine, shared with other readers and writers; [`Store::reopen`] waits for them.
    fn engine(&self) -> Result<MappedRwLockReadGuard<'_, Engine>> {
        RwLockReadGuard::try_map(self.engine.read(), Option::as_ref).map_err(|_| Error::Poisoned)
    }

    /// Passes a result through, poisoning the store if the storage engine failed.
    fn guard<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::Store(e)) = &result {
            tracing::error!(error = %e, "tsdb write failed; refusing further writes");
            // An fsync failure is never downgraded to a recoverable one.
            let _ = self.state.compare_exchange(
                WRITABLE,
                POISONED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        result
    }

    /// Closes the poisoned fjall instance and opens the files again, then writes the records of
    /// `series` (the caller's whole series index) that the new instance lacks, and removes the
    /// stored latest values of `no_latest` (series whose latest value was deleted): the old
    /// instance may have lost either. Everything else it had not written is lost too; the caller
    /// replays it. Does nothing when the store is writable; refuses after a failed fsync. Gives up
    /// (to be called again) if a writer holds the old engine for longer than `REOPEN_WAIT`: fjall
    /// may keep a writer waiting for a flush that will not come.
    pub(crate) fn reopen(
        &self,
        series: &[(SeriesId, u128, &str)],
        no_latest: &[SeriesId],
    ) -> Result<()> {
        let Some(mut slot) = self.engine.try_write_for(REOPEN_WAIT) else {
            return Err(Error::Poisoned);
        };
        match self.state.load(Ordering::Acquire) {
            WRITABLE => return Ok(()),
            POISONED => {}
            _ => return Err(Error::Poisoned),
        }
        // fjall holds a lock file: the old instance must be gone (its workers joined) first.
        drop(slot.take());
        let engine = Engine::open(&self.dir, self.chunk_points_max)?;
        // Only what is missing, so that a reopen does not rewrite a large index into the space it
        // waited for; in batches, so that a million series do not make one batch.
        let mut batch = engine.batch();
        for &(id, entity, key) in series {
            if !engine.series.contains_key(id.to_key())? {
                batch.insert(
                    &engine.series,
                    id.to_key(),
                    series::encode_record(entity, key),
                );
            }
            if batch.len() >= 10_000 {
                std::mem::replace(&mut batch, engine.batch()).commit()?;
            }
        }
        for id in no_latest {
            batch.remove(&engine.latest, id.to_key());
        }
        batch.commit()?;
        *slot = Some(engine);
        self.state.store(WRITABLE, Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    pub(crate) fn load_series(&self) -> Result<Vec<(SeriesId, u128, String)>> {
        self.engine()?.load_series()
    }

    /// Forgets the index record of series `id`, as a power loss can (see [`Store::max_stored_series_id`]).
    #[cfg(test)]
    pub(crate) fn forget_series(&self, id: SeriesId) -> Result<()> {
        Ok(self.engine()?.series.remove(id.to_key())?)
    }

    pub(crate) fn insert_series(&self, id: SeriesId, entity: u128, key: &str) -> Result<()> {
        self.check_writable()?;
        // Each write keeps the engine's read guard until its result is guarded, so that a failure of
        // the old engine cannot poison the store after a reopen has installed a new one.
        let engine = self.engine()?;
        let r = engine
            .series
            .insert(id.to_key(), series::encode_record(entity, key));
        self.guard(r.map_err(Error::from))
    }

    pub(crate) fn load_latest(&self) -> Result<Vec<(SeriesId, i64, Value)>> {
        self.engine()?.load_latest()
    }

    /// The highest series id that any chunk or latest value is stored under, whether or not the series
    /// index has it. fjall recovers each keyspace from its own flushed tables plus the journal after them
    /// (see [`STATS_KEY`] for the window in which the two differ), so after a power loss a month keyspace
    /// that had flushed can hold chunks of a series whose index record was in the journal's lost tail; a new series must not get that id, or it would read those
    /// chunks as its own. (The log still holds that series' records, since nothing was synced after its
    /// index record: replay writes them again under a new id.) One seek per keyspace.
    pub(crate) fn max_stored_series_id(&self) -> Result<Option<u64>> {
        let engine = self.engine()?;
        let series_of = |key: &[u8]| -> Option<u64> {
            let id: [u8; 8] = key.get(..8)?.try_into().ok()?;
            Some(u64::from_be_bytes(id))
        };
        let mut max = match engine.latest.last_key_value() {
            Some(guard) => series_of(&guard.key()?),
            None => None,
        };
        let keyspaces = engine.month_keyspaces();
        for ks in &keyspaces {
            // The last chunk key: of series u64::MAX, above the stats record, or the last one below it.
            let mut last = None;
            for guard in ks.range(STATS_KEY.as_slice()..).rev() {
                let key = guard.key()?;
                if key.len() == CHUNK_KEY_LEN {
                    last = Some(key);
                    break;
                }
            }
            if last.is_none() {
                if let Some(guard) = ks.range(..STATS_KEY.as_slice()).next_back() {
                    last = Some(guard.key()?);
                }
            }
            if let Some(id) = last.as_deref().and_then(series_of) {
                max = max.max(Some(id));
            }
        }
        Ok(max)
    }

    /// Writes latest values in one batch, then fsyncs the journal: everything written to the
    /// store before this call (chunks, series, these latest values) is durable when it returns.
    pub(crate) fn write_latest_and_sync(&self, latest: Vec<(SeriesId, Vec<u8>)>) -> Result<()> {
        self.check_writable()?;
        let engine = self.engine()?;
        if !latest.is_empty() {
            let mut batch = engine.batch();
            for (id, value) in latest {
                batch.insert(&engine.latest, id.to_key(), value);
            }
            self.guard(batch.commit().map_err(Error::from))?;
        }
        // What a full disk fails is a write: flush fjall's journal buffer first (every write of
        // ours flushes it already), so that an I/O error of the SyncAll below is the fsync's own.
        // fjall's `Poisoned` means an earlier write failed (ours, or its flush and compaction
        // workers'), not this fsync.
        self.guard(engine.db.persist(PersistMode::Buffer).map_err(Error::from))?;
        match engine.db.persist(PersistMode::SyncAll) {
            Ok(()) => Ok(()),
            Err(e @ fjall::Error::Poisoned) => self.guard(Err(e.into())),
            Err(e) => {
                tracing::error!(error = %e, "tsdb fsync failed; refusing writes until a restart");
                self.state.store(POISONED_FSYNC, Ordering::Release);
                Err(e.into())
            }
        }
    }

    /// Writes a series' points (sorted, non-empty) as chunks, merging with stored chunks.
    pub(crate) fn write_points(&self, id: SeriesId, points: &Points) -> Result<()> {
        self.check_writable()?;
        let engine = self.engine()?;
        let r = engine.write_points(id, points);
        self.guard(r)
    }

    /// Deletes the stored points of `id` with `start <= ts < end`: chunks wholly inside go, chunks that
    /// overlap are rewritten with the points outside. Not synced: the next `write_latest_and_sync` makes
    /// it durable, like any chunk write. Returns how many points it deleted.
    pub(crate) fn delete_range(&self, id: SeriesId, start: i64, end: i64) -> Result<usize> {
        self.check_writable()?;
        let engine = self.engine()?;
        let r = engine.delete_range(id, start, end);
        self.guard(r)
    }

    /// Forgets the stored latest value of `id` (not synced, as `delete_range`).
    pub(crate) fn remove_latest(&self, id: SeriesId) -> Result<()> {
        self.check_writable()?;
        let engine = self.engine()?;
        let r = engine.latest.remove(id.to_key());
        self.guard(r.map_err(Error::from))
    }

    /// Calls `f` with every stored chunk of `id` overlapping `[start, end)`, in `order`; the
    /// chunks are whole (the caller clips them). Stops when `f` breaks.
    pub(crate) fn scan(
        &self,
        id: SeriesId,
        start: i64,
        end: i64,
        order: Order,
        f: &mut dyn FnMut(&Points) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>> {
        self.engine()?.scan(id, start, end, order, f)
    }

    pub(crate) fn chunk_stats(&self) -> Result<ChunkStats> {
        Ok(self.engine()?.chunk_stats())
    }

    /// What [`Store::chunk_stats`] should say, counted from every stored chunk.
    pub(crate) fn count_chunk_stats(&self) -> Result<ChunkStats> {
        let engine = self.engine()?;
        let keyspaces = engine.month_keyspaces();
        let mut total = ChunkStats::default();
        for ks in &keyspaces {
            total.add(count_chunks(ks)?);
        }
        Ok(total)
    }

    /// Drops every month keyspace that ends at or before `cutoff_ms`; returns how many.
    pub(crate) fn drop_months_before(&self, cutoff_ms: i64) -> Result<usize> {
        self.check_writable()?;
        let engine = self.engine()?;
        let r = engine.drop_months_before(cutoff_ms);
        self.guard(r)
    }
}

impl Engine {
    fn open(dir: &Path, chunk_points_max: usize) -> Result<Engine> {
        let db = Database::builder(dir)
            .journal_compression(fjall::CompressionType::None)
            .open()?;
        let series = db.keyspace("series", KeyspaceCreateOptions::default)?;
        let latest = db.keyspace("latest", KeyspaceCreateOptions::default)?;
        let mut months = BTreeMap::new();
        for name in db.list_keyspace_names() {
            if let Some(month) = parse_keyspace_name(&name) {
                let ks = db.keyspace(&name, chunk_keyspace_options)?;
                let stats = recorded_or_counted(&ks)?;
                months.insert(month, Month::new(ks, stats));
            }
        }
        Ok(Engine {
            db,
            series,
            latest,
            months: RwLock::new(months),
            chunk_points_max,
        })
    }

    /// A write batch that reaches the journal file (not only fjall's buffer) when committed, so
    /// that a full disk fails the write that caused it rather than the next fsync.
    fn batch(&self) -> fjall::OwnedWriteBatch {
        self.db.batch().durability(Some(PersistMode::Buffer))
    }

    fn load_series(&self) -> Result<Vec<(SeriesId, u128, String)>> {
        let mut out = Vec::new();
        for guard in self.series.iter() {
            let (key, value) = guard.into_inner()?;
            let record = series::decode_record(&key, &value).map_err(|reason| Error::Corrupt {
                location: format!("series/{key:?}"),
                reason,
            })?;
            out.push(record);
        }
        Ok(out)
    }

    fn load_latest(&self) -> Result<Vec<(SeriesId, i64, Value)>> {
        let mut out = Vec::new();
        for guard in self.latest.iter() {
            let (key, value) = guard.into_inner()?;
            let location = || format!("latest/{key:?}");
            let id: [u8; 8] = (*key).try_into().map_err(|_| Error::Corrupt {
                location: location(),
                reason: "key is not a series id".into(),
            })?;
            let (ts, value) = crate::latest::decode(&value).map_err(|reason| Error::Corrupt {
                location: location(),
                reason,
            })?;
            out.push((SeriesId(u64::from_be_bytes(id)), ts, value));
        }
        Ok(out)
    }

    /// Every month keyspace, oldest first.
    fn month_keyspaces(&self) -> Vec<Keyspace> {
        self.months.read().values().map(|m| m.ks.clone()).collect()
    }

    fn month_keyspace(&self, month: i64) -> Result<Month> {
        if let Some(m) = self.months.read().get(&month) {
            return Ok(m.clone());
        }
        let mut months = self.months.write();
        if let Some(m) = months.get(&month) {
            return Ok(m.clone());
        }
        let ks = self
            .db
            .keyspace(&keyspace_name(month), chunk_keyspace_options)?;
        let m = Month::new(ks, ChunkStats::default());
        months.insert(month, m.clone());
        Ok(m)
    }

    /// Writes a series' points (sorted, non-empty) as chunks, merging with stored chunks.
    fn write_points(&self, id: SeriesId, points: &Points) -> Result<()> {
        let mut i = 0;
        while i < points.len() {
            let month = month_of(points.ts()[i]);
            let j = match next_month_start_ms(month) {
                Some(next) => points.lower_bound(next),
                None => points.len(),
            };
            let m = self.month_keyspace(month)?;
            self.write_month(&m, id, &points.part(i, j))?;
            i = j;
        }
        Ok(())
    }

    /// Writes points of one month. Each step takes the points falling into one stored chunk's
    /// range (merged into it, new points winning on an equal ts) or into the gap before the
    /// next stored chunk (appended to the previous chunk while it has room, else new chunks),
    /// so only chunks that really overlap are rewritten and series chunks never overlap.
    fn write_month(&self, m: &Month, id: SeriesId, g: &Points) -> Result<()> {
        let ks = &m.ks;
        let ts = g.ts();
        let mut i = 0;
        while i < g.len() {
            let t = ts[i];
            let pred = self.last_at_or_before(ks, id, t)?;
            match pred {
                Some(p) if p.header.last_ts >= t => {
                    let j = ts.partition_point(|&x| x <= p.header.last_ts);
                    let existing = self.decode(ks, id, &p)?;
                    let merged = Points::merge(&existing, &g.part(i, j));
                    self.replace(m, id, Some(&p), &merged)?;
                    i = j;
                }
                pred => {
                    let j = match self.first_after(ks, id, t)? {
                        Some(next_start) => g.lower_bound(next_start),
                        None => g.len(),
                    };
                    let run = g.part(i, j);
                    match pred {
                        Some(p)
                            if p.header.point_count as usize + run.len()
                                <= self.chunk_points_max =>
                        {
                            let existing = self.decode(ks, id, &p)?;
                            let merged = Points::merge(&existing, &run);
                            self.replace(m, id, Some(&p), &merged)?;
                        }
                        _ => self.replace(m, id, None, &run)?,
                    }
                    i = j;
                }
            }
        }
        Ok(())
    }

    /// Atomically replaces the chunk `old` of month `m` (if any) by `points`, split into balanced chunks
    /// of at most `chunk_points_max` points, and the month's counts.
    fn replace(&self, m: &Month, id: SeriesId, old: Option<&Found>, points: &Points) -> Result<()> {
        assert!(!points.is_empty(), "replace with no points");
        let pieces = points.len().div_ceil(self.chunk_points_max.max(1));
        let piece_len = points.len().div_ceil(pieces);
        let ks = &m.ks;
        let old_start = old.map(|o| o.start_ts);
        let mut batch = self.batch();
        let mut added = ChunkStats::default();
        let mut overwritten = false;
        let mut lo = 0;
        while lo < points.len() {
            let hi = (lo + piece_len).min(points.len());
            let piece = points.part(lo, hi);
            let start = points.ts()[lo];
            overwritten |= old_start == Some(start);
            let blob = chunk::encode(&piece).map_err(|e| Error::Encode(e.0))?;
            added.add(ChunkStats::chunk((hi - lo) as u32, blob.len()));
            batch.insert(ks, chunk_key(id, start), blob);
            lo = hi;
        }
        if let (Some(old), false) = (old_start, overwritten) {
            batch.remove(ks, chunk_key(id, old));
        }
        let mut committed = m.stats.committed.lock();
        let mut stats = *committed;
        if let Some(old) = old {
            stats.sub(old.stats());
        }
        stats.add(added);
        batch.insert(ks, STATS_KEY, encode_stats(&stats));
        batch.commit()?;
        *committed = stats;
        m.stats.publish(stats);
        Ok(())
    }

    fn found(&self, ks: &Keyspace, id: SeriesId, guard: fjall::Guard) -> Result<Found> {
        let (key, blob) = guard.into_inner()?;
        let start_ts = key_start_ts(&key).ok_or_else(|| Error::Corrupt {
            location: format!("{}/{key:?}", ks.name()),
            reason: "chunk key is not 16 bytes".into(),
        })?;
        let header = chunk::header(&blob).map_err(|e| corrupt(ks, id, start_ts, e.0))?;
        if header.first_ts != start_ts {
            return Err(corrupt(
                ks,
                id,
                start_ts,
                format!("header starts at {}", header.first_ts),
            ));
        }
        Ok(Found {
            start_ts,
            header,
            blob,
        })
    }

    fn decode(&self, ks: &Keyspace, id: SeriesId, found: &Found) -> Result<Points> {
        chunk::decode(&found.blob).map_err(|e| corrupt(ks, id, found.start_ts, e.0))
    }

    /// The chunk of `id` with the greatest start ts `<= t`.
    fn last_at_or_before(&self, ks: &Keyspace, id: SeriesId, t: i64) -> Result<Option<Found>> {
        match ks
            .range(chunk_key(id, i64::MIN)..=chunk_key(id, t))
            .next_back()
        {
            Some(guard) => self.found(ks, id, guard).map(Some),
            None => Ok(None),
        }
    }

    /// The start ts of the first chunk of `id` starting after `t`.
    fn first_after(&self, ks: &Keyspace, id: SeriesId, t: i64) -> Result<Option<i64>> {
        let range = (
            Bound::Excluded(chunk_key(id, t)),
            Bound::Included(chunk_key(id, i64::MAX)),
        );
        match ks.range(range).next() {
            Some(guard) => Ok(Some(self.found(ks, id, guard)?.start_ts)),
            None => Ok(None),
        }
    }

    /// Deletes the stored points of `id` with `start <= ts < end`: chunks wholly inside go, chunks that
    /// overlap are rewritten with the points outside. Not synced: the next `write_latest_and_sync` makes
    /// it durable, like any chunk write. Returns how many points it deleted.
    fn delete_range(&self, id: SeriesId, start: i64, end: i64) -> Result<usize> {
        if start >= end {
            return Ok(0);
        }
        let months: Vec<Month> = self
            .months
            .read()
            .range(month_of(start)..=month_of(end - 1))
            .map(|(_, m)| m.clone())
            .collect();
        let mut deleted = 0;
        for m in &months {
            let ks = &m.ks;
            let lo = match self.last_at_or_before(ks, id, start)? {
                Some(p) if p.header.last_ts >= start => p.start_ts,
                _ => start,
            };
            let chunks: Vec<Found> = ks
                .range(chunk_key(id, lo)..chunk_key(id, end))
                .map(|guard| self.found(ks, id, guard))
                .collect::<Result<_>>()?;
            for found in chunks {
                if found.header.first_ts >= start && found.header.last_ts < end {
                    // Wholly inside the range: no need to decode it.
                    deleted += found.header.point_count as usize;
                    self.remove(m, id, &found)?;
                    continue;
                }
                let points = self.decode(ks, id, &found)?;
                let kept = points.without_range(start, end);
                if kept.len() == points.len() {
                    continue;
                }
                deleted += points.len() - kept.len();
                if kept.is_empty() {
                    self.remove(m, id, &found)?;
                } else {
                    self.replace(m, id, Some(&found), &kept)?;
                }
            }
        }
        Ok(deleted)
    }

    /// Calls `f` with every stored chunk of `id` overlapping `[start, end)`, in `order`; the
    /// chunks are whole (the caller clips them). Stops when `f` breaks.
    fn scan(
        &self,
        id: SeriesId,
        start: i64,
        end: i64,
        order: Order,
        f: &mut dyn FnMut(&Points) -> ControlFlow<()>,
    ) -> Result<ControlFlow<()>> {
        if start >= end {
            return Ok(ControlFlow::Continue(()));
        }
        let mut keyspaces: Vec<Keyspace> = self
            .months
            .read()
            .range(month_of(start)..=month_of(end - 1))
            .map(|(_, m)| m.ks.clone())
            .collect();
        if order == Order::Desc {
            keyspaces.reverse();
        }
        for ks in &keyspaces {
            // Only the chunk holding `start` can begin before it.
            let lo = match self.last_at_or_before(ks, id, start)? {
                Some(p) if p.header.last_ts >= start => p.start_ts,
                _ => start,
            };
            let range = ks.range(chunk_key(id, lo)..chunk_key(id, end));
            let iter: Box<dyn Iterator<Item = fjall::Guard>> = match order {
                Order::Asc => Box::new(range),
                Order::Desc => Box::new(range.rev()),
            };
            for guard in iter {
                let found = self.found(ks, id, guard)?;
                let points = self.decode(ks, id, &found)?;
                if f(&points).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }

    /// Removes the stored chunk `found` of month `m` and counts it out (not synced, as every chunk write).
    fn remove(&self, m: &Month, id: SeriesId, found: &Found) -> Result<()> {
        let mut batch = self.batch();
        batch.remove(&m.ks, chunk_key(id, found.start_ts));
        let mut committed = m.stats.committed.lock();
        let mut stats = *committed;
        stats.sub(found.stats());
        batch.insert(&m.ks, STATS_KEY, encode_stats(&stats));
        batch.commit()?;
        *committed = stats;
        m.stats.publish(stats);
        Ok(())
    }

    fn chunk_stats(&self) -> ChunkStats {
        let mut total = ChunkStats::default();
        for m in self.months.read().values() {
            total.add(m.stats.published());
        }
        total
    }

    /// Drops every month keyspace that ends at or before `cutoff_ms`; returns how many.
    fn drop_months_before(&self, cutoff_ms: i64) -> Result<usize> {
        let mut months = self.months.write();
        let doomed: Vec<i64> = months
            .keys()
            .copied()
            .filter(|&m| next_month_start_ms(m).is_some_and(|next| next <= cutoff_ms))
            .collect();
        for month in &doomed {
            if let Some(m) = months.remove(month) {
                self.db.delete_keyspace(m.ks)?;
            }
        }
        Ok(doomed.len())
    }
}

fn corrupt(ks: &Keyspace, id: SeriesId, start_ts: i64, reason: String) -> Error {
    Error::Corrupt {
        location: format!("{}/series {}/chunk {start_ts}", ks.name(), id.0),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_keys_sort_by_series_then_time() {
        let id = SeriesId(7);
        let keys = [
            chunk_key(SeriesId(6), i64::MAX),
            chunk_key(id, i64::MIN),
            chunk_key(id, -1),
            chunk_key(id, 0),
            chunk_key(id, 1_700_000_000_000),
            chunk_key(id, i64::MAX),
            chunk_key(SeriesId(8), i64::MIN),
        ];
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(key_start_ts(&chunk_key(id, -5)), Some(-5));
        assert_eq!(key_start_ts(&[0; 3]), None);
    }

    fn longs(ts: impl IntoIterator<Item = i64>) -> Points {
        let mut points = Points::new();
        for t in ts {
            points.upsert(t, &Value::Long(t));
        }
        points
    }

    #[test]
    fn stats_records_round_trip_and_their_key_is_in_no_series_range() {
        let stats = ChunkStats {
            chunk_count: 3,
            point_count: u64::MAX,
            bytes: 1 << 40,
        };
        assert_eq!(decode_stats(&encode_stats(&stats)), Some(stats));
        assert_eq!(decode_stats(&[0; 23]), None);
        for id in [SeriesId(0), SeriesId(u64::MAX - 1), SeriesId(u64::MAX)] {
            let key = STATS_KEY.as_slice();
            let inside = chunk_key(id, i64::MIN).as_slice() <= key
                && key <= chunk_key(id, i64::MAX).as_slice();
            assert!(!inside, "{id:?}");
        }
        assert!(chunk_key(SeriesId(u64::MAX - 1), i64::MAX).as_slice() < STATS_KEY.as_slice());
        assert!(STATS_KEY.as_slice() < chunk_key(SeriesId(u64::MAX), i64::MIN).as_slice());
    }

    #[test]
    fn the_last_series_id_reads_and_deletes_its_own_chunks_only() {
        let dir = tempfile::tempdir().unwrap();
        let jan = 1_704_067_200_000; // 2024-01-01
        let store = Store::open(dir.path(), 10).unwrap();
        for id in [SeriesId(u64::MAX - 1), SeriesId(u64::MAX)] {
            store.write_points(id, &longs(jan..jan + 25)).unwrap();
        }
        let mut seen = 0;
        let flow = store
            .scan(
                SeriesId(u64::MAX),
                i64::MIN,
                i64::MAX,
                Order::Desc,
                &mut |p| {
                    seen += p.len();
                    ControlFlow::Continue(())
                },
            )
            .unwrap();
        assert!(flow.is_continue());
        assert_eq!(seen, 25);
        assert_eq!(
            store
                .delete_range(SeriesId(u64::MAX), i64::MIN, i64::MAX)
                .unwrap(),
            25
        );
        let kept = store.chunk_stats().unwrap();
        assert_eq!(kept.point_count, 25);
        assert_eq!(store.count_chunk_stats().unwrap(), kept);
    }

    #[test]
    fn missing_malformed_and_unreadable_are_counted_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let jan = 1_704_067_200_000; // 2024-01-01
        let march = jan + 70 * 86_400_000;
        let store = Store::open(dir.path(), 10).unwrap();
        store
            .write_points(SeriesId(1), &longs(jan..jan + 25))
            .unwrap();
        store
            .write_points(SeriesId(2), &longs(march..march + 7))
            .unwrap();
        // A replace and a removal are counted too.
        store
            .write_points(SeriesId(1), &longs(jan + 3..jan + 5))
            .unwrap();
        assert_eq!(
            store.delete_range(SeriesId(1), jan + 20, jan + 25).unwrap(),
            5
        );
        let kept = store.chunk_stats().unwrap();
        assert_eq!(kept.point_count, 27);
        assert_eq!(store.count_chunk_stats().unwrap(), kept);
        let garbage = [9u8; 40];
        {
            // A store written before the records existed has none; a damaged one has a record that does
            // not decode, or a chunk whose header does not.
            let engine = store.engine().unwrap();
            let months = engine.months.read();
            months[&month_of(jan)].ks.remove(STATS_KEY).unwrap();
            let march_ks = &months[&month_of(march)].ks;
            march_ks.insert(STATS_KEY, [7u8; 5]).unwrap();
            march_ks
                .insert(chunk_key(SeriesId(3), march), garbage)
                .unwrap();
        }
        drop(store);
        let store = Store::open(dir.path(), 10).unwrap();
        let expected = ChunkStats {
            chunk_count: kept.chunk_count + 1,
            point_count: kept.point_count,
            bytes: kept.bytes + (CHUNK_KEY_LEN + garbage.len()) as u64,
        };
        assert_eq!(store.chunk_stats().unwrap(), expected);
        // And recorded: the next open reads the records.
        {
            let engine = store.engine().unwrap();
            for m in engine.months.read().values() {
                let record = m.ks.get(STATS_KEY).unwrap().unwrap();
                assert_eq!(decode_stats(&record), Some(m.stats.published()));
            }
        }
        drop(store);
        let store = Store::open(dir.path(), 10).unwrap();
        assert_eq!(store.chunk_stats().unwrap(), expected);
        assert_eq!(store.count_chunk_stats().unwrap(), expected);
    }
}
