//! One processor per log partition: reads durable records and applies them to the stores.
//!
//! Applying is idempotent (the time-series store keeps one value per (series, ts), attributes keep the
//! newest write), so replaying records after a crash changes nothing that was already applied. The
//! processor checkpoints the log at the oldest offset whose data is not yet persisted by the stores:
//! segments before it are reclaimed, records after it are replayed on the next start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::VecDeque;

use fleetwire_log::Log;
use fleetwire_model::record::{self, AttributeScope};
use fleetwire_model::{Record, TsRecord};
use fleetwire_tsdb::{Source, Tsdb};
use uuid::Uuid;

use super::alarms::AlarmRules;
use super::attributes::AttributeStore;
use super::events::{Events, Interest, Update};
use super::now_ms;
use super::PartitionProgress;
use fleetwire_rules::Input;

/// How often the processor seals old heads, persists and checkpoints.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Longest a checkpoint seals heads before the processor goes back to applying records: when many heads are
/// due at once (a small disk budget, many series), sealing them all took seconds, during which nothing was
/// applied and the disk budget's grants dried up. What is left is sealed by the next checkpoints, which then
/// come every SEAL_BUDGET and 256 records instead of every CHECKPOINT_INTERVAL, unless the heads pin more than twice
/// `head_log_bytes_max` of the log: then they are all sealed at once, so the log stays within its budget.
const SEAL_BUDGET: Duration = Duration::from_millis(250);
/// Most groups, and entries per group, the decoding scratch keeps from one record to the next.
const SCRATCH_GROUPS_MAX: usize = 16;
const SCRATCH_ENTRIES_MAX: usize = 64;
/// How many records ahead of the one it applies a processor starts loading a device's series (their keys
/// and states) and alarm state, from the records already in its reader's buffer. A processor goes round
/// the devices, so each record's state is cold; loaded in turn, each level waited for the one before
/// (measured at half load: the processor's CPU by a third lower with this and [`HEADS_AHEAD`]).
const LOOKAHEAD: usize = 8;
/// How many records ahead the heads' ends and the alarm state's values are loaded: what the states loaded
/// at [`LOOKAHEAD`] point to.
const HEADS_AHEAD: usize = 3;
/// How long the processor sleeps waiting for new records before doing housekeeping anyway.
const IDLE_WAIT: Duration = Duration::from_millis(100);

pub(super) struct Processor {
    pub partition: u16,
    pub log: Arc<Log>,
    pub tsdb: Arc<Tsdb>,
    pub attributes: Arc<AttributeStore>,
    pub events: Arc<Events>,
    pub alarms: AlarmRules,
    pub event_queues: Arc<Vec<super::DeviceEventQueue>>,
    pub progress: Arc<Vec<PartitionProgress>>,
    pub shutdown: Arc<AtomicBool>,
    /// Heads holding log records older than this are sealed, so the log behind them can be reclaimed.
    pub head_age_max: Duration,
    /// Most log bytes of this partition that unsealed heads may pin.
    pub head_log_bytes_max: u64,
    /// While caught up, the least time from the start of one batch of records to the start of the next
    /// (`log.apply_interval_us`): the records of several commits are applied in one wake-up instead of one
    /// per commit. Zero applies each commit as it comes.
    pub apply_interval: Duration,
    /// Records below this offset had their events published before the processor started over from its
    /// checkpoint, so replaying them does not publish them again.
    pub quiet_below: u64,
    /// The first record since the processor started that could not be applied (the store refused it).
    pub first_failed: Option<u64>,
    /// The groups of the last telemetry record applied; the next one is decoded into their allocations.
    pub scratch: Vec<TsRecord>,
}

/// Why [`Processor::run_inner`] returned.
enum Exit {
    Stopped,
    /// The time-series store was reopened after a write failure ([`Tsdb::generation`]): it may have lost
    /// writes not yet persisted, and records applied while it refused writes were not applied, so the
    /// processor starts over from its checkpoint.
    StoreReopened,
}

