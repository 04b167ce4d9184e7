//! The write path shared by the MQTT and HTTP transports, and the processors behind it.
//!
//! A transport parses a device payload into a [`Record`], encodes it and calls [`Ingest::append`]: the
//! record goes to the device's partition of the ingest log and gets a sequence number. The transport then
//! awaits [`Ingest::durable`] for the highest sequence number of its batch, and only then acknowledges
//! (PUBACK, HTTP 200). One processor thread per partition reads durable records back and applies them to
//! the time-series store; it checkpoints the log once the store has persisted what the records carried, so
//! a crash replays exactly what was not yet persisted.

pub(crate) mod admission;
mod alarms;
pub mod attributes;
mod durable;
pub mod events;
pub mod http;
mod processor;
mod progress;
mod reopen;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fleetwire_log::{Log, LogConfig as LogOptions};
use fleetwire_model::record::AttributeScope;
use fleetwire_model::{parse_attributes, parse_telemetry, PayloadError, Record};
use fleetwire_tsdb::{Tsdb, TsdbConfig as TsdbOptions};
use parking_lot::Mutex;
use uuid::Uuid;

use crate::config::{Config, Durability};
use attributes::AttributeStore;
use fleetwire_entities::Entities;

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("ingest log: {0}")]
    Log(#[from] fleetwire_log::LogError),
    #[error("time-series store: {0}")]
    Tsdb(#[from] fleetwire_tsdb::Error),
    #[error("attribute store: {0}")]
    Attributes(#[from] attributes::AttributeError),
    #[error("alarm store: {0}")]
    Alarms(#[from] fleetwire_entities::EntityError),
    #[error("the ingest log refuses writes after a write or sync failure; restart the server")]
    Poisoned,
    #[error("record of {len_bytes} bytes is larger than the {max_bytes}-byte limit")]
    TooLarge { len_bytes: usize, max_bytes: u32 },
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The disk is (nearly) full: writes are refused until space is freed, nothing accepted is lost.
    #[error("writes are refused until disk space is freed: {0}")]
    DiskFull(String),
    /// The log is over its disk budget and did not drain within the request's wait.
    #[error("the server is overloaded: the ingest log is over its disk budget; retry later")]
    Overloaded,
    #[error("cannot start processor thread: {0}")]
    Thread(std::io::Error),
}

impl IngestError {
    /// What an append's log error means to the writer.
    fn from_log(e: fleetwire_log::LogError) -> IngestError {
        match e {
            fleetwire_log::LogError::Poisoned { .. } => IngestError::Poisoned,
            fleetwire_log::LogError::DiskFull { reason } => IngestError::DiskFull(reason),
            fleetwire_log::LogError::RecordTooLarge {
                len_bytes,
                max_bytes,
            } => IngestError::TooLarge {
                len_bytes,
                max_bytes,
            },
            other => IngestError::Log(other),
        }
    }
}

/// What happened to a device outside its records, for its processor's alarm rules.
#[derive(Debug, Clone)]
pub(crate) enum DeviceEvent {
    /// `active` changed.
    Activity(bool),
    /// The device's active alarm of this type was acknowledged, cleared or deleted through REST.
    Alarm(String, fleetwire_rules::AlarmEvent),
    /// The device was saved (perhaps with another profile) or deleted.
    Changed,
}

/// Device events waiting for a partition's processor. `pending` lets the processor check before every
/// record, for the price of one atomic load, so an event is applied before any record appended after it.
#[derive(Default)]
pub(crate) struct DeviceEventQueue {
    pub pending: AtomicBool,
    pub events: Mutex<Vec<(Uuid, DeviceEvent)>>,
}

/// Progress of one partition's processor, shared with queries.
pub(crate) struct PartitionProgress {
    /// Log offset up to which records have been applied to the stores.
    pub applied: AtomicU64,
    /// The processor has replayed what the log held when it started (`/readyz`).
    pub replayed: AtomicBool,
}

pub struct Ingest {
    log: Arc<Log>,
    partitions: u16,
    /// Transports waiting for their records to become durable (see `durable.rs`).
    waiters: Arc<durable::DurableWaiters>,
    tsdb: Arc<Tsdb>,
    attributes: Arc<AttributeStore>,
    events: Arc<events::Events>,
    /// Bumped when a device profile changes, so processors re-read alarm rules.
    profiles_generation: Arc<AtomicU64>,
    /// Per partition: device events (activity, REST alarm changes, device saves) for its processor.
    event_queues: Arc<Vec<DeviceEventQueue>>,
    progress: Arc<Vec<PartitionProgress>>,
    shutdown: Arc<AtomicBool>,
    processors: Mutex<Vec<std::thread::JoinHandle<()>>>,
    admission: Arc<admission::Admission>,
}

/// Log bytes the unsealed heads may pin, over all partitions: `tsdb.head_log_bytes_max`, but at most a quarter of
/// the log's disk budget. Pinned log cannot be reclaimed, so a budget smaller than the pinned bytes (plus the
/// active segments and the partly consumed ones) would hold the transports back for good; sealing earlier keeps
/// the budget reachable.
fn head_log_bytes_max(config: &Config) -> u64 {
    match config.log.disk_bytes_max {
        0 => config.tsdb.head_log_bytes_max,
        budget => config.tsdb.head_log_bytes_max.min(budget / 4),
    }
}

/// How long a request-response write (HTTP device API, REST) waits for the log to get back under its disk
/// budget before it is answered 503.
const ADMISSION_WAIT: Duration = Duration::from_secs(10);

impl Ingest {
    /// Opens (and recovers) the log and the stores under the data dir and starts one processor per
    /// partition, which first replays what the stores had not persisted.
    pub fn open(
        config: &Config,
        entities: &Entities,
        activity: Arc<crate::activity::Activity>,
    ) -> Result<Ingest, IngestError> {
        let dir = &config.data_dir;
        let mut log_options = LogOptions::new(dir.join("log"));
        log_options.partition_count = u32::from(config.log.partitions);
        log_options.segment_bytes_max = config.log.segment_bytes_max;
        log_options.group_commit_max_delay_us = config.log.group_commit_max_delay_us;
        log_options.writer_nice = i32::from(config.log.writer_nice);
        log_options.writer_slice_us = config.runtime.latency_slice_us;
        // An encoded record is smaller than the JSON it came from, plus a few bytes per key: any body the
        // HTTP limit admits, and any MQTT packet, fits.
        let record_bytes_max =
            config.http.body_bytes_max.max(config.mqtt.packet_bytes_max) + (1 << 20);
        log_options.record_bytes_max = u32::try_from(record_bytes_max).unwrap_or(u32::MAX);
        log_options.durability = match config.log.durability {
            Durability::Fsync => fleetwire_log::Durability::Fsync,
            Durability::Os => fleetwire_log::Durability::Os,
        };
        // The log's writer thread calls this after every group commit: the transports whose records it made
        // durable wake up (and those waiting for room in the append queue, which wait for the next commit).
        let waiters = Arc::new(durable::DurableWaiters::default());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // The server's runtime has its I/O driver (it serves the sockets), which the doorbell needs.
            runtime.spawn(waiters.clone().dispatch(config.runtime.dispatcher_doorbell));
        }
        let publisher = durable::Publisher(waiters.clone());
        let listener = Box::new(move |seq: u64| {
            publisher.published(seq);
        });
        let log = Arc::new(Log::open_with_listener(log_options, listener)?);
        let tsdb_options = TsdbOptions {
            chunk_points_max: config.tsdb.chunk_points_max,
            ..TsdbOptions::default()
        };
        let tsdb = Arc::new(Tsdb::open(dir.join("tsdb"), tsdb_options)?);
        let attributes = Arc::new(AttributeStore::open(&dir.join("attributes.sqlite3"))?);
        // An existing log keeps the partitions it has, even if fewer are configured now.
        let partitions = u16::try_from(log.partition_count()).unwrap_or(u16::MAX);
        let progress: Arc<Vec<PartitionProgress>> = Arc::new(
            (0..partitions)
                .map(|_| PartitionProgress {
                    applied: AtomicU64::new(0),
                    replayed: AtomicBool::new(false),
                })
                .collect(),
        );
        let shutdown = Arc::new(AtomicBool::new(false));
        let events = Arc::new(events::Events::default());
        let profiles_generation = Arc::new(AtomicU64::new(0));
        let event_queues: Arc<Vec<DeviceEventQueue>> = Arc::new(
            (0..partitions)
                .map(|_| DeviceEventQueue::default())
                .collect(),
        );
        let mut processors = Vec::new();
        for partition in 0..partitions {
            let worker = processor::Processor {
                partition,
                log: log.clone(),
                tsdb: tsdb.clone(),
                attributes: attributes.clone(),
                events: events.clone(),
                alarms: alarms::AlarmRules::new(
                    partition,
                    entities.clone(),
                    profiles_generation.clone(),
                    activity.clone(),
                ),
                event_queues: event_queues.clone(),
                progress: progress.clone(),
                shutdown: shutdown.clone(),
                head_age_max: Duration::from_secs(config.tsdb.head_age_max_s),
                head_log_bytes_max: head_log_bytes_max(config) / u64::from(partitions),
                apply_interval: Duration::from_micros(u64::from(config.log.apply_interval_us)),
                quiet_below: 0,
                first_failed: None,
                scratch: Vec::new(),
            };
            let handle = std::thread::Builder::new()
                .name(format!("processor-{partition}"))
                .spawn(move || worker.run())
                .map_err(IngestError::Thread)?;
            processors.push(handle);
        }
        let admission = Arc::new(admission::Admission::default());
        {
            let (admission, log, stop) = (admission.clone(), log.clone(), shutdown.clone());
            let progress = progress.clone();
            let limits = admission::Limits {
                disk_bytes_max: config.log.disk_bytes_max,
                disk_free_min_bytes: config.log.disk_free_min_bytes,
            };
            let data_dir = dir.clone();
            let handle = std::thread::Builder::new()
                .name("disk-monitor".to_string())
                .spawn(move || admission::monitor(admission, log, progress, data_dir, limits, stop))
                .map_err(IngestError::Thread)?;
            processors.push(handle);
        }
        {
            let (tsdb, admission, stop) = (tsdb.clone(), admission.clone(), shutdown.clone());
            let tsdb_dir = dir.join("tsdb");
            let handle = std::thread::Builder::new()
                .name("tsdb-reopen".to_string())
                .spawn(move || reopen::run(tsdb, admission, tsdb_dir, stop))
                .map_err(IngestError::Thread)?;
            processors.push(handle);
        }
        Ok(Ingest {
            log,
            partitions,
            waiters,
            tsdb,
            attributes,
            events,
            profiles_generation,
            event_queues,
            progress,
            shutdown,
            processors: Mutex::new(processors),
            admission,
        })
    }

    /// The partition a device's records go to. Device ids are random UUIDs, so folding their bits spreads
    /// devices evenly.
    pub fn partition_of(&self, device: Uuid) -> u16 {
        let bits = device.as_u128();
        let folded = (bits as u64) ^ ((bits >> 64) as u64);
        (folded % u64::from(self.partitions)) as u16
    }

    /// Appends one encoded record for `device`; returns the sequence number to wait for with [`durable`].
    ///
    /// [`durable`]: Ingest::durable
    pub fn append(&self, device: Uuid, record: &[u8]) -> Result<u64, IngestError> {
        self.check_accepting()?;
        let partition = self.partition_of(device);
        self.log
            .append(u32::from(partition), record)
            .map_err(IngestError::from_log)
    }

    /// Appends several encoded records of `device` in order, taking the log's queue lock once; returns
    /// the last one's sequence number. Every record is checked before any is queued.
    pub fn append_batch<'a>(
        &self,
        device: Uuid,
        records: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<u64, IngestError> {
        self.check_accepting()?;
        let partition = u32::from(self.partition_of(device));
        let records: Vec<(u32, &[u8])> = records.into_iter().map(|r| (partition, r)).collect();
        self.log
            .append_batch(&records)
            .map_err(IngestError::from_log)
    }

    /// Refuses appends while shutting down or short of disk space.
    fn check_accepting(&self) -> Result<(), IngestError> {
        if self.shutdown.load(Ordering::Relaxed) {
            return Err(IngestError::ShuttingDown);
        }
        if self.admission.low_space() {
            return Err(IngestError::DiskFull(
                "free space on the data directory is under log.disk_free_min_bytes".to_string(),
            ));
        }
        Ok(())
    }

    /// Encodes and appends a record, reusing `scratch` as the encoding buffer.
    pub fn append_record(
        &self,
        device: Uuid,
        record: &Record,
        scratch: &mut Vec<u8>,
    ) -> Result<u64, IngestError> {
        scratch.clear();
        record.encode(scratch);
        self.append(device, scratch)
    }

    /// Appends one record and resolves once it is durable: the whole write of a request-response API
    /// (HTTP device API, REST telemetry save). Connections batch instead, with `append_record` and one
    /// `durable` per batch.
    pub async fn write(&self, device: Uuid, record: &Record) -> Result<(), IngestError> {
        if tokio::time::timeout(ADMISSION_WAIT, self.admitted())
            .await
            .is_err()
        {
            return Err(IngestError::Overloaded);
        }
        let mut scratch = Vec::new();
        let seq = self.append_record(device, record, &mut scratch)?;
        self.durable(seq).await
    }

    /// Resolves once the write path takes more: the log is under its disk budget and its append queue has
    /// room, so an append will not block the calling runtime thread. Transports await this before reading
    /// a socket: over the budget, that is the backpressure of DESIGN.md section 4 (see `admission.rs`).
    pub async fn admitted(&self) {
        if self.admits_now() {
            return;
        }
        Box::pin(self.admitted_slow()).await;
    }

    /// Whether [`Ingest::admitted`] would resolve at once: two relaxed loads.
    pub fn admits_now(&self) -> bool {
        !self.admission.paused() && !self.log.queue_full()
    }

    async fn admitted_slow(&self) {
        loop {
            if self.admission.paused() {
                self.admission.admit().await;
                return;
            } else if self.log.queue_full() && !self.log.is_disk_full() && !self.log.is_poisoned() {
                // The writer empties the queue when it takes a batch and publishes it after the commit: wait for
                // the next commit (the queued records have sequence numbers past the durable one).
                let next = self.waiters.durable() + 1;
                if !self.log.queue_full() || self.durable(next).await.is_err() {
                    return;
                }
            } else {
                return;
            }
        }
    }

    /// Whether the log is over its disk budget, so transports read only as fast as the processors apply.
    pub fn throttled(&self) -> bool {
        self.admission.paused()
    }

    /// Whether writes are refused for lack of disk space (the reserve, or a log write that found the disk full).
    pub fn refusing_writes(&self) -> bool {
        self.admission.low_space() || self.log.is_disk_full()
    }

    /// Last sampled bytes of log segments on disk, and free bytes on the data directory's file system.
    pub fn disk_usage(&self) -> (u64, u64) {
        (self.admission.log_disk_bytes(), self.admission.free_bytes())
    }

    /// Resolves once every record up to `seq` is durable (fsync'd, or written to the OS with
    /// `durability = "os"`). Fails if the log was poisoned, so nothing is acknowledged that is not durable.
    pub fn durable(&self, seq: u64) -> Durable<'_> {
        Durable {
            ingest: self,
            seq,
            // Read before the first poison check, so a poisoning after it still ends the wait.
            stalls: self.waiters.stalls(),
        }
    }

    /// Waits (up to `timeout`) until the processor of `device`'s partition has applied every record that
    /// was durable when this call started, so a query sees every write acknowledged before it.
    pub async fn caught_up(&self, device: Uuid, timeout: Duration) {
        let partition = self.partition_of(device);
        let Ok(target) = self.log.end_offset(u32::from(partition)) else {
            return;
        };
        let progress = &self.progress[usize::from(partition)];
        let deadline = tokio::time::Instant::now() + timeout;
        while progress.applied.load(Ordering::Acquire) < target {
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(partition, "query served before the processor caught up");
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until every partition's processor has applied what the log held when this call started: after
    /// a start, until the replay is done.
    pub async fn caught_up_all(&self) {
        for partition in 0..self.partitions {
            let Ok(target) = self.log.end_offset(u32::from(partition)) else {
                continue;
            };
            let progress = &self.progress[usize::from(partition)];
            while progress.applied.load(Ordering::Acquire) < target {
                if self.shutdown.load(Ordering::Relaxed) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// Deletes what is stored for a device that was just deleted, as ThingsBoard's housekeeper does: every
    /// time series (history and latest values) and every attribute, activity included. It goes through the
    /// log, after everything appended for the device before, so a record still in flight cannot bring
    /// anything back, and a crash replays it. Resolves once the deletes are durable.
    pub async fn purge_device(&self, device: Uuid) -> Result<(), IngestError> {
        /// Keys per delete record, so a device with very many keys stays within the record size limit.
        const KEYS_PER_RECORD: usize = 1000;
        self.caught_up(device, Duration::from_secs(5)).await;
        let entity = device.as_u128();
        let mut records = Vec::new();
        for keys in self.tsdb.keys(entity).chunks(KEYS_PER_RECORD) {
            records.push(Record::TelemetryDeleted {
                entity,
                keys: keys.to_vec(),
                start_ts: i64::MIN,
                end_ts: i64::MAX,
                delete_latest: true,
                rewrite_latest: false,
            });
        }
        for scope in AttributeScope::ALL {
            let mut keys: Vec<String> = self
                .attributes
                .get(entity, scope, &[])
                .into_iter()
                .map(|a| a.key)
                .collect();
            if scope == AttributeScope::Server {
                // Persisted by the activity tracker straight to the database.
                for key in crate::activity::KEYS {
                    if !keys.iter().any(|k| k == key) {
                        keys.push(key.to_string());
                    }
                }
            }
            for keys in keys.chunks(KEYS_PER_RECORD) {
                records.push(Record::AttributesDeleted {
                    entity,
                    scope,
                    ts: now_ms(),
                    keys: keys.to_vec(),
                });
            }
        }
        let mut scratch = Vec::new();
        let mut last = None;
        for record in &records {
            last = Some(self.append_record(device, record, &mut scratch)?);
        }
        match last {
            Some(seq) => self.durable(seq).await,
            None => Ok(()),
        }
    }

    pub fn tsdb(&self) -> &Tsdb {
        &self.tsdb
    }

    pub fn attributes(&self) -> &AttributeStore {
        &self.attributes
    }

    /// Tells the device's processor that its `active` changed, for the alarm rules that read it.
    pub fn activity_changed(&self, device: Uuid, active: bool) {
        self.device_event(device, DeviceEvent::Activity(active));
    }

    /// Tells the device's processor that its active alarm of `alarm_type` was acknowledged, cleared or
    /// deleted outside the evaluator, so the rule counters follow (reference 5.2, item 6).
    pub fn alarm_changed(
        &self,
        device: Uuid,
        alarm_type: &str,
        event: fleetwire_rules::AlarmEvent,
    ) {
        self.device_event(device, DeviceEvent::Alarm(alarm_type.to_owned(), event));
    }

    fn device_event(&self, device: Uuid, event: DeviceEvent) {
        let partition = usize::from(self.partition_of(device));
        if let Some(queue) = self.event_queues.get(partition) {
            queue.events.lock().push((device, event));
            queue.pending.store(true, Ordering::Release);
        }
    }

    /// Tells the processors that a device profile changed: they parse alarm rules again, and every
    /// device's rule state starts over.
    pub fn profiles_changed(&self) {
        self.profiles_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Tells the device's processor that the device was saved or deleted: its rule state starts over with
    /// the profile it has now.
    pub fn device_changed(&self, device: Uuid) {
        self.device_event(device, DeviceEvent::Changed);
    }

    /// Updates the processors publish for devices once records are applied.
    pub fn events(&self) -> &events::Events {
        &self.events
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Stops the processors after they persisted their state and checkpointed the log.
    pub fn shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        for handle in self.processors.lock().drain(..) {
            if handle.join().is_err() {
                tracing::error!("a processor thread panicked");
            }
        }
    }
}

/// The future of [`Ingest::durable`]: a plain struct rather than an async fn's state, small enough for a
/// connection to keep inline (a connection awaits one per batch it acknowledges).
#[must_use = "a future does nothing unless awaited"]
pub struct Durable<'a> {
    ingest: &'a Ingest,
    seq: u64,
    /// The log's stall count when the wait (re)started.
    stalls: u64,
}

impl std::future::Future for Durable<'_> {
    type Output = Result<(), IngestError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        loop {
            let waiters = &self.ingest.waiters;
            if waiters.durable() >= self.seq {
                return Poll::Ready(Ok(()));
            }
            if self.ingest.log.is_poisoned() {
                return Poll::Ready(Err(IngestError::Poisoned));
            }
            // The commit that makes `seq` durable wakes this wait, and so does poisoning (the log calls its
            // commit listener then too, without progress).
            match waiters.poll_durable(self.seq, self.stalls, cx) {
                Poll::Ready(Ok(())) => return Poll::Ready(Ok(())),
                Poll::Ready(Err(durable::Closed::Stalled)) => {
                    self.stalls = waiters.stalls();
                }
                Poll::Ready(Err(durable::Closed::Gone)) => {
                    return Poll::Ready(Err(IngestError::ShuttingDown))
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Parses a device's telemetry payload (reference 1.5-1.6) into the record to append, stamping points
/// without a ts with the server's time. `None` when the payload carries no data point (`{}` is valid: it
/// is acknowledged, and there is nothing to store).
pub fn telemetry_record(device: Uuid, payload: &[u8]) -> Result<Option<Record>, PayloadError> {
    let records = parse_telemetry(payload, now_ms())?;
    if records.iter().all(|r| r.kvs.is_empty()) {
        return Ok(None);
    }
    Ok(Some(Record::Telemetry {
        entity: device.as_u128(),
        records,
    }))
}

/// Parses a device's client-attributes payload (reference 1.7) into the record to append; `None` when
/// it names no attribute.
pub fn client_attributes_record(
    device: Uuid,
    payload: &[u8],
) -> Result<Option<Record>, PayloadError> {
    let kvs = parse_attributes(payload)?;
    if kvs.is_empty() {
        return Ok(None);
    }
    Ok(Some(Record::Attributes {
        entity: device.as_u128(),
        scope: AttributeScope::Client,
        ts: now_ms(),
        kvs,
    }))
}

/// Wall-clock time in epoch milliseconds: the server-side timestamp of data that comes without one.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
