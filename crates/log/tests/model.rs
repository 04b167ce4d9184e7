//! Model-based property test: random appends, batches, reads, checkpoints, crashes (with torn
//! tails) and reopens against an in-memory model of what each partition must hold.
//!
//! The contract checked after every crash: each record whose seq was durable before the crash is
//! read back, in order, byte-identical, at the offset it was given; what survives of the rest is
//! a prefix of what was appended; nothing appears that was never appended.

use std::path::Path;
use std::time::Duration;

use fleetwire_log::segment::{list_segments, segment_path, SEGMENT_HEADER_BYTES};
use fleetwire_log::{Durability, Log, LogConfig};
use proptest::prelude::*;

const PARTITIONS: u32 = 3;
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
enum Op {
    Append {
        partition: u32,
        extra_bytes: usize,
    },
    AppendBatch(Vec<(u32, usize)>),
    WaitDurable,
    Read {
        partition: u32,
    },
    Checkpoint {
        partition: u32,
        pick: u16,
    },
    /// Drop without `close`, then (optionally) cut a partition's last segment at a random byte
    /// after its durable end, as a crash that lost unsynced page-cache data would.
    Crash {
        torn: Option<(u32, u16)>,
    },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..PARTITIONS, 0usize..60).prop_map(|(partition, extra_bytes)| Op::Append { partition, extra_bytes }),
        3 => prop::collection::vec((0..PARTITIONS, 0usize..60), 0..6).prop_map(Op::AppendBatch),
        2 => Just(Op::WaitDurable),
        3 => (0..PARTITIONS).prop_map(|partition| Op::Read { partition }),
        2 => (0..PARTITIONS, any::<u16>()).prop_map(|(partition, pick)| Op::Checkpoint { partition, pick }),
        2 => proptest::option::of((0..PARTITIONS, any::<u16>())).prop_map(|torn| Op::Crash { torn }),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone)]
struct ModelRecord {
    offset: u64,
    /// Sequence number in the current process; 0 for records that survived a reopen (recovery
    /// syncs them, so they count as durable from then on).
    seq: u64,
    payload: Vec<u8>,
}

#[derive(Debug, Default)]
struct ModelPartition {
    checkpoint: u64,
    /// Records at and after the checkpoint.
    records: Vec<ModelRecord>,
}

impl ModelPartition {
    fn end(&self) -> u64 {
        self.records
            .last()
            .map_or(self.checkpoint, |r| r.offset + 8 + r.payload.len() as u64)
    }
}

struct Harness {
    dir: tempfile::TempDir,
    config: LogConfig,
    log: Option<Log>,
    model: Vec<ModelPartition>,
    next_id: u64,
}