impl Processor {
    pub fn run(mut self) {
        loop {
            match self.run_inner() {
                Ok(Exit::Stopped) => return,
                Ok(Exit::StoreReopened) => {
                    tracing::info!(
                        partition = self.partition,
                        "the time-series store was reopened; replaying the ingest log from the checkpoint"
                    );
                    self.restarting();
                }
                Err(e) => {
                    self.restarting();
                    // Acknowledged data stays in the log: the processor starts over from its checkpoint
                    // (applying is idempotent) rather than leave the partition unprocessed for good.
                    tracing::error!(partition = self.partition, error = %e, "processor failed; restarting it in 1 s");
                    if self.shutdown.load(Ordering::Acquire) {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }

    /// Before starting over from the checkpoint: what was applied since is published already, except from
    /// the first record that failed on.
    fn restarting(&mut self) {
        let applied = self.progress[usize::from(self.partition)]
            .applied
            .load(Ordering::Acquire);
        self.quiet_below = self
            .first_failed
            .take()
            .unwrap_or(applied)
            .max(self.quiet_below);
    }

    fn run_inner(&mut self) -> Result<Exit, super::IngestError> {
        let partition = self.partition;
        // Read before the checkpoint: a reopen after this point is seen at the next loop.
        let generation = self.tsdb.generation();
        let log_partition = u32::from(partition);
        let start = self.log.checkpoint_of(log_partition)?;
        let mut reader = self.log.reader(log_partition, start)?;
        self.alarms.start(start)?;
        let replay_started = Instant::now();
        let mut replayed = 0u64;
        let mut offset = start;
        let all_progress = self.progress.clone();
        let progress = &all_progress[usize::from(partition)];
        progress.applied.store(offset, Ordering::Release);
        // Replay is done once what the log held now is applied; measured by offset rather than by an
        // empty read, which steady new traffic may never give.
        let replay_end = self.log.end_offset(log_partition)?;
        progress.replayed.store(false, Ordering::Release);
        let mut last_checkpoint = Instant::now();
        let mut replaying = true;
        // (when, applied offset) samples, to find the log position that is `head_age_max` old.
        let mut history: VecDeque<(Instant, u64)> = VecDeque::new();
        // Whether the last checkpoint left due heads unsealed (see SEAL_BUDGET).
        let mut seal_pending = false;
        // (offset, telemetry entity) of the records peeked beyond the next one to apply.
        let mut ahead: VecDeque<(u64, Option<u128>)> = VecDeque::with_capacity(LOOKAHEAD);
        loop {
            if self.tsdb.generation() != generation {
                return Ok(Exit::StoreReopened);
            }
            // While due heads wait, checkpoints come every SEAL_BUDGET and after fewer records, so that sealing
            // gets most of the processor in slices rather than all of it at once.
            let (interval, records_between) = if seal_pending {
                (SEAL_BUDGET, 256)
            } else {
                (CHECKPOINT_INTERVAL, 4096)
            };
            let mut applied = 0u64;
            let batch_started = Instant::now();
            // Whether the batch ended with everything durable applied (rather than at a checkpoint).
            let mut caught_up = true;
            // Wall-clock time for alarm rules, read once per 256 records rather than per record.
            let mut now = now_ms();
            // Events queued before the records that follow them (a REST clear, then new data) are applied
            // first.
            self.device_events(now);
            loop {
                // Start loading what the records a few ahead will touch (see `LOOKAHEAD`).
                while ahead.len() < LOOKAHEAD {
                    let Some((at, payload)) = reader.peek_next() else {
                        break;
                    };
                    let entity = record::telemetry_entity(payload);
                    if let Some(entity) = entity {
                        self.alarms.prefetch_device(Uuid::from_u128(entity));
                        self.tsdb.prefetch_series(entity);
                    }
                    ahead.push_back((at, entity));
                }
                if let Some(&(_, Some(entity))) = ahead.get(HEADS_AHEAD) {
                    self.tsdb.prefetch_heads(entity);
                    self.alarms.prefetch_state(Uuid::from_u128(entity));
                }
                let Some(entry) = reader.next_record()? else {
                    break;
                };
                while ahead.front().is_some_and(|&(at, _)| at <= entry.offset) {
                    ahead.pop_front();
                }
                if applied.is_multiple_of(256) && applied > 0 {
                    now = now_ms();
                    self.alarms.flush_if_due(now);
                }
                if self.event_queues[usize::from(partition)]
                    .pending
                    .load(Ordering::Acquire)
                {
                    self.device_events(now);
                }
                self.alarms.at_record(entry.offset, entry.next_offset);
                self.apply(entry.offset, entry.payload, now);
                offset = entry.next_offset;
                progress.applied.store(offset, Ordering::Release);
                applied += 1;
                if applied.is_multiple_of(records_between) && last_checkpoint.elapsed() >= interval
                {
                    caught_up = false;
                    break;
                }
            }
            if offset >= replay_end {
                progress.replayed.store(true, Ordering::Release);
            }
            if replaying {
                replayed += applied;
                if applied == 0 {
                    replaying = false;
                    if replayed > 0 {
                        tracing::info!(
                            partition,
                            records = replayed,
                            elapsed_ms = replay_started.elapsed().as_millis() as u64,
                            "replayed the ingest log"
                        );
                    }
                }
            }
            let now = now_ms();
            self.device_events(now);
            self.alarms.at_event();
            self.alarms.tick(&self.tsdb, &self.attributes, now);
            // Caught up, or about to checkpoint: what the records caused is written before the log
            // may be trimmed past them; while it cannot be written, the log is not trimmed.
            let alarms_written = self.alarms.flush();
            let stopping = self.shutdown.load(Ordering::Acquire);
            if alarms_written && (stopping || last_checkpoint.elapsed() >= interval) {
                let now = Instant::now();
                history.push_back((now, offset));
                let mut aged = start;
                while let Some(&(when, at)) = history.front() {
                    if now.duration_since(when) < self.head_age_max {
                        break;
                    }
                    aged = at;
                    history.pop_front();
                }
                let seal_below = if stopping {
                    u64::MAX
                } else {
                    aged.max(offset.saturating_sub(self.head_log_bytes_max))
                };
                seal_pending = !self.checkpoint(offset, seal_below, generation);
                last_checkpoint = now;
            }
            if stopping {
                return Ok(Exit::Stopped);
            }
            if applied == 0 {
                self.log.wait_for_data(log_partition, offset, IDLE_WAIT)?;
            } else if caught_up && !replaying {
                // Caught up: let the next commits' records gather instead of waking for each commit. Every
                // wake-up takes a core just as the commit's PUBACKs go out, and on a small machine the
                // connections' threads then wait behind it (see `log.apply_interval_us`).
                let next = batch_started + self.apply_interval;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
        }
    }

    /// Feeds the queued device events (activity changes, REST alarm changes) to the alarm rules.
    fn device_events(&mut self, now: i64) {
        let queue = &self.event_queues[usize::from(self.partition)];
        queue.pending.store(false, Ordering::Release);
        let changes = std::mem::take(&mut *queue.events.lock());
        if changes.is_empty() {
            return;
        }
        // A REST clear may have changed what pending transitions assumed: write them first, so the
        // evaluator reads the store as it is.
        self.alarms.flush();
        self.alarms.at_event();
        for (device, event) in changes {
            let input = match &event {
                super::DeviceEvent::Activity(active) => Input::Activity { active: *active },
                super::DeviceEvent::Alarm(alarm_type, event) => Input::Alarm {
                    alarm_type,
                    event: *event,
                },
                super::DeviceEvent::Changed => {
                    self.alarms.forget(device);
                    continue;
                }
            };
            self.alarms
                .on_input(&self.tsdb, &self.attributes, device, input, now);
        }
    }

    fn apply(&mut self, offset: u64, bytes: &[u8], now: i64) {
        let source = Source {
            partition: self.partition,
            pos: offset,
        };
        let publish = offset >= self.quiet_below;
        // Telemetry, nearly every record, is decoded into the groups of the previous one: no allocation.
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = match record::decode_telemetry_into(bytes, &mut scratch) {
            Ok(Some(entity)) => self.apply_telemetry(source, entity, &scratch, publish, now),
            Ok(None) => match Record::decode(bytes) {
                Ok(record) => self.apply_other(source, record, publish, now),
                Err(e) => {
                    self.undecodable(offset, &e);
                    Ok(())
                }
            },
            Err(e) => {
                self.undecodable(offset, &e);
                Ok(())
            }
        };
        // A large record's groups are not kept: they would stay allocated for the life of the processor.
        if scratch.capacity() > SCRATCH_GROUPS_MAX
            || scratch
                .iter()
                .any(|g| g.kvs.capacity() > SCRATCH_ENTRIES_MAX)
        {
            scratch = Vec::new();
        }
        self.scratch = scratch;
        if let Err(e) = result {
            // The store is poisoned; the record stays in the log (the checkpoint cannot pass it) and is
            // replayed once the store is reopened, or after a restart.
            // One line when the store starts refusing, not one per record while it does.
            let refused = matches!(e, super::IngestError::Tsdb(fleetwire_tsdb::Error::Poisoned));
            if refused && self.first_failed.is_some() {
                tracing::debug!(partition = self.partition, offset, error = %e, "cannot apply a log record");
            } else {
                crate::sustained_warn!(partition = self.partition, offset, error = %e, "cannot apply a log record");
            }
            self.first_failed.get_or_insert(offset);
        }
    }

    fn apply_telemetry(
        &mut self,
        source: Source,
        entity: u128,
        records: &[TsRecord],
        publish: bool,
        now: i64,
    ) -> Result<(), super::IngestError> {
        self.tsdb.write_records(source, entity, records)?;
        let device = Uuid::from_u128(entity);
        self.alarms.on_input(
            &self.tsdb,
            &self.attributes,
            device,
            Input::Telemetry(records),
            now,
        );
        if publish && self.events.wants(device, Interest::TELEMETRY) {
            self.events
                .publish(device, &Update::Telemetry(Arc::new(records.to_vec())));
        }
        Ok(())
    }

    /// Records are validated before they are appended and CRC-checked by the log, so an undecodable one
    /// was written by a newer version: it is skipped loudly rather than stopping the partition.
    fn undecodable(&self, offset: u64, e: &record::RecordError) {
        tracing::error!(partition = self.partition, offset, error = %e, "undecodable log record");
    }

    /// A record other than telemetry (which [`record::decode_telemetry_into`] takes).
    fn apply_other(
        &mut self,
        source: Source,
        record: Record,
        publish: bool,
        now: i64,
    ) -> Result<(), super::IngestError> {
        let events = &self.events;
        match record {
            Record::Telemetry { entity, records } => {
                self.apply_telemetry(source, entity, &records, publish, now)
            }
            Record::Attributes {
                entity,
                scope,
                ts,
                kvs,
            } => {
                self.attributes.apply(entity, scope, ts, &kvs);
                let device = Uuid::from_u128(entity);
                self.alarms.on_input(
                    &self.tsdb,
                    &self.attributes,
                    device,
                    Input::Attributes { scope, kvs: &kvs },
                    now,
                );
                // Only SHARED changes are pushed to the device (reference 1.7).
                if publish
                    && scope == AttributeScope::Shared
                    && !kvs.is_empty()
                    && events.wants(device, Interest::SHARED_PUSH)
                {
                    events.publish(device, &Update::shared_saved(&kvs));
                }
                if publish && events.wants(device, Interest::ATTRIBUTES) {
                    let update = Update::Attributes {
                        scope,
                        ts,
                        kvs: Arc::new(kvs),
                        deleted: Arc::new(Vec::new()),
                    };
                    events.publish(device, &update);
                }
                Ok(())
            }
            Record::AttributesDeleted {
                entity,
                scope,
                ts,
                keys,
            } => {
                self.attributes.delete(entity, scope, &keys);
                let device = Uuid::from_u128(entity);
                self.alarms.on_input(
                    &self.tsdb,
                    &self.attributes,
                    device,
                    Input::AttributesDeleted { scope, keys: &keys },
                    now_ms(),
                );
                if publish
                    && scope == AttributeScope::Shared
                    && !keys.is_empty()
                    && events.wants(device, Interest::SHARED_PUSH)
                {
                    events.publish(device, &Update::shared_deleted(&keys));
                }
                if publish && events.wants(device, Interest::ATTRIBUTES) {
                    let update = Update::Attributes {
                        scope,
                        ts,
                        kvs: Arc::new(Vec::new()),
                        deleted: Arc::new(keys),
                    };
                    events.publish(device, &update);
                }
                Ok(())
            }
            Record::TelemetryDeleted {
                entity,
                keys,
                start_ts,
                end_ts,
                delete_latest,
                rewrite_latest,
            } => keys
                .iter()
                .try_for_each(|key| {
                    self.tsdb
                        .delete(entity, key, start_ts, end_ts, delete_latest, rewrite_latest)
                        .map(|_| ())
                })
                .map_err(super::IngestError::from),
        }
    }

    /// Seals the heads that pin log data below `seal_below` (all of them at a stop, else for at most
    /// SEAL_BUDGET), persists the stores, then records in the log how far it may be trimmed. The order matters:
    /// the checkpoint never passes data not yet persisted. False when due heads are left for the next one.
    fn checkpoint(&self, applied: u64, seal_below: u64, generation: u64) -> bool {
        let partition = self.partition;
        let mut complete = true;
        let result = (|| -> Result<(), super::IngestError> {
            // Heads that fell far behind (twice their share of the log) are sealed whatever it takes: the
            // log cannot be trimmed past them, and it must stay within its disk budget. The checkpoint never
            // passes a head's pin, so the log behind it bounds what the heads pin: only over the limit is the
            // exact figure worth a scan of every series.
            let limit = self.head_log_bytes_max.saturating_mul(2);
            let behind = applied.saturating_sub(self.log.checkpoint_of(u32::from(partition))?);
            let pinned = if behind > limit {
                self.tsdb
                    .min_unsealed_source(partition)
                    .map_or(0, |pin| applied.saturating_sub(pin))
            } else {
                0
            };
            if seal_below == u64::MAX || pinned > limit {
                self.tsdb.seal_heads_below(partition, seal_below)?;
            } else {
                let deadline = Instant::now() + SEAL_BUDGET;
                complete = self
                    .tsdb
                    .seal_heads_below_until(partition, seal_below, deadline)?
                    .1;
            }
            self.tsdb.persist()?;
            self.attributes.persist()?;
            if self.tsdb.generation() != generation {
                // Reopened since this run started: what it lost is below the pins computed now, and only
                // a replay from the checkpoint puts it back (the loop starts one next).
                return Ok(());
            }
            let keep_from = self
                .tsdb
                .min_unsealed_source(partition)
                .map_or(applied, |pinned| pinned.min(applied));
            let log_partition = u32::from(partition);
            if keep_from > self.log.checkpoint_of(log_partition)? {
                self.log.checkpoint(log_partition, keep_from)?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => {}
            // The store refuses writes: said once by the thread that reopens it, not every second here.
            Err(super::IngestError::Tsdb(fleetwire_tsdb::Error::Poisoned)) => {
                tracing::debug!(
                    partition,
                    "checkpoint waits for the time-series store to take writes"
                );
            }
            Err(e) => {
                crate::sustained_warn!(partition, error = %e, "checkpoint failed; the log keeps the data and it is retried");
            }
        }
        complete
    }
}
