//! One processor per log partition: reads durable records and applies them to the stores.
//!
//! Applying is idempotent (the time-series store keeps one value per (series, ts), attributes keep the
//! newest write), so replaying records after a crash changes nothing that was already applied. The
//! processor checkpoints the log at the oldest offset whose data is not yet persisted by the stores:
//! segments before it are reclaimed, records after it are replayed on the next start.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetwire_log::Log;
use fleetwire_model::Record;
use fleetwire_tsdb::Tsdb;

use super::attributes::AttributeStore;
use super::{now_ms, PartitionProgress};

/// How often the processor seals old heads, persists and checkpoints.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// How long the processor sleeps waiting for new records before doing housekeeping anyway.
const IDLE_WAIT: Duration = Duration::from_millis(100);

pub(super) struct Processor {
    pub partition: u16,
    pub log: Arc<Log>,
    pub tsdb: Arc<Tsdb>,
    pub attributes: Arc<AttributeStore>,
    pub progress: Arc<Vec<PartitionProgress>>,
    pub shutdown: Arc<AtomicBool>,
    pub head_age_max_ms: u64,
}

impl Processor {
    pub fn run(self) {
        if let Err(e) = self.run_inner() {
            // A processor that cannot read its partition must not pretend: acknowledged data stays in the log
            // and is replayed after the operator fixed the cause and restarted.
            tracing::error!(partition = self.partition, error = %e, "processor stopped");
        }
    }

    fn run_inner(&self) -> Result<(), super::IngestError> {
        let partition = self.partition;
        let start = self.log.checkpoint_of(partition);
        let mut reader = self.log.reader(partition, start)?;
        let replay_started = Instant::now();
        let mut replayed = 0u64;
        let mut offset = start;
        let progress = &self.progress[usize::from(partition)];
        progress.applied.store(offset, Ordering::Release);
        let mut last_checkpoint = Instant::now();
        let mut replaying = true;
        loop {
            let mut applied = 0u64;
            while let Some(entry) = reader.next()? {
                self.apply(entry.offset, entry.bytes);
                offset = entry.next_offset;
                progress.applied.store(offset, Ordering::Release);
                applied += 1;
                if applied % 4096 == 0 && last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
                    break;
                }
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
            let stopping = self.shutdown.load(Ordering::Acquire);
            if stopping || last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL {
                self.checkpoint(offset, stopping);
                last_checkpoint = Instant::now();
            }
            if stopping {
                return Ok(());
            }
            if applied == 0 {
                self.log.wait_for_data(partition, offset, IDLE_WAIT);
            }
        }
    }

    fn apply(&self, offset: u64, bytes: &[u8]) {
        match Record::decode(bytes) {
            Ok(Record::Telemetry { entity, records }) => {
                for group in &records {
                    for kv in &group.kvs {
                        self.tsdb
                            .write(entity, &kv.key, group.ts, &kv.value, self.partition, offset);
                    }
                }
            }
            Ok(Record::Attributes {
                entity,
                scope,
                ts,
                kvs,
            }) => self.attributes.apply(entity, scope, ts, &kvs),
            // Records are validated before they are appended and CRC-checked by the log, so this means a
            // record written by a newer version: skip it loudly rather than stop the partition.
            Err(e) => tracing::error!(partition = self.partition, offset, error = %e, "undecodable log record"),
        }
    }

    /// Seals heads that are too old, persists the stores, then records in the log how far it may be
    /// trimmed. The order matters: the checkpoint must never pass data that is not yet persisted.
    fn checkpoint(&self, applied: u64, seal_everything: bool) {
        let partition = self.partition;
        let now_ms = now_ms();
        let result = (|| -> Result<(), super::IngestError> {
            if seal_everything {
                self.tsdb.seal_partition(partition)?;
            } else {
                self.tsdb
                    .seal_older_than(partition, now_ms, self.head_age_max_ms)?;
            }
            self.tsdb.persist()?;
            self.attributes.persist()?;
            let keep_from = self
                .tsdb
                .min_unsealed_source(partition)
                .map_or(applied, |pinned| pinned.min(applied));
            if keep_from > self.log.checkpoint_of(partition) {
                self.log.checkpoint(partition, keep_from)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            tracing::warn!(partition, error = %e, "checkpoint failed; the log keeps the data and it is retried");
        }
    }
}
