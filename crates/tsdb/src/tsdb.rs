//! `Tsdb`: the store's public face. Series state lives in shards, each behind its own mutex and
//! holding whole entities, so one device record takes one lock and processors of different
//! log partitions (disjoint devices) rarely meet.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use compact_str::CompactString;
use fleetwire_model::{Kv, TsRecord, Value};
use parking_lot::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::head::Source;
use crate::latest::Latest;
use crate::query::{self, Query};
use crate::series::{EntitySeries, SeriesId, SeriesState, Shard};
use crate::store::{ChunkStats, Store, WriteState};

/// Entities with at most this many series have all their heads' tails prefetched before a message
/// is applied; beyond it a message most likely writes a few of many.
const PREFETCH_SERIES_MAX: usize = 16;
/// A head that reaches this many points, at a pace that fills the rest of its chunk within
/// `HEAD_FILL_MS` of data time, is given room for all the points it will be sealed at, at once: a busy
/// series fills its head within the minute anyway, and growing it by doubling reallocated and copied it
/// five more times on the way, each time into fresh pages (on this kind of VM a fresh page costs a host
/// fault). Any slower series keeps growing by doubling, so it holds at most twice its points rather than
/// a whole chunk's room for minutes; and a fleet of such series that started together (every one
/// crossing 32 points in the same second) does not ask for all its heads' memory in that second.
const HEAD_RESERVE_AT: usize = 32;
const HEAD_FILL_MS: i64 = 60_000;
/// A head that reaches this many points is given room for between two and four times as many, fixed per
/// series ([`Tsdb::jittered_capacity`]), and grows by doubling from there. Devices that report at one rate
/// and started together fill their heads together: growing from the same capacity, every head of such a
/// fleet reallocated within the same fifth of a second each time it doubled (measured at 50,000 msg/s,
/// 30,000 series at 5 points/s: the server's RSS jumped by 33 MB at 12.8 s of load and by 68 MB at 25.6 s,
/// when the heads crossed 64 and 128 points). From capacities spread over an octave those reallocations
/// spread over the whole doubling period, and the RSS grows by a few MB a second instead.
const HEAD_JITTER_AT: usize = 8;
// A jittered head doubles at least once before `HEAD_RESERVE_AT`, where a busy one gets its whole chunk.
const _: () = assert!(4 * HEAD_JITTER_AT <= HEAD_RESERVE_AT);

/// Configuration of the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TsdbConfig {
    /// A head is sealed into a chunk when it holds this many points. Measured on smart-meter
    /// data (tests/compression.rs, with the spread sizes below): 0.60 B/point at 256, 0.24 at
    /// 1024, 0.18 at 4096 (0.54, 0.23, 0.18 at one size for all); 1024 takes most of the gain
    /// while a full head of LONG points stays ~17 KiB (with 100k series in memory that is the
    /// difference between 1.7 and 7 GB of worst-case heads) and a short query decodes 4x less.
    /// The server bounds heads further with `seal_older_than`. Each series seals at its own size
    /// between three quarters of this and this (see `Tsdb::seal_size`).
    pub chunk_points_max: usize,
    /// Number of lock shards; a power of two is not required.
    pub shard_count: usize,
}

impl Default for TsdbConfig {
    fn default() -> Self {
        TsdbConfig {
            chunk_points_max: 1024,
            shard_count: 64,
        }
    }
}

/// Sizes of the in-memory state, for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeadStats {
    pub series_count: u64,
    pub head_points: u64,
    pub head_bytes: u64,
}

/// Log positions whose data has been written to chunks but not fsync'd yet, per partition.
#[derive(Debug, Default)]
struct Unsynced {
    /// Sealed since the last `persist` started.
    sealed: HashMap<u16, u64>,
    /// Sealed before the running `persist` started: durable once its fsync returns.
    syncing: HashMap<u16, u64>,
}

fn lower(map: &mut HashMap<u16, u64>, partition: u16, pos: u64) {
    let slot = map.entry(partition).or_insert(pos);
    *slot = (*slot).min(pos);
}

