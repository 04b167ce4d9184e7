//! The driver of a bench run: prepare the server (devices, profile), run the fleet in this process or in
//! worker processes, print progress every second, merge the results, verify, and build the [`Report`].

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};

use crate::error::{Error, Result};
use crate::fleet::{self, Counters, Event, Slice, SliceResult, Tick};
use crate::payload::PayloadGen;
use crate::report::{
    GeneratorUsage, HostUsage, LatencySummary, Measured, Report, Second, ServerUsage,
};
use crate::rest::Rest;
use crate::scenario::{Scenario, Transport};
use crate::server_log::{self, LogSnapshot, ServerLog};
use crate::stats::{HostSampler, Latency, ProcSampler};
use crate::verify::{self, Acked};

/// Options of a run that are not part of the workload.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Sample this process's CPU and RSS (the server under test).
    pub server_pid: Option<u32>,
    /// Print the progress line every second (to stderr).
    pub progress: bool,
    /// Command that starts a worker process (`fleetwire bench --worker`); None = current executable.
    pub worker_command: Option<Vec<String>>,
}

/// How the driver tells a slice to start loading.
enum Go {
    Local(watch::Sender<Option<Instant>>),
    Worker(ChildStdin),
}

/// Runs a scenario end to end and returns its report (the caller prints it and picks the exit code).
pub async fn run(scenario: &Scenario, options: &RunOptions) -> Result<Report> {
    scenario.validate()?;
    let http_addr = scenario.server_addr(scenario.http_port)?;
    if scenario.create_devices {
        prepare_devices(scenario).await?;
    }

    let mut sampler = match options.server_pid {
        Some(pid) => Some(ProcSampler::new(pid)?),
        None => None,
    };
    let rss_baseline = match sampler.as_mut() {
        Some(s) => Some(s.sample()?.rss_bytes),
        None => None,
    };

    let mut host = HostSampler::new();

    let (events_tx, mut events_rx) = mpsc::unbounded_channel::<(usize, Event)>();
    let slices = split(scenario);
    let mut gos = Vec::with_capacity(slices.len());
    let mut children: Vec<Child> = Vec::new();
    for (i, slice) in slices.iter().enumerate() {
        if slices.len() == 1 {
            gos.push(Go::Local(spawn_local(slice.clone(), i, events_tx.clone())));
        } else {
            let (child, stdin) = spawn_worker(
                slice,
                i,
                events_tx.clone(),
                options.worker_command.as_deref(),
            )
            .await?;
            children.push(child);
            gos.push(Go::Worker(stdin));
        }
    }
    drop(events_tx);

    // The generator's own CPU (this process and its workers): on one box, what it takes is what the server
    // cannot have, so the report gives both per message.
    let mut generator: Vec<ProcSampler> = std::iter::once(std::process::id())
        .chain(children.iter().filter_map(Child::id))
        .filter_map(|pid| ProcSampler::new(pid).ok())
        .collect();

    let mut agg = Aggregator::new(scenario, slices.len());
    let run_start = Instant::now();
    let mut ready = 0usize;
    let mut go_at: Option<Instant> = None;
    let mut rss_at_go = None;
    let mut results: Vec<SliceResult> = Vec::new();
    // Fleetwire's own log figures over the measured window (`GET /metrics` at its start and end), when the
    // server under test is the one whose REST API verifies the run.
    let mut log_scrapes = LogScrapes::new(scenario.verify.then_some(http_addr));
    let mut print = tokio::time::interval(Duration::from_secs(1));
    print.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    print.tick().await;
    loop {
        tokio::select! {
            event = events_rx.recv() => {
                let Some((source, event)) = event else { break };
                match event {
                    Event::Ready => {
                        ready += 1;
                        if ready == gos.len() {
                            if let Some(s) = sampler.as_mut() {
                                rss_at_go = Some(s.sample()?.rss_bytes);
                            }
                            let now = Instant::now();
                            go_at = Some(now);
                            for go in &mut gos {
                                match go {
                                    Go::Local(tx) => { let _ = tx.send(Some(now)); }
                                    Go::Worker(stdin) => {
                                        stdin.write_all(b"go\n").await
                                            .map_err(|e| Error::io("starting a worker", e))?;
                                        stdin.flush().await.map_err(|e| Error::io("starting a worker", e))?;
                                    }
                                }
                            }
                        }
                    }
                    Event::Tick(tick) => agg.tick(source, &tick)?,
                    Event::Done(result) => results.push(result),
                }
            }
            _ = print.tick() => {
                let server = match sampler.as_mut() {
                    Some(s) => s.sample().ok(),
                    None => None,
                };
                let host = host.as_mut().and_then(HostSampler::sample);
                let generator_cpu = generator
                    .iter_mut()
                    .map(|s| s.sample().map(|s| s.cpu_percent))
                    .sum::<Result<f64>>()
                    .ok();
                let load = go_at.map(|g| g.elapsed());
                log_scrapes.at(load, scenario);
                let second = agg.second(
                    run_start.elapsed(),
                    load,
                    Samples { server, host, generator_cpu },
                );
                if options.progress {
                    eprintln!("{}", second.progress_line(scenario.devices));
                }
            }
        }
    }
    for mut child in children {
        let status = child
            .wait()
            .await
            .map_err(|e| Error::io("waiting for a worker", e))?;
        if !status.success() {
            return Err(Error::Worker(format!("a worker exited with {status}")));
        }
    }
    if results.len() != slices.len() {
        return Err(Error::Worker(format!(
            "{} of {} slices reported results",
            results.len(),
            slices.len()
        )));
    }
    results.sort_by_key(|r| r.first_slot);

    let mut report = agg.finish(scenario, &results, rss_baseline, rss_at_go);
    let server_p99 = log_scrapes.per_second().await;
    for second in &mut report.timeline {
        second.server_puback_p99_le_ms = server_p99.get(&(second.t_s as u64)).copied();
    }
    report.server_log = log_scrapes.finish().await;
    if scenario.verify && report.totals.acked > 0 {
        if let (Some(start), Some(end)) = (report.ts_min_ms, report.ts_max_ms) {
            let acked: Vec<Acked> = results
                .iter()
                .flat_map(|r| {
                    r.acked_per_device
                        .iter()
                        .enumerate()
                        .map(move |(i, &messages)| Acked {
                            name: Scenario::device_name(
                                scenario.first_index + r.first_slot + i as u32,
                            ),
                            messages,
                        })
                })
                .collect();
            let keys = PayloadGen::new(scenario.profile, scenario.plc_values, 0).keys();
            if options.progress {
                eprintln!("verifying {} devices through the REST API ...", acked.len());
            }
            let started = Instant::now();
            let verification = verify::verify(
                http_addr,
                &scenario.username,
                &scenario.password,
                &acked,
                &keys,
                start,
                end + 1,
                16,
                Duration::from_secs_f64(scenario.verify_wait_s.max(0.0)),
            )
            .await?;
            report.verify_s = Some(started.elapsed().as_secs_f64());
            report.verification = Some(verification);
        }
        if scenario.alarms_per_s > 0.0 && scenario.profile.has_battery() {
            let mut alarmed = Vec::new();
            let mut run_devices = Vec::new();
            for r in &results {
                for (i, &acked) in r.acked_per_device.iter().enumerate() {
                    let name =
                        Scenario::device_name(scenario.first_index + r.first_slot + i as u32);
                    if r.alarms_per_device.get(i).is_some_and(|&n| n > 0) {
                        alarmed.push(name.clone());
                    }
                    if acked > 0 {
                        run_devices.push(name);
                    }
                }
            }
            let alarms = verify::verify_alarms(
                http_addr,
                &scenario.username,
                &scenario.password,
                &alarmed,
                &run_devices,
            )
            .await?;
            report.alarms = Some(alarms);
        }
    }
    Ok(report)
}