impl Harness {
    fn new(durability: Durability) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = LogConfig::new(dir.path());
        config.partition_count = PARTITIONS;
        config.segment_bytes_max = 256;
        config.durability = durability;
        let log = Log::open(config.clone()).unwrap();
        Self {
            dir,
            config,
            log: Some(log),
            model: (0..PARTITIONS).map(|_| ModelPartition::default()).collect(),
            next_id: 0,
        }
    }

    fn log(&self) -> &Log {
        self.log.as_ref().unwrap()
    }

    /// A payload nobody else has: a unique id, then bytes derived from it.
    fn payload(&mut self, extra_bytes: usize) -> Vec<u8> {
        self.next_id += 1;
        let mut payload = self.next_id.to_le_bytes().to_vec();
        payload.extend((0..extra_bytes).map(|i| (self.next_id as usize * 31 + i) as u8));
        payload
    }

    fn push_model(&mut self, partition: u32, seq: u64, payload: Vec<u8>) {
        let model = &mut self.model[partition as usize];
        let offset = model.end();
        model.records.push(ModelRecord {
            offset,
            seq,
            payload,
        });
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append {
                partition,
                extra_bytes,
            } => {
                let payload = self.payload(*extra_bytes);
                let seq = self.log().append(*partition, &payload).unwrap();
                self.push_model(*partition, seq, payload);
            }
            Op::AppendBatch(records) => {
                let batch: Vec<(u32, Vec<u8>)> = records
                    .iter()
                    .map(|&(partition, extra)| (partition, self.payload(extra)))
                    .collect();
                let last_seq = self.log().append_batch(&batch).unwrap();
                // Seqs within a call are consecutive (one thread appends here).
                let first_seq = last_seq + 1 - batch.len() as u64;
                for (i, (partition, payload)) in batch.into_iter().enumerate() {
                    self.push_model(partition, first_seq + i as u64, payload);
                }
            }
            Op::WaitDurable => {
                let last = self.log().stats().appends;
                let seq = self.log().append_batch::<&[u8]>(&[]).unwrap();
                assert_eq!(seq, last, "an empty batch returns the last seq handed out");
                self.log().wait_durable(seq, TIMEOUT).unwrap();
            }
            Op::Read { partition } => {
                let durable_seq = self.log().durable_seq();
                let read = self.read_all(*partition);
                self.check_survivors(*partition, &read, durable_seq, "read");
            }
            Op::Checkpoint { partition, pick } => self.checkpoint(*partition, *pick),
            Op::Crash { torn } => {
                let log = self.log.take().unwrap();
                let durable_seq = log.durable_seq();
                let durable_ends: Vec<u64> = (0..PARTITIONS)
                    .map(|p| log.end_offset(p).unwrap())
                    .collect();
                drop(log);
                if let Some((partition, pick)) = torn {
                    tear_tail(
                        &self.dir.path().join(format!("p{partition}")),
                        durable_ends[*partition as usize],
                        *pick,
                    );
                }
                self.reopen_and_check(durable_seq);
            }
            Op::Reopen => {
                self.log.take().unwrap().close().unwrap();
                self.reopen_and_check(u64::MAX);
            }
        }
    }

    fn read_all(&self, partition: u32) -> Vec<(u64, u64, Vec<u8>)> {
        let log = self.log();
        let checkpoint = log.checkpoint_of(partition).unwrap();
        assert_eq!(checkpoint, self.model[partition as usize].checkpoint);
        let mut reader = log.reader(partition, checkpoint).unwrap();
        let mut read = Vec::new();
        while let Some(record) = reader.next_record().unwrap() {
            read.push((record.offset, record.next_offset, record.payload.to_vec()));
        }
        read
    }

    /// `read` must be a prefix of the model holding every record with seq <= durable_seq.
    fn check_survivors(
        &self,
        partition: u32,
        read: &[(u64, u64, Vec<u8>)],
        durable_seq: u64,
        when: &str,
    ) {
        let model = &self.model[partition as usize];
        assert!(
            read.len() <= model.records.len(),
            "{when}: partition {partition} returned {} records, only {} appended",
            read.len(),
            model.records.len()
        );
        for (got, want) in read.iter().zip(&model.records) {
            assert_eq!(got.0, want.offset, "{when}: partition {partition} offset");
            assert_eq!(got.1, want.offset + 8 + want.payload.len() as u64);
            assert_eq!(
                got.2, want.payload,
                "{when}: partition {partition} at {}",
                want.offset
            );
        }
        if let Some(missing) = model.records[read.len()..]
            .iter()
            .find(|r| r.seq <= durable_seq)
        {
            panic!(
                "{when}: partition {partition} lost durable record seq {} at offset {} (durable seq {durable_seq})",
                missing.seq, missing.offset
            );
        }
    }

    fn checkpoint(&mut self, partition: u32, pick: u16) {
        let log = self.log();
        let durable_end = log.end_offset(partition).unwrap();
        let model = &self.model[partition as usize];
        let mut candidates = vec![model.checkpoint];
        candidates.extend(
            model
                .records
                .iter()
                .map(|r| r.offset + 8 + r.payload.len() as u64)
                .filter(|&next| next <= durable_end),
        );
        let offset = candidates[pick as usize % candidates.len()];
        log.checkpoint(partition, offset).unwrap();
        assert_eq!(log.checkpoint_of(partition).unwrap(), offset);
        let model = &mut self.model[partition as usize];
        model.checkpoint = offset;
        model.records.retain(|r| r.offset >= offset);
        self.check_files(false);
    }

    /// Every segment but the last reaches past the checkpoint, and disk_bytes adds up (once the
    /// writer is idle, so the files are not changing under the check).
    ///
    /// Not `strict`: a checkpoint at the exact log end cannot reclaim the segment it ends, which
    /// is still the active one; if the writer rolls right after, that segment ends exactly at the
    /// checkpoint and stays until the next checkpoint or reopen.
    fn check_files(&self, strict: bool) {
        let seq = self.log().append_batch::<&[u8]>(&[]).unwrap();
        self.log().wait_durable(seq, TIMEOUT).unwrap();
        let mut total = 0;
        for (p, model) in self.model.iter().enumerate() {
            let dir = self.dir.path().join(format!("p{p}"));
            let bases = list_segments(&dir).unwrap();
            for next in bases.iter().skip(1) {
                assert!(
                    *next > model.checkpoint || (!strict && *next == model.checkpoint),
                    "p{p}: segment ending at {next} <= checkpoint {} kept",
                    model.checkpoint
                );
            }
            for base in &bases {
                total += std::fs::metadata(segment_path(&dir, *base)).unwrap().len();
            }
        }
        assert_eq!(self.log().disk_bytes(), total);
        for p in 0..PARTITIONS {
            let lag = self.log().lag_bytes(p).unwrap();
            assert_eq!(
                lag,
                self.log().end_offset(p).unwrap() - self.model[p as usize].checkpoint
            );
        }
    }

    fn reopen_and_check(&mut self, durable_seq: u64) {
        self.log = Some(Log::open(self.config.clone()).unwrap());
        for partition in 0..PARTITIONS {
            let read = self.read_all(partition);
            self.check_survivors(partition, &read, durable_seq, "reopen");
            let model = &mut self.model[partition as usize];
            model.records.truncate(read.len());
            for record in &mut model.records {
                record.seq = 0;
            }
            let end = model.end();
            assert_eq!(self.log().end_offset(partition).unwrap(), end);
        }
        self.check_files(true);
    }
}