/// The time-series store. `Send + Sync`: share it in an `Arc`.
pub struct Tsdb {
    store: Store,
    shards: Box<[Mutex<Shard>]>,
    next_series_id: AtomicU64,
    unsynced: Mutex<Unsynced>,
    /// Serializes `persist` calls, so `Unsynced::syncing` belongs to one fsync at a time.
    persist_lock: Mutex<()>,
    config: TsdbConfig,
}

impl Tsdb {
    /// Opens (or creates) the store in `dir`, loading the series index and latest values.
    pub fn open(dir: impl AsRef<Path>, config: TsdbConfig) -> Result<Tsdb> {
        let config = TsdbConfig {
            chunk_points_max: config
                .chunk_points_max
                .clamp(1, crate::chunk::CHUNK_POINTS_MAX as usize),
            shard_count: config.shard_count.max(1),
        };
        let store = Store::open(dir.as_ref(), config.chunk_points_max)?;
        let shards: Box<[Mutex<Shard>]> = (0..config.shard_count)
            .map(|_| Mutex::new(Shard::default()))
            .collect();
        let tsdb = Tsdb {
            store,
            shards,
            next_series_id: AtomicU64::new(0),
            unsynced: Mutex::new(Unsynced::default()),
            persist_lock: Mutex::new(()),
            config,
        };
        tsdb.load()?;
        Ok(tsdb)
    }

    fn load(&self) -> Result<()> {
        let mut owner = HashMap::new();
        let mut next_id = 0;
        for (id, entity, key) in self.store.load_series()? {
            next_id = next_id.max(id.0.saturating_add(1));
            owner.insert(id, (entity, key.clone()));
            self.shard(entity)
                .entities
                .entry(entity)
                .or_default()
                .insert(&key, SeriesState::new(id));
        }
        // Never an id that stored chunks or latest values use (see `Store::max_stored_series_id`).
        match self.store.max_stored_series_id()? {
            // Never given out (see `new_series`): only a damaged key names it.
            Some(u64::MAX) => {
                tracing::warn!(
                    "a stored key names series id u64::MAX, which no series gets; ignored"
                );
            }
            Some(max) if max >= next_id => {
                tracing::warn!(series = max, indexed_below = next_id, "stored data of series missing from the index (lost with the journal's tail); new series get higher ids");
                next_id = max + 1;
            }
            _ => {}
        }
        self.next_series_id.store(next_id, Ordering::Relaxed);
        for (id, ts, value) in self.store.load_latest()? {
            let Some((entity, key)) = owner.get(&id) else {
                // Its series record was in the journal's lost tail while the latest keyspace had
                // flushed (a power loss); skip it rather than refuse to start.
                tracing::warn!(series = id.0, "latest value of an unknown series ignored");
                continue;
            };
            if let Some(state) = self.shard(*entity).series_mut(*entity, key) {
                state.latest = Some((ts, value));
            }
        }
        Ok(())
    }

    fn shard_index(&self, entity: u128) -> usize {
        // Device ids are random UUIDs; fold all bits so sequential ids spread too.
        let folded = (entity as u64) ^ ((entity >> 64) as u64);
        (folded.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % self.shards.len()
    }

    fn shard(&self, entity: u128) -> MutexGuard<'_, Shard> {
        self.shards[self.shard_index(entity)].lock()
    }