/// The scrapes of the server's own figures, spawned so that the progress loop does not wait for them: one at
/// the end of the warm-up and one at the end of the measured window, for the run's figures, and one every
/// load second, for the timeline's.
struct LogScrapes {
    addr: Option<std::net::SocketAddr>,
    start: Option<(Instant, tokio::task::JoinHandle<Option<LogSnapshot>>)>,
    end: Option<(Instant, tokio::task::JoinHandle<Option<LogSnapshot>>)>,
    /// Keyed by the timeline's load second that the scrape closes.
    every_second: Vec<(u64, tokio::task::JoinHandle<Option<LogSnapshot>>)>,
}

impl LogScrapes {
    fn new(addr: Option<std::net::SocketAddr>) -> LogScrapes {
        LogScrapes {
            addr,
            start: None,
            end: None,
            every_second: Vec::new(),
        }
    }

    /// Called once a second with the time since go: scrapes when the warm-up is over, and when the
    /// measured window is.
    fn at(&mut self, load: Option<Duration>, scenario: &Scenario) {
        let (Some(addr), Some(load)) = (self.addr, load) else {
            return;
        };
        // The same second as the aggregator's bucket for this tick.
        let second = (load.as_millis() as u64).div_ceil(1000).max(1);
        self.every_second
            .push((second, tokio::spawn(server_log::scrape(addr))));
        let load_s = load.as_secs_f64();
        let slot = if self.start.is_none() && load_s >= scenario.warmup_s {
            &mut self.start
        } else if self.start.is_some()
            && self.end.is_none()
            && load_s >= scenario.warmup_s + scenario.duration_s
        {
            &mut self.end
        } else {
            return;
        };
        *slot = Some((Instant::now(), tokio::spawn(server_log::scrape(addr))));
    }