/// Cuts the last segment in `partition_dir` at a byte chosen by `pick`, never below `durable_end`.
fn tear_tail(partition_dir: &Path, durable_end: u64, pick: u16) {
    let base = *list_segments(partition_dir).unwrap().last().unwrap();
    let path = segment_path(partition_dir, base);
    let len = std::fs::metadata(&path).unwrap().len();
    // A last segment with no durable records may lose even its header (crash during creation).
    let min_len = if durable_end > base {
        durable_end - base + SEGMENT_HEADER_BYTES
    } else {
        0
    };
    assert!(min_len <= len, "durable data beyond the file end");
    let cut = min_len + u64::from(pick) % (len - min_len + 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut)
        .unwrap();
}

/// 48 cases by default (about 10 s); `PROPTEST_CASES=2000` for a longer hunt.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn log_matches_model(fsync in any::<bool>(), ops in prop::collection::vec(op(), 1..60)) {
        let durability = if fsync { Durability::Fsync } else { Durability::Os };
        let mut harness = Harness::new(durability);
        for op in &ops {
            harness.apply(op);
        }
        // Finally everything appended is durable and readable after a clean reopen.
        harness.apply(&Op::Reopen);
        for partition in 0..PARTITIONS {
            let read = harness.read_all(partition);
            prop_assert_eq!(read.len(), harness.model[partition as usize].records.len());
        }
    }
}