    /// Finds or creates the series; a new series is recorded in the store first.
    fn series<'a>(
        &self,
        shard: &'a mut Shard,
        entity: u128,
        key: &str,
    ) -> Result<&'a mut SeriesState> {
        let keys = shard.entities.entry(entity).or_default();
        if keys.contains_key(key) {
            // Checked just above under the same lock.
            return Ok(keys.get_mut(key).expect("series present"));
        }
        self.new_series(keys, entity, key)
    }

    /// Creates the series `key` of `entity` (absent from `keys`), recording it in the store first.
    fn new_series<'a>(
        &self,
        keys: &'a mut EntitySeries,
        entity: u128,
        key: &str,
    ) -> Result<&'a mut SeriesState> {
        // Ids are given out in order from 0 and never wrap: running out takes 2^64 - 1 series, or a damaged
        // index record naming an id near the end.
        let id = self
            .next_series_id
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < u64::MAX).then_some(n + 1)
            })
            .map(SeriesId)
            .map_err(|_| Error::Corrupt {
                location: "series index".into(),
                reason: "no series id left to give out (an index record names one near u64::MAX)"
                    .into(),
            })?;
        self.store.insert_series(id, entity, key)?;
        Ok(keys.insert(key, SeriesState::new(id)))
    }

    /// Writes one point. An equal (series, ts) replaces the value: writes are idempotent, so
    /// replaying the ingest log changes nothing. Seals the head when it is full.
    pub fn write(
        &self,
        source: Source,
        entity: u128,
        key: &str,
        ts: i64,
        value: &Value,
    ) -> Result<()> {
        self.store.check_writable()?;
        let mut shard = self.shard(entity);
        let state = self.series(&mut shard, entity, key)?;
        self.apply(state, source, ts, value)
    }

    /// Writes the values a device reported for one timestamp, taking the shard lock once.
    pub fn write_kvs(&self, source: Source, entity: u128, ts: i64, kvs: &[Kv]) -> Result<()> {
        self.store.check_writable()?;
        if kvs.is_empty() {
            return Ok(());
        }
        let mut shard = self.shard(entity);
        let keys = shard.entities.entry(entity).or_default();
        self.apply_group(keys, source, entity, ts, kvs)
    }

    /// Writes all records of one device message (one ingest-log record), taking the lock once.
    pub fn write_records(&self, source: Source, entity: u128, records: &[TsRecord]) -> Result<()> {
        self.store.check_writable()?;
        if records.iter().all(|r| r.kvs.is_empty()) {
            return Ok(());
        }
        let mut shard = self.shard(entity);
        // One entity lookup for the whole message.
        let keys = shard.entities.entry(entity).or_default();
        // A device's message usually writes every series it has; start loading them together: first
        // the (key, state) entries (one vector, whose address is in the entity's slot), then their heads'
        // tails (see `Points::prefetch_tail`), whose addresses are in the states.
        if keys.len() <= PREFETCH_SERIES_MAX {
            keys.prefetch();
            for state in keys.values() {
                state.head.points.prefetch_tail();
            }
        }
        for record in records {
            self.apply_group(keys, source, entity, record.ts, &record.kvs)?;
        }
        Ok(())
    }

    /// Starts loading `entity`'s series (their keys and states) into the cache, for a write of it a few
    /// records from now; then [`Tsdb::prefetch_heads`], a little later, its heads. A hint only.
    pub fn prefetch_series(&self, entity: u128) {
        if let Some(keys) = self.shard(entity).entities.get(&entity) {
            if keys.len() <= PREFETCH_SERIES_MAX {
                keys.prefetch();
            }
        }
    }

    /// Starts loading the ends of `entity`'s heads, where its next write goes (see
    /// [`Tsdb::prefetch_series`]). A hint only.
    pub fn prefetch_heads(&self, entity: u128) {
        if let Some(keys) = self.shard(entity).entities.get(&entity) {
            if keys.len() <= PREFETCH_SERIES_MAX {
                for state in keys.values() {
                    state.head.points.prefetch_tail();
                }
            }
        }
    }

    /// Writes one timestamp's values into the series of `keys` (one entity's), creating the missing ones:
    /// one key lookup per value once its series exists.
    fn apply_group(
        &self,
        keys: &mut EntitySeries,
        source: Source,
        entity: u128,
        ts: i64,
        kvs: &[Kv],
    ) -> Result<()> {
        for kv in kvs {
            if let Some(state) = keys.get_mut(kv.key.as_str()) {
                self.apply(state, source, ts, &kv.value)?;
            } else {
                let state = self.new_series(keys, entity, &kv.key)?;
                self.apply(state, source, ts, &kv.value)?;
            }
        }
        Ok(())
    }

    fn apply(&self, state: &mut SeriesState, source: Source, ts: i64, value: &Value) -> Result<()> {
        let held = state.head.len();
        if held == HEAD_JITTER_AT {
            // Only capacity changes; a head that kept its buffers after a seal has room already.
            state
                .head
                .points
                .reserve_exact(Self::jittered_capacity(state.id) - held);
        } else if held == HEAD_RESERVE_AT {
            state
                .head
                .reserve_if_busy(self.seal_size(state.id), HEAD_FILL_MS);
        }
        state.head.insert(source, ts, value);
        state.observe(ts, value);
        if state.head.len() >= self.seal_size(state.id) {
            self.seal_series(state)?;
        }
        Ok(())
    }

    /// The number of points at which the head of series `id` is sealed: `chunk_points_max` less up
    /// to a quarter, fixed per series. Devices that report at one rate and started together fill
    /// their heads together; with one threshold every series of a fleet would seal in the same
    /// second (measured: 30,000 chunk encodes in one burst, a processor busy for a second and
    /// PUBACK p99 at 50k msg/s going from 14 to 60 ms). Spread over a quarter of the fill time,
    /// the seals stay spread, as each series then seals at its own period.
    fn seal_size(&self, id: SeriesId) -> usize {
        let max = self.config.chunk_points_max;
        let spread = (max / 4) as u64 + 1;
        let mixed = id.0.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        max - (mixed % spread) as usize
    }

    /// The capacity a head of series `id` gets at [`HEAD_JITTER_AT`] points: from twice to just under four
    /// times that, fixed per series and spread evenly over the fleet.
    fn jittered_capacity(id: SeriesId) -> usize {
        let mixed = id.0.wrapping_add(1).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 40;
        2 * HEAD_JITTER_AT + (mixed % (2 * HEAD_JITTER_AT) as u64) as usize
    }

    /// The number of points at which the head of `entity`'s series `key` is sealed ([`Tsdb::seal_size`]);
    /// `None` if there is no such series.
    pub fn seal_size_of(&self, entity: u128, key: &str) -> Option<usize> {
        let id = self.shard(entity).series(entity, key)?.id;
        Some(self.seal_size(id))
    }

    /// Writes the head of one series as chunk(s) and empties it. Its log positions stay
    /// pinned (in `unsynced`) until the next `persist` has fsync'd the chunks.
    fn seal_series(&self, state: &mut SeriesState) -> Result<bool> {
        if state.head.is_empty() {
            return Ok(false);
        }
        self.store.write_points(state.id, &state.head.points)?;
        {
            let mut unsynced = self.unsynced.lock();
            for &(partition, pos) in state.head.pins() {
                lower(&mut unsynced.sealed, partition, pos);
            }
        }
        state
            .head
            .clear(state.head.len() >= self.seal_size(state.id));
        Ok(true)
    }

    /// Seals every head matching `pred`, one series per lock acquisition so writers of a
    /// shard wait for one chunk encode at a time, not for the whole sweep. Returns how many.
    ///
    /// A series whose seal fails on its own data (a corrupt stored chunk it must merge with, an
    /// encode error) is skipped with a warning: its head keeps its points and its log pin, so
    /// nothing is lost, and every other series still seals, so the log behind them can be trimmed.
    /// A storage failure (which poisons the store) stops the sweep.
    fn seal_where(&self, pred: impl Fn(&SeriesState) -> bool) -> Result<usize> {
        self.seal_where_until(pred, None).map(|(sealed, _)| sealed)
    }

    /// [`Tsdb::seal_where`] that stops at `deadline` (checked between series); also returns whether every
    /// matching head was sealed.
    fn seal_where_until(
        &self,
        pred: impl Fn(&SeriesState) -> bool,
        deadline: Option<Instant>,
    ) -> Result<(usize, bool)> {
        self.store.check_writable()?;
        let mut sealed = 0;
        for shard in self.shards.iter() {
            let candidates: Vec<(u128, CompactString)> = {
                let shard = shard.lock();
                shard
                    .entities
                    .iter()
                    .flat_map(|(entity, keys)| {
                        keys.iter()
                            .filter(|(_, s)| !s.head.is_empty() && pred(s))
                            .map(|(k, _)| (*entity, k.clone()))
                    })
                    .collect()
            };
            for (entity, key) in candidates {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok((sealed, false));
                }
                let mut shard = shard.lock();
                if let Some(state) = shard.series_mut(entity, &key) {
                    if state.head.is_empty() || !pred(state) {
                        continue;
                    }
                    match self.seal_series(state) {
                        Ok(true) => sealed += 1,
                        Ok(false) => {}
                        Err(e @ (Error::Corrupt { .. } | Error::Encode(_))) => {
                            tracing::warn!(series = state.id.0, error = %e, "cannot seal a series; its head keeps its points");
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Ok((sealed, true))
    }

    /// Seals every non-empty head. Returns the number of heads sealed.
    pub fn seal_all(&self) -> Result<usize> {
        self.seal_where(|_| true)
    }

    /// Seals the heads whose oldest point is at least `age_ms` older than `now_ms` (time is
    /// passed in). Bounds how far back in data time a head reaches.
    pub fn seal_older_than(&self, now_ms: i64, age_ms: i64) -> Result<usize> {
        let cutoff = now_ms.saturating_sub(age_ms);
        self.seal_where(|s| {
            s.head
                .points
                .first_ts()
                .is_some_and(|first| first <= cutoff)
        })
    }

    /// Seals the heads holding data from log `partition` below `source_pos`, so the log can be
    /// trimmed up to `source_pos` after the next `persist`.
    pub fn seal_heads_below(&self, partition: u16, source_pos: u64) -> Result<usize> {
        self.seal_where(|s| {
            s.head
                .min_source(partition)
                .is_some_and(|pos| pos < source_pos)
        })
    }

    /// [`Tsdb::seal_heads_below`] for at most until `deadline`, so that a caller applying records between
    /// checkpoints is not stopped for long when many heads are due at once; returns the heads sealed and
    /// whether all that were due are. The rest stay pinned in the log until a later call seals them.
    pub fn seal_heads_below_until(
        &self,
        partition: u16,
        source_pos: u64,
        deadline: Instant,
    ) -> Result<(usize, bool)> {
        self.seal_where_until(
            |s| {
                s.head
                    .min_source(partition)
                    .is_some_and(|pos| pos < source_pos)
            },
            Some(deadline),
        )
    }

    /// The lowest log position of `partition` whose data is not yet durable in chunks (in a
    /// head, or sealed but not yet fsync'd by `persist`); `None` when everything written from
    /// that partition is durable. The log of that partition may be trimmed below it.
    /// Scans every series: O(series), meant for a checkpoint every few seconds.
    pub fn min_unsealed_source(&self, partition: u16) -> Option<u64> {
        self.min_unsealed_sources().get(&partition).copied()
    }

    /// [`Tsdb::min_unsealed_source`] of every partition that has undurable data, in one scan.
    pub fn min_unsealed_sources(&self) -> HashMap<u16, u64> {
        // Heads first, then `unsynced`: a seal moves a pin from a head to `unsynced` under the
        // shard lock, so a pin is never missed in between.
        let mut min = HashMap::new();
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for state in shard.all_series() {
                for &(partition, pos) in state.head.pins() {
                    lower(&mut min, partition, pos);
                }
            }
        }
        let unsynced = self.unsynced.lock();
        for map in [&unsynced.sealed, &unsynced.syncing] {
            for (&partition, &pos) in map {
                lower(&mut min, partition, pos);
            }
        }
        min
    }

    /// Makes everything sealed so far durable: writes the changed latest values, then fsyncs
    /// fjall's journal. Head data is NOT made durable (seal first); after a crash the server
    /// replays its ingest log from `min_unsealed_source` to rebuild the heads.
    ///
    /// A latest value that is the newest point of its series' head is not written: replaying the
    /// log restores it with the head, and it is written once the head seals. In steady state that
    /// is almost every series, so a persist writes only the series that sealed since the last one
    /// instead of every series that received data (measured: 7-14% of the server's CPU).
    pub fn persist(&self) -> Result<()> {
        let _persisting = self.persist_lock.lock();
        self.store.check_writable()?;
        {
            let mut unsynced = self.unsynced.lock();
            let sealed = std::mem::take(&mut unsynced.sealed);
            for (partition, pos) in sealed {
                lower(&mut unsynced.syncing, partition, pos);
            }
        }
        let mut latest = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            for state in shard.all_series_mut() {
                if state.latest_dirty && !state.latest_in_head() {
                    if let Some((ts, value)) = &state.latest {
                        latest.push((state.id, crate::latest::encode(*ts, value)));
                    }
                    state.latest_dirty = false;
                }
            }
        }
        let written: Vec<SeriesId> = latest.iter().map(|(id, _)| *id).collect();
        if let Err(e) = self.store.write_latest_and_sync(latest) {
            // Not written: marked again, for the persist after a reopen.
            let written: std::collections::HashSet<SeriesId> = written.into_iter().collect();
            for shard in self.shards.iter() {
                for state in shard.lock().all_series_mut() {
                    state.latest_dirty |= written.contains(&state.id);
                }
            }
            return Err(e);
        }
        self.unsynced.lock().syncing.clear();
        Ok(())
    }

    /// Whether the store takes writes; see [`Tsdb::reopen`].
    pub fn write_state(&self) -> WriteState {
        self.store.write_state()
    }

    /// How many times [`Tsdb::reopen`] has reopened the storage engine. Whoever applies an ingest
    /// log to the store must, when this changes, replay the log from its last checkpoint before
    /// it checkpoints again: the old engine may have lost writes that were not yet persisted,
    /// and the records applied while it refused writes were not applied at all.
    pub fn generation(&self) -> u64 {
        self.store.generation()
    }

    /// Recovers a store that refuses writes after a failed write (typically a full disk, once
    /// space is back): closes the storage engine and opens its files again, as a restart would,
    /// while the in-memory series, heads and latest values stay. Rewrites the series index and
    /// marks every latest value to be rewritten by the next [`Tsdb::persist`], since the old
    /// engine may have lost some of either. Chunks it lost are still pinned in the ingest log:
    /// see [`Tsdb::generation`]. Returns false when the store was writable; fails after a
    /// failed fsync ([`WriteState::RefusedUntilRestart`]) or if the files cannot be opened (the
    /// store then stays poisoned, and a later call tries again).
    pub fn reopen(&self) -> Result<bool> {
        match self.store.write_state() {
            WriteState::Writable => return Ok(false),
            WriteState::RefusedUntilRestart => return Err(Error::Poisoned),
            WriteState::RefusedUntilReopen => {}
        }
        // While the store is poisoned no series is created (its record is written first), so this
        // list is complete when the engine is swapped.
        // Under the persist lock, so that no persist that started before the reopen clears the marks.
        let _persisting = self.persist_lock.lock();
        let mut series: Vec<(SeriesId, u128, CompactString)> = Vec::new();
        let mut no_latest = Vec::new();
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            for (&entity, keys) in shard.entities.iter_mut() {
                for (key, state) in keys.iter_mut() {
                    series.push((state.id, entity, key.clone()));
                    if state.latest.is_some() {
                        state.latest_dirty = true;
                    } else {
                        // Deleted: the old engine may have lost the removal.
                        no_latest.push(state.id);
                    }
                }
            }
        }
        let records: Vec<(SeriesId, u128, &str)> = series
            .iter()
            .map(|(id, entity, key)| (*id, *entity, &**key))
            .collect();
        self.store.reopen(&records, &no_latest)?;
        Ok(true)
    }

    /// Deletes the points of one key of `entity` with `start <= ts < end`, from the head and the stored
    /// chunks (ThingsBoard's `timeseries/delete`). When the latest value falls in the range and
    /// `delete_latest` is set, it goes too, or, with `rewrite_latest`, is replaced by the newest point
    /// left. Idempotent, so replaying it after a crash is harmless. Returns how many points it deleted.
    pub fn delete(
        &self,
        entity: u128,
        key: &str,
        start: i64,
        end: i64,
        delete_latest: bool,
        rewrite_latest: bool,
    ) -> Result<usize> {
        self.store.check_writable()?;
        // Under the shard lock, so no write or seal of this series interleaves.
        let mut shard = self.shard(entity);
        let Some(state) = shard.series_mut(entity, key) else {
            return Ok(0);
        };
        let mut deleted = state.head.delete_range(start, end);
        deleted += self.store.delete_range(state.id, start, end)?;
        let latest_in_range = state
            .latest
            .as_ref()
            .is_some_and(|(ts, _)| (start..end).contains(ts));
        if delete_latest && latest_in_range {
            let newest = if rewrite_latest {
                let head = state.head.points.slice(0, state.head.len());
                query::run(
                    &self.store,
                    state.id,
                    &head,
                    &Query::raw(i64::MIN, i64::MAX, 1, crate::Order::Desc),
                )?
                .into_iter()
                .next()
            } else {
                None
            };
            match newest {
                Some(point) => {
                    state.latest = Some(point);
                    state.latest_dirty = true;
                }
                None => {
                    state.latest = None;
                    state.latest_dirty = false;
                    self.store.remove_latest(state.id)?;
                }
            }
        }
        Ok(deleted)
    }

    /// Latest values of `entity` for `keys` (in the order asked, unknown keys skipped), or of
    /// all its keys in key order when `keys` is empty.
    pub fn latest<K: AsRef<str>>(&self, entity: u128, keys: &[K]) -> Vec<Latest> {
        let shard = self.shard(entity);
        let Some(series) = shard.entities.get(&entity) else {
            return Vec::new();
        };
        let make = |key: &str, state: &SeriesState| {
            state.latest.as_ref().map(|(ts, value)| Latest {
                key: key.to_owned(),
                ts: *ts,
                value: value.clone(),
            })
        };
        if keys.is_empty() {
            series
                .iter()
                .filter_map(|(key, state)| make(key, state))
                .collect()
        } else {
            keys.iter()
                .filter_map(|key| {
                    series
                        .get(key.as_ref())
                        .and_then(|state| make(key.as_ref(), state))
                })
                .collect()
        }
    }

    /// The keys `entity` has time series for, in byte order of the key.
    pub fn keys(&self, entity: u128) -> Vec<String> {
        let shard = self.shard(entity);
        shard
            .entities
            .get(&entity)
            .map(|keys| keys.keys().map(|k| k.to_string()).collect())
            .unwrap_or_default()
    }

    /// Runs a query on one key of `entity`; an unknown key yields no points.
    pub fn query(&self, entity: u128, key: &str, query: &Query) -> Result<Vec<(i64, Value)>> {
        query.validate()?;
        let (start, end) = query.range();
        // Copy the head before reading chunks: a seal racing with us then shows its points
        // twice (merged away by ts), never zero times.
        let (id, head) = {
            let shard = self.shard(entity);
            let Some(state) = shard.series(entity, key) else {
                return Ok(Vec::new());
            };
            (state.id, state.head.points.slice_range(start, end))
        };
        query::run(&self.store, id, &head, query)
    }

    /// Drops the stored chunks of every calendar month (UTC) that ends at or before
    /// `cutoff_ms`; returns the number of months dropped. Latest values are kept.
    pub fn drop_months_before(&self, cutoff_ms: i64) -> Result<usize> {
        self.store.drop_months_before(cutoff_ms)
    }

    /// Counts and sizes of the stored chunks, as the store keeps them write by write (no read of the
    /// chunks).
    pub fn chunk_stats(&self) -> Result<ChunkStats> {
        self.store.chunk_stats()
    }

    /// [`Tsdb::chunk_stats`] counted from every stored chunk's header: reads the whole store, for checks.
    pub fn count_chunk_stats(&self) -> Result<ChunkStats> {
        self.store.count_chunk_stats()
    }

    /// Sizes of the in-memory heads.
    pub fn head_stats(&self) -> HeadStats {
        let mut stats = HeadStats::default();
        for shard in self.shards.iter() {
            let shard = shard.lock();
            for state in shard.all_series() {
                stats.series_count += 1;
                stats.head_points += state.head.len() as u64;
                stats.head_bytes += state.head.points.heap_bytes() as u64;
            }
        }
        stats
    }

    /// The configuration in force.
    pub fn config(&self) -> &TsdbConfig {
        &self.config
    }
}