    /// The server's own p99 from PUBLISH read to PUBACK written in each load second, from the scrapes either
    /// side of it (none for a second whose scrape failed, or from a server that does not count it).
    async fn per_second(&mut self) -> BTreeMap<u64, f64> {
        let mut p99 = BTreeMap::new();
        let mut previous: Option<LogSnapshot> = None;
        for (second, scrape) in self.every_second.drain(..) {
            let snapshot = scrape.await.ok().flatten();
            if let (Some(before), Some(after)) = (&previous, &snapshot) {
                if let Some(bound) = server_log::puback_p99_le_ms(before, after) {
                    p99.insert(second, bound);
                }
            }
            previous = snapshot;
        }
        p99
    }

    /// Waits for both scrapes; the end one is taken now if the run ended before a progress tick saw the
    /// window's end.
    async fn finish(mut self) -> Option<ServerLog> {
        let addr = self.addr?;
        let (t0, start) = self.start?;
        let (t1, end) = self
            .end
            .take()
            .unwrap_or_else(|| (Instant::now(), tokio::spawn(server_log::scrape(addr))));
        let start = start.await.ok()??;
        let end = end.await.ok()??;
        ServerLog::between(&start, &end, t1.duration_since(t0).as_secs_f64())
    }
}

/// Creates the profile (with its alarm rule) and the devices, skipping those that exist.
pub async fn prepare_devices(scenario: &Scenario) -> Result<()> {
    let http_addr = scenario.server_addr(scenario.http_port)?;
    let started = Instant::now();
    let mut rest = Rest::login(http_addr, &scenario.username, &scenario.password).await?;
    rest.ensure_profile(scenario.profile).await?;
    let names: Vec<String> = scenario.device_names().collect();
    let (created, existing) = rest.create_devices(&names, scenario.profile, 16).await?;
    eprintln!(
        "devices: {created} created, {existing} already there ({:.1} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Splits the fleet over processes: one slice per `connections_per_process` connections.
pub fn split(scenario: &Scenario) -> Vec<Slice> {
    let connections = match scenario.transport {
        Transport::Mqtt => scenario.devices,
        Transport::Http => scenario.http_connections.min(scenario.devices),
    };
    let processes = connections
        .div_ceil(scenario.connections_per_process)
        .max(1);
    let per = scenario.devices.div_ceil(processes);
    let loopback = scenario
        .host
        .parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_loopback() && ip.is_ipv4());
    (0..processes)
        .map(|p| {
            let first_slot = p * per;
            Slice {
                scenario: scenario.clone(),
                first_slot,
                count: per.min(scenario.devices - first_slot),
                // Each worker its own source address, so no two share an ephemeral port range.
                local_ip: (processes > 1 && loopback)
                    .then(|| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + p as u8))),
            }
        })
        .filter(|s| s.count > 0)
        .collect()
}

fn spawn_local(
    slice: Slice,
    source: usize,
    events: mpsc::UnboundedSender<(usize, Event)>,
) -> watch::Sender<Option<Instant>> {
    let (go_tx, go_rx) = watch::channel(None);
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        if let Err(e) = fleet::run_slice(slice, go_rx, tx).await {
            tracing::error!(error = %e, "slice failed");
        }
    });
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if events.send((source, event)).is_err() {
                return;
            }
        }
    });
    go_tx
}

async fn spawn_worker(
    slice: &Slice,
    source: usize,
    events: mpsc::UnboundedSender<(usize, Event)>,
    command: Option<&[String]>,
) -> Result<(Child, ChildStdin)> {
    let mut cmd = match command {
        Some([program, args @ ..]) => {
            let mut c = Command::new(program);
            c.args(args);
            c
        }
        _ => {
            let exe =
                std::env::current_exe().map_err(|e| Error::io("finding the executable", e))?;
            let mut c = Command::new(exe);
            c.args(["bench", "--worker"]);
            c
        }
    };
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::io("starting a worker process", e))?;
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| Error::Worker("no stdin".into()))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| Error::Worker("no stdout".into()))?;
    let mut line = serde_json::to_vec(slice).map_err(|e| Error::json("encoding a slice", e))?;
    line.push(b'\n');
    stdin
        .write_all(&line)
        .await
        .map_err(|e| Error::io("sending a worker its slice", e))?;
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            match serde_json::from_str::<Event>(&line) {
                Ok(event) => {
                    if events.send((source, event)).is_err() {
                        return;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "unreadable line from a worker"),
            }
        }
    });
    Ok((child, stdin))
}