// The server shares one store between processor threads and REST handlers.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tsdb>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_series_never_gets_the_id_of_stored_chunks_the_index_lost() {
        use crate::{Order, Query};
        let dir = tempfile::tempdir().unwrap();
        let config = TsdbConfig::default();
        let ts = 1_704_067_200_000; // 2024-01-01
        let src = |pos| Source { partition: 0, pos };
        let all = Query::raw(i64::MIN, i64::MAX, usize::MAX, Order::Asc);
        let db = Tsdb::open(dir.path(), config.clone()).unwrap();
        db.write(src(0), 1, "a", ts, &Value::Long(1)).unwrap();
        db.write(src(1), 2, "b", ts, &Value::Long(2)).unwrap();
        db.seal_all().unwrap();
        db.persist().unwrap();
        // A power loss after the chunks' keyspace flushed and before the journal holding the index record
        // of series 1 (entity 2's "b") was synced.
        db.store.forget_series(SeriesId(1)).unwrap();
        drop(db);
        let db = Tsdb::open(dir.path(), config).unwrap();
        db.write(src(2), 3, "c", ts + 1, &Value::Long(3)).unwrap();
        assert_eq!(
            db.query(3, "c", &all).unwrap(),
            vec![(ts + 1, Value::Long(3))]
        );
        db.seal_all().unwrap();
        assert_eq!(
            db.query(3, "c", &all).unwrap(),
            vec![(ts + 1, Value::Long(3))]
        );
        assert_eq!(db.query(1, "a", &all).unwrap(), vec![(ts, Value::Long(1))]);
        // The store's own record of what it holds: series 1's orphaned chunk and the two others.
        assert_eq!(db.store.max_stored_series_id().unwrap(), Some(2));
    }

    #[test]
    fn a_damaged_key_naming_the_last_series_id_is_ignored_not_wrapped_around() {
        use crate::points::Points;
        use crate::{Order, Query};
        let dir = tempfile::tempdir().unwrap();
        let config = TsdbConfig::default();
        let ts = 1_704_067_200_000; // 2024-01-01
        let src = |pos| Source { partition: 0, pos };
        let all = Query::raw(i64::MIN, i64::MAX, usize::MAX, Order::Asc);
        let db = Tsdb::open(dir.path(), config.clone()).unwrap();
        db.write(src(0), 1, "a", ts, &Value::Long(1)).unwrap();
        let mut damaged = Points::new();
        damaged.upsert(ts, &Value::Long(-1));
        db.store.write_points(SeriesId(u64::MAX), &damaged).unwrap();
        db.seal_all().unwrap();
        db.persist().unwrap();
        drop(db);
        let db = Tsdb::open(dir.path(), config).unwrap();
        db.write(src(1), 2, "b", ts, &Value::Long(2)).unwrap();
        assert_eq!(db.query(2, "b", &all).unwrap(), vec![(ts, Value::Long(2))]);
        assert_eq!(db.query(1, "a", &all).unwrap(), vec![(ts, Value::Long(1))]);
        assert_eq!(db.next_series_id.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn heads_get_capacities_spread_over_an_octave_once_they_hold_a_few_points() {
        let capacities: Vec<usize> = (0..64u64)
            .map(|id| Tsdb::jittered_capacity(SeriesId(id)))
            .collect();
        assert!(capacities
            .iter()
            .all(|&c| (2 * HEAD_JITTER_AT..4 * HEAD_JITTER_AT).contains(&c)));
        let distinct: std::collections::HashSet<_> = capacities.iter().collect();
        assert!(distinct.len() >= 12, "{capacities:?}");

        // Series that receive the same points at the same pace double their heads at different lengths.
        let dir = tempfile::tempdir().unwrap();
        let db = Tsdb::open(dir.path(), TsdbConfig::default()).unwrap();
        let source = Source {
            partition: 0,
            pos: 0,
        };
        let keys: Vec<String> = (0..16).map(|k| format!("k{k}")).collect();
        for ts in 0..(HEAD_JITTER_AT as i64 + 1) {
            for key in &keys {
                db.write(source, 7, key, ts, &Value::Long(ts)).unwrap();
            }
        }
        let shard = db.shard(7);
        let mut seen = std::collections::HashSet::new();
        for key in &keys {
            let state = shard.series(7, key).unwrap();
            assert_eq!(state.head.len(), HEAD_JITTER_AT + 1);
            assert_eq!(
                state.head.points.capacity(),
                Tsdb::jittered_capacity(state.id)
            );
            seen.insert(state.head.points.capacity());
        }
        assert!(seen.len() > 4, "{seen:?}");
    }
}