/// The worker side: reads its slice and the go line from stdin, writes events as JSON lines to stdout.
pub async fn worker() -> Result<()> {
    // Stdin is read on a plain thread: tokio's stdin runs on the blocking pool, and a read that never
    // returns (the driver keeps our stdin open) would keep the runtime from shutting down.
    let (slice_tx, slice_rx) = tokio::sync::oneshot::channel::<String>();
    let (go_tx, go_rx) = watch::channel(None);
    std::thread::Builder::new()
        .name("worker-stdin".into())
        .spawn(move || {
            use std::io::BufRead;
            let mut lines = std::io::stdin().lock().lines();
            let Some(Ok(slice)) = lines.next() else {
                return;
            };
            if slice_tx.send(slice).is_err() {
                return;
            }
            for line in lines {
                match line {
                    Ok(line) if line.trim() == "go" => {
                        let _ = go_tx.send(Some(Instant::now()));
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        })
        .map_err(|e| Error::io("starting the stdin reader", e))?;
    let line = slice_rx
        .await
        .map_err(|_| Error::Worker("no slice on stdin".into()))?;
    let slice: Slice =
        serde_json::from_str(&line).map_err(|e| Error::json("reading the slice", e))?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let engine = tokio::spawn(fleet::run_slice(slice, go_rx, tx));
    let mut stdout = tokio::io::stdout();
    while let Some(event) = rx.recv().await {
        let mut line =
            serde_json::to_vec(&event).map_err(|e| Error::json("encoding an event", e))?;
        line.push(b'\n');
        stdout
            .write_all(&line)
            .await
            .map_err(|e| Error::io("writing to the driver", e))?;
        stdout
            .flush()
            .await
            .map_err(|e| Error::io("writing to the driver", e))?;
        if matches!(event, Event::Done(_)) {
            break;
        }
    }
    engine
        .await
        .map_err(|e| Error::Worker(format!("engine task: {e}")))?
}

/// Merges the sources' ticks into per-second progress and the measured window.
struct Aggregator {
    warmup_ms: u64,
    end_ms: u64,
    /// Latest cumulative counters per source.
    latest: Vec<Counters>,
    /// Per source: (load ms, acked) at the first tick inside the measured window and the last one.
    window_first: Vec<Option<(u64, u64)>>,
    window_last: Vec<Option<(u64, u64)>>,
    /// Latencies since the last printed second, and of the measured window.
    interval: Latency,
    measured: Latency,
    /// Open loop: send lag in the measured window.
    send_lag: Latency,
    /// MQTT: the latency counted to the PUBACKs' arrival at the socket, in the measured window.
    arrival: Latency,
    all: Latency,
    last_acked: u64,
    last_sent: u64,
    last_at: Duration,
    /// The server's largest RSS sampled so far.
    rss_max: Option<u64>,
    /// The report's timeline: per load second, what the sources' ticks say happened in it, each tick's
    /// deltas divided by its own interval, so a tick delivered late does not distort the rate.
    seconds: std::collections::BTreeMap<u64, SecondBucket>,
    /// Per source: (load ms, sent, acked) of its previous tick.
    last_tick: Vec<Option<(u64, u64, u64)>>,
}

/// One load second of the report's timeline.
#[derive(Default)]
struct SecondBucket {
    /// Per source: (sent, acked, ms covered) in this second.
    sources: HashMap<usize, (u64, u64, u64)>,
    latency: Latency,
    send_lag: Latency,
    arrival: Latency,
    server: Option<crate::stats::ProcSample>,
    host: Option<crate::stats::HostSample>,
    generator_cpu: Option<f64>,
}

/// What the run samples from `/proc` once a second.
struct Samples {
    server: Option<crate::stats::ProcSample>,
    host: Option<crate::stats::HostSample>,
    /// The generator's processes together, in percent of one core.
    generator_cpu: Option<f64>,
}

impl Aggregator {
    fn new(scenario: &Scenario, sources: usize) -> Aggregator {
        Aggregator {
            warmup_ms: (scenario.warmup_s * 1000.0) as u64,
            end_ms: ((scenario.warmup_s + scenario.duration_s) * 1000.0) as u64,
            latest: vec![Counters::default(); sources],
            window_first: vec![None; sources],
            window_last: vec![None; sources],
            interval: Latency::new(),
            measured: Latency::new(),
            send_lag: Latency::new(),
            arrival: Latency::new(),
            all: Latency::new(),
            last_acked: 0,
            last_sent: 0,
            last_at: Duration::ZERO,
            rss_max: None,
            seconds: std::collections::BTreeMap::new(),
            last_tick: vec![None; sources],
        }
    }

    fn tick(&mut self, source: usize, tick: &Tick) -> Result<()> {
        let latency = Latency::from_base64(&tick.latency)?;
        let optional = |encoded: &str| {
            if encoded.is_empty() {
                Ok(Latency::new())
            } else {
                Latency::from_base64(encoded)
            }
        };
        let send_lag = optional(&tick.send_lag)?;
        let arrival = optional(&tick.arrival)?;
        self.latest[source] = tick.counters;
        let c = &tick.counters;
        let previous = self.last_tick[source].replace((tick.load_ms.unwrap_or(0), c.sent, c.acked));
        if let (Some(ms), Some((prev_ms, prev_sent, prev_acked))) = (tick.load_ms, previous) {
            let bucket = self.seconds.entry(ms.div_ceil(1000).max(1)).or_default();
            let entry = bucket.sources.entry(source).or_default();
            entry.0 += c.sent.saturating_sub(prev_sent);
            entry.1 += c.acked.saturating_sub(prev_acked);
            entry.2 += ms.saturating_sub(prev_ms);
            bucket.latency.merge(&latency);
            bucket.send_lag.merge(&send_lag);
            bucket.arrival.merge(&arrival);
        }
        self.interval.merge(&latency);
        self.all.merge(&latency);
        if let Some(ms) = tick.load_ms {
            // A tick covers the second before it: it is measured if that second is in the window.
            if self.is_measured(ms) {
                self.measured.merge(&latency);
                self.send_lag.merge(&send_lag);
                self.arrival.merge(&arrival);
            }
            if ms >= self.warmup_ms && ms <= self.end_ms + 500 {
                let point = (ms, tick.counters.acked);
                self.window_first[source].get_or_insert(point);
                self.window_last[source] = Some(point);
            }
        }
        Ok(())
    }

    /// Whether a tick at `load_ms` covers a second of the measured window (it covers the second
    /// before it; the half second of grace takes the last tick, which can come a little late).
    fn is_measured(&self, load_ms: u64) -> bool {
        load_ms > self.warmup_ms && load_ms <= self.end_ms + 500
    }

    /// The per-second buckets of the measured window.
    fn measured_seconds(&self) -> impl Iterator<Item = &SecondBucket> + '_ {
        self.seconds
            .iter()
            .filter(|(&second, _)| self.is_measured(second * 1000))
            .map(|(_, bucket)| bucket)
    }

    fn totals(&self) -> Counters {
        let mut total = Counters::default();
        for c in &self.latest {
            total.add(c);
        }
        total
    }

    fn second(&mut self, elapsed: Duration, load: Option<Duration>, samples: Samples) -> Second {
        let Samples {
            server,
            host,
            generator_cpu,
        } = samples;
        let total = self.totals();
        let secs = (elapsed - self.last_at).as_secs_f64().max(1e-3);
        let second = Second {
            t_s: elapsed.as_secs_f64(),
            load_s: load.map(|l| l.as_secs_f64()),
            sent_per_s: (total.sent - self.last_sent.min(total.sent)) as f64 / secs,
            acked_per_s: (total.acked - self.last_acked.min(total.acked)) as f64 / secs,
            p50_ms: self.interval.quantile_us(0.5) as f64 / 1000.0,
            p99_ms: self.interval.quantile_us(0.99) as f64 / 1000.0,
            max_ms: self.interval.max_us() as f64 / 1000.0,
            counters: total,
            server_cpu_percent: server.as_ref().map(|s| s.cpu_percent),
            server_rss_bytes: server.as_ref().map(|s| s.rss_bytes),
            server_puback_p99_le_ms: None,
            send_lag_p99_ms: None,
            arrival_p99_ms: None,
        };
        if let Some(sample) = server {
            self.rss_max = self.rss_max.max(Some(sample.rss_bytes));
        }
        if let Some(load) = load {
            let second = (load.as_millis() as u64).div_ceil(1000).max(1);
            let bucket = self.seconds.entry(second).or_default();
            if server.is_some() {
                bucket.server = server;
            }
            if host.is_some() {
                bucket.host = host;
            }
            if generator_cpu.is_some() {
                bucket.generator_cpu = generator_cpu;
            }
        }
        self.last_sent = total.sent;
        self.last_acked = total.acked;
        self.last_at = elapsed;
        self.interval.reset();
        second
    }

    fn finish(
        self,
        scenario: &Scenario,
        results: &[SliceResult],
        rss_baseline: Option<u64>,
        rss_at_go: Option<u64>,
    ) -> Report {
        let mut totals = Counters::default();
        let mut refusals = std::collections::BTreeMap::new();
        let mut ts_min_ms = None;
        let mut ts_max_ms = None;
        for r in results {
            totals.add(&r.counters);
            for (code, n) in &r.refusals {
                *refusals.entry(*code).or_insert(0) += n;
            }
            ts_min_ms = fleet::min_opt(ts_min_ms, r.ts_min_ms);
            ts_max_ms = fleet::max_opt(ts_max_ms, r.ts_max_ms);
        }
        // Measured rate: per source, acked between its first and last tick in the window.
        let mut rate = 0.0;
        let mut measured_messages = 0;
        let mut measured_ms = 0;
        for (first, last) in self.window_first.iter().zip(&self.window_last) {
            if let (Some((t0, a0)), Some((t1, a1))) = (first, last) {
                if t1 > t0 {
                    rate += (a1 - a0) as f64 * 1000.0 / (t1 - t0) as f64;
                    measured_messages += a1 - a0;
                    measured_ms = measured_ms.max(t1 - t0);
                }
            }
        }
        let points = PayloadGen::new(scenario.profile, scenario.plc_values, 0).points_per_message();
        // Server CPU over the measured window, from the samples filed under their load second.
        let cpu: Vec<f64> = self
            .measured_seconds()
            .filter_map(|b| b.server.map(|s| s.cpu_percent))
            .collect();
        let host: Vec<crate::stats::HostSample> =
            self.measured_seconds().filter_map(|b| b.host).collect();
        let host = (!host.is_empty()).then(|| {
            let n = host.len() as f64;
            HostUsage {
                steal_percent_avg: host.iter().map(|h| h.steal_percent).sum::<f64>() / n,
                steal_percent_max: host.iter().map(|h| h.steal_percent).fold(0.0, f64::max),
                idle_percent_avg: host.iter().map(|h| h.idle_percent).sum::<f64>() / n,
            }
        });
        let generator_cpu: Vec<f64> = self
            .measured_seconds()
            .filter_map(|b| b.generator_cpu)
            .collect();
        let generator = average(&generator_cpu).map(|cpu_percent_avg| GeneratorUsage {
            cpu_percent_avg,
            cpu_us_per_message: cpu_us_per_message(cpu_percent_avg, rate),
        });
        let rss_max = self.rss_max;
        let cpu_percent_avg = average(&cpu);
        let server = rss_baseline.map(|baseline| ServerUsage {
            cpu_percent_avg,
            cpu_us_per_message: cpu_percent_avg.and_then(|c| cpu_us_per_message(c, rate)),
            cpu_percent_max: cpu
                .iter()
                .copied()
                .fold(None, |m: Option<f64>, c| Some(m.map_or(c, |m| m.max(c)))),
            rss_baseline_bytes: baseline,
            rss_at_go_bytes: rss_at_go,
            rss_max_bytes: rss_max,
            rss_per_connection_bytes: rss_at_go.and_then(|at_go| {
                let connections = self.totals_connected_at_go(results);
                (connections > 0)
                    .then(|| at_go.saturating_sub(baseline) as f64 / connections as f64)
            }),
        });
        let mut refusal_map = HashMap::new();
        for (code, n) in refusals {
            refusal_map.insert(format!("0x{code:02X}"), n);
        }
        Report {
            scenario: scenario.clone(),
            measured: Measured {
                seconds: measured_ms as f64 / 1000.0,
                messages: measured_messages,
                messages_per_s: rate,
                points_per_s: rate * f64::from(points),
            },
            latency: LatencySummary::of(&self.measured),
            latency_all: LatencySummary::of(&self.all),
            send_lag: (self.send_lag.count() > 0).then(|| LatencySummary::of(&self.send_lag)),
            latency_arrival: (self.arrival.count() > 0).then(|| LatencySummary::of(&self.arrival)),
            totals,
            refusals: refusal_map,
            server,
            generator,
            host,
            server_log: None,
            ts_min_ms,
            ts_max_ms,
            timeline: self.report_timeline(),
            verification: None,
            verify_s: None,
            alarms: None,
        }
    }

    /// Per load second: rates from the ticks' own intervals, latency of the ticks that ended in it.
    fn report_timeline(&self) -> Vec<Second> {
        let mut counters = Counters::default();
        self.seconds
            .iter()
            .map(|(&second, b)| {
                let mut sent_per_s = 0.0;
                let mut acked_per_s = 0.0;
                for &(sent, acked, ms) in b.sources.values() {
                    counters.sent += sent;
                    counters.acked += acked;
                    if ms > 0 {
                        sent_per_s += sent as f64 * 1000.0 / ms as f64;
                        acked_per_s += acked as f64 * 1000.0 / ms as f64;
                    }
                }
                Second {
                    t_s: second as f64,
                    load_s: Some(second as f64),
                    sent_per_s,
                    acked_per_s,
                    p50_ms: b.latency.quantile_us(0.5) as f64 / 1000.0,
                    p99_ms: b.latency.quantile_us(0.99) as f64 / 1000.0,
                    max_ms: b.latency.max_us() as f64 / 1000.0,
                    counters,
                    server_cpu_percent: b.server.as_ref().map(|s| s.cpu_percent),
                    server_rss_bytes: b.server.as_ref().map(|s| s.rss_bytes),
                    server_puback_p99_le_ms: None,
                    send_lag_p99_ms: (b.send_lag.count() > 0)
                        .then(|| b.send_lag.quantile_us(0.99) as f64 / 1000.0),
                    arrival_p99_ms: (b.arrival.count() > 0)
                        .then(|| b.arrival.quantile_us(0.99) as f64 / 1000.0),
                }
            })
            .collect()
    }

    /// Connections open when the load started: every settled device minus failures and refusals.
    fn totals_connected_at_go(&self, results: &[SliceResult]) -> u64 {
        results
            .iter()
            .map(|r| {
                r.counters
                    .settled
                    .saturating_sub(r.counters.connect_failures)
                    .saturating_sub(r.counters.refused)
            })
            .sum()
    }
}

/// The mean of `values`, `None` when there are none.
fn average(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// CPU time per message, in microseconds, from a CPU share (percent of one core) and a message rate.
fn cpu_us_per_message(cpu_percent: f64, messages_per_s: f64) -> Option<f64> {
    (messages_per_s > 0.0).then(|| cpu_percent / 100.0 * 1e6 / messages_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleets_split_over_processes_with_their_own_source_addresses() {
        let s = Scenario {
            devices: 40_000,
            connections_per_process: 18_000,
            ..Scenario::default()
        };
        let slices = split(&s);
        assert_eq!(slices.len(), 3);
        assert_eq!(slices.iter().map(|s| s.count).sum::<u32>(), 40_000);
        assert_eq!(slices[1].first_slot, slices[0].count);
        let ips: Vec<_> = slices.iter().map(|s| s.local_ip.unwrap()).collect();
        assert_eq!(ips[0], IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_ne!(ips[0], ips[2]);
        let one = split(&Scenario::default());
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].local_ip, None);
    }

    /// A tick with `acked` messages sent and acknowledged so far, and no latencies.
    fn acked_tick(load_ms: Option<u64>, acked: u64) -> Tick {
        Tick {
            load_ms,
            counters: Counters {
                acked,
                sent: acked,
                ..Counters::default()
            },
            latency: Latency::new().to_base64(),
            send_lag: String::new(),
            arrival: String::new(),
        }
    }

    #[test]
    fn aggregator_merges_sources_and_measures_only_the_window() {
        let s = Scenario {
            warmup_s: 1.0,
            duration_s: 2.0,
            ..Scenario::default()
        };
        let mut agg = Aggregator::new(&s, 2);
        let histogram = |values: &[u64]| {
            let mut l = Latency::new();
            for &us in values {
                l.record(us);
            }
            l.to_base64()
        };
        // (load ms, acked, latencies, send lags); each latency counted to the PUBACK's arrival is 80% of it.
        let tick = |ms: Option<u64>, acked: u64, lat_us: &[u64], lag_us: &[u64]| Tick {
            load_ms: ms,
            counters: Counters {
                acked,
                sent: acked,
                ..Counters::default()
            },
            latency: histogram(lat_us),
            send_lag: histogram(lag_us),
            arrival: histogram(&lat_us.iter().map(|us| us * 4 / 5).collect::<Vec<_>>()),
        };
        for source in 0..2 {
            agg.tick(source, &tick(None, 0, &[], &[])).unwrap();
            // Warm-up: not measured.
            agg.tick(source, &tick(Some(1000), 100, &[50_000], &[40_000]))
                .unwrap();
            agg.tick(source, &tick(Some(2000), 300, &[1_000], &[100]))
                .unwrap();
            agg.tick(source, &tick(Some(3000), 500, &[2_000], &[300]))
                .unwrap();
            // Drain: not measured.
            agg.tick(source, &tick(Some(9000), 500, &[900_000], &[800_000]))
                .unwrap();
        }
        let report = agg.finish(&s, &[], None, None);
        assert_eq!(report.measured.messages, 800);
        assert!((report.measured.messages_per_s - 400.0).abs() < 1e-9);
        assert_eq!(report.latency.count, 4);
        assert!(report.latency.max_ms < 3.0);
        assert_eq!(report.latency_all.count, 8);
        let lag = report.send_lag.clone().expect("send lags were recorded");
        assert_eq!(lag.count, 4);
        assert!(lag.max_ms > 0.29 && lag.max_ms < 0.31, "{}", lag.max_ms);
        // The latency to the PUBACKs' arrival: the same window, its own values.
        let arrival = report
            .latency_arrival
            .clone()
            .expect("arrivals were recorded");
        assert_eq!(arrival.count, 4);
        assert!(
            arrival.max_ms > 1.59 && arrival.max_ms < 1.61,
            "{}",
            arrival.max_ms
        );
        let per_second: Vec<f64> = report
            .timeline
            .iter()
            .map(|s| s.arrival_p99_ms.expect("a second with arrivals"))
            .collect();
        assert_eq!(per_second.len(), 4);
        for (got, want) in per_second.iter().zip([40.0, 0.8, 1.6, 720.0]) {
            assert!((got - want).abs() < want * 0.01, "{got} ms, not {want}");
        }
        assert!(report.table().contains("arrival       p50 "));
        // The timeline keeps each second's own send lag, warm-up and drain included.
        let lags: Vec<(f64, f64)> = report
            .timeline
            .iter()
            .map(|s| (s.t_s, s.send_lag_p99_ms.expect("an open-loop second")))
            .collect();
        assert_eq!(lags.len(), 4);
        for ((t, lag), (want_t, want_ms)) in
            lags.iter()
                .zip([(1.0, 40.0), (2.0, 0.1), (3.0, 0.3), (9.0, 800.0)])
        {
            assert_eq!(*t, want_t);
            assert!(
                (lag - want_ms).abs() < want_ms * 0.01,
                "second {t}: {lag} ms"
            );
        }
    }

    #[test]
    fn the_generator_cpu_counts_over_the_measured_window_and_per_message() {
        let s = Scenario {
            warmup_s: 1.0,
            duration_s: 2.0,
            ..Scenario::default()
        };
        let mut agg = Aggregator::new(&s, 1);
        // (load second, acked so far, generator CPU): warm-up, two measured seconds, drain.
        for (second, acked, cpu) in [
            (1, 100, 90.0),
            (2, 500, 40.0),
            (3, 900, 60.0),
            (9, 900, 5.0),
        ] {
            agg.tick(0, &acked_tick(Some(second * 1000), acked))
                .unwrap();
            let samples = Samples {
                server: None,
                host: None,
                generator_cpu: Some(cpu),
            };
            let load = Duration::from_millis(second * 1000);
            agg.second(load, Some(load), samples);
        }
        let report = agg.finish(&s, &[], None, None);
        // Measured: 800 messages from 1 s to 3 s, 400/s; the generator at 50% of a core.
        assert!((report.measured.messages_per_s - 400.0).abs() < 1e-9);
        let generator = report.generator.clone().expect("the generator was sampled");
        assert!((generator.cpu_percent_avg - 50.0).abs() < 1e-9);
        let us = generator.cpu_us_per_message.expect("a rate");
        assert!((us - 1250.0).abs() < 1e-6, "{us}");
        assert!(report
            .table()
            .contains("generator     cpu avg 50% (1250.00 µs per message)"));
    }

    #[test]
    fn cpu_per_message_needs_a_rate() {
        assert_eq!(cpu_us_per_message(100.0, 0.0), None);
        assert_eq!(cpu_us_per_message(100.0, 250_000.0), Some(4.0));
        assert_eq!(average(&[]), None);
        assert_eq!(average(&[1.0, 2.0]), Some(1.5));
    }

    #[test]
    fn ticks_without_send_lags_or_arrivals_report_neither() {
        let s = Scenario::default();
        let mut agg = Aggregator::new(&s, 1);
        let mut l = Latency::new();
        l.record(1_000);
        for (ms, empty) in [(1000, String::new()), (2000, Latency::new().to_base64())] {
            let tick = Tick {
                load_ms: Some(ms),
                counters: Counters::default(),
                latency: l.to_base64(),
                send_lag: empty.clone(),
                arrival: empty,
            };
            agg.tick(0, &tick).unwrap();
        }
        let report = agg.finish(&s, &[], None, None);
        assert!(report.send_lag.is_none());
        assert!(report.latency_arrival.is_none());
        assert!(report
            .timeline
            .iter()
            .all(|s| s.send_lag_p99_ms.is_none() && s.arrival_p99_ms.is_none()));
        assert!(!report.table().contains("arrival"));
        let json = serde_json::to_value(&report).unwrap();
        assert!(json.get("send_lag").is_none());
        assert!(json.get("latency_arrival").is_none());
        assert!(json["timeline"][0].get("send_lag_p99_ms").is_none());
        assert!(json["timeline"][0].get("arrival_p99_ms").is_none());
    }

    #[test]
    fn the_report_timeline_divides_each_ticks_delta_by_its_own_interval() {
        let s = Scenario::default();
        let mut agg = Aggregator::new(&s, 1);
        agg.tick(0, &acked_tick(None, 0)).unwrap();
        agg.tick(0, &acked_tick(Some(1000), 100)).unwrap();
        agg.tick(0, &acked_tick(Some(2000), 300)).unwrap();
        // A late tick: 1.5 s after the previous one. Its 300 messages are 200/s, not a 300/s spike
        // followed by an empty second.
        agg.tick(0, &acked_tick(Some(3500), 600)).unwrap();
        let timeline = agg.report_timeline();
        let rates: Vec<(f64, f64)> = timeline
            .iter()
            .map(|s| (s.load_s.unwrap(), s.acked_per_s))
            .collect();
        assert_eq!(rates, vec![(1.0, 100.0), (2.0, 200.0), (4.0, 200.0)]);
        assert_eq!(timeline.last().unwrap().counters.acked, 600);
    }
}
