//! `fleetwire bench` flags: a scenario file, flags that override it, and the `null-server`, `query`,
//! `rpc` and `fsync-probe` subcommands.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::error::{Error, Result};
use crate::fsync_probe::{self, ProbeOptions};
use crate::null_journal::Journal;
use crate::null_server::{self, NullServerStats};
use crate::query::{self, QueryOptions};
use crate::run::{self, RunOptions};
use crate::scenario::{socket_addr, MqttVersion, Profile, Rate, Scenario, Transport};

/// Load-test a Fleetwire (or any MQTT) server. Without arguments: the canonical workload, 10,000 smart
/// meters over MQTT QoS 1 at the maximum rate for 30 s, verified through the REST API.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// An MQTT server that acknowledges every PUBLISH and does nothing else: the box's own limit.
    NullServer {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:1884")]
        bind: SocketAddr,
        /// Make it the durable null server: PUBLISH payloads are group-committed to a file in this
        /// directory (`fdatasync`) before they are acknowledged, and nothing else is done with them.
        #[arg(long)]
        fsync_dir: Option<PathBuf>,
        /// The durable null server's commit window, counted from the previous commit's start (Fleetwire's
        /// log defaults to the same 1,000 µs).
        #[arg(long, default_value_t = 1000, requires = "fsync_dir")]
        commit_window_us: u64,
        /// Size of the durable null server's file, written as zeros at start and then reused as a ring.
        #[arg(long, default_value_t = 256, requires = "fsync_dir")]
        ring_mib: u64,
    },
    /// Query latency: one day of 1 s data for one key, read back as 1-minute averages.
    Query {
        #[command(flatten)]
        server: ServerArgs,
        /// Device that holds the data (created if missing).
        #[arg(long, default_value = "DWQUERY0")]
        device: String,
        /// Timed queries (after 3 warm-up queries).
        #[arg(long, default_value_t = 100)]
        runs: u32,
        /// Skip writing the day of data (it is already there).
        #[arg(long)]
        no_load: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// REST two-way RPC round trip to one connected MQTT device that answers at once.
    Rpc {
        #[command(flatten)]
        server: ServerArgs,
        /// The answering device (created if missing).
        #[arg(long, default_value = "DWRPC0")]
        device: String,
        /// Timed calls (after 20 warm-up calls).
        #[arg(long, default_value_t = 1000)]
        runs: u32,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// The disk's own flush latency, no server involved: a small write and `fdatasync`, as the ingest log
    /// does under load, over and over.
    FsyncProbe {
        /// Directory on the disk to probe (use the server's data directory).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Seconds to probe.
        #[arg(long, default_value_t = 30.0)]
        seconds: f64,
        /// Bytes written before each sync.
        #[arg(long, default_value_t = 5000)]
        write_bytes: usize,
        /// Microseconds from one sync's start to the next.
        #[arg(long, default_value_t = 1250)]
        interval_us: u64,
        /// Write with O_DIRECT (whole 4 KiB blocks), so that the write's time is the device taking the data
        /// and the sync's the cache flush alone.
        #[arg(long)]
        direct: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The server a `query` or `rpc` benchmark talks to, and the tenant administrator it logs in as.
#[derive(Debug, Args)]
pub struct ServerArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 1883)]
    pub mqtt_port: u16,
    #[arg(long, default_value_t = 8080)]
    pub http_port: u16,
    #[arg(long, default_value = "tenant@thingsboard.org")]
    pub username: String,
    #[arg(long, default_value = "tenant")]
    pub password: String,
}

impl ServerArgs {
    fn http_addr(&self) -> Result<SocketAddr> {
        socket_addr(&self.host, self.http_port)
    }

    fn mqtt_addr(&self) -> Result<SocketAddr> {
        socket_addr(&self.host, self.mqtt_port)
    }
}

/// Flags of a load run; each overrides the scenario file's value.
#[derive(Debug, Args, Default)]
pub struct RunArgs {
    /// Scenario file (TOML, see bench/scenarios/); flags override its values.
    #[arg(long, short)]
    pub scenario: Option<PathBuf>,
    #[arg(long)]
    pub name: Option<String>,
    /// mqtt or http.
    #[arg(long, value_parser = parse_name::<Transport>)]
    pub transport: Option<Transport>,
    /// 3.1, 3.1.1 or 5.
    #[arg(long, value_parser = parse_name::<MqttVersion>)]
    pub mqtt_version: Option<MqttVersion>,
    #[arg(long)]
    pub qos: Option<u8>,
    #[arg(long)]
    pub keep_alive_s: Option<u16>,
    #[arg(long)]
    pub devices: Option<u32>,
    #[arg(long)]
    pub first_index: Option<u32>,
    /// smart-meter, smart-tracker or industrial-plc.
    #[arg(long, value_parser = parse_name::<Profile>)]
    pub profile: Option<Profile>,
    #[arg(long)]
    pub plc_values: Option<u32>,
    /// Total messages/s paced over the devices, or "max".
    #[arg(long, value_parser = |s: &str| Rate::parse(s).map_err(|e| e.to_string()))]
    pub rate: Option<Rate>,
    /// Messages in flight per connection.
    #[arg(long)]
    pub window: Option<u32>,
    /// Messages/s with batteryLevel = 10.
    #[arg(long)]
    pub alarms_per_s: Option<f64>,
    #[arg(long)]
    pub warmup_s: Option<f64>,
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// New connections per second.
    #[arg(long)]
    pub connect_rate: Option<f64>,
    /// Stop after this many messages in total.
    #[arg(long)]
    pub messages_max: Option<u64>,
    #[arg(long)]
    pub http_connections: Option<u32>,
    #[arg(long)]
    pub host: Option<String>,
    #[arg(long)]
    pub mqtt_port: Option<u16>,
    #[arg(long)]
    pub http_port: Option<u16>,
    #[arg(long)]
    pub username: Option<String>,
    #[arg(long)]
    pub password: Option<String>,
    /// Create the devices and their profile through the REST API first (existing ones are kept).
    #[arg(long)]
    pub create_devices: bool,
    /// Only create the devices and their profile (implies --create-devices), then exit.
    #[arg(long)]
    pub prepare_only: bool,
    /// Skip the acked-vs-stored verification (for servers that do not store, like mosquitto).
    #[arg(long)]
    pub no_verify: bool,
    /// Keep recounting for up to this long while points are missing (a server still applying a backlog).
    #[arg(long)]
    pub verify_wait_s: Option<f64>,
    #[arg(long)]
    pub connections_per_process: Option<u32>,
    /// Sample this process's CPU and RSS during the run (the server under test).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Print the report as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Internal: run one slice for a driver process (slice on stdin, events on stdout).
    #[arg(long, hide = true)]
    pub worker: bool,
}

impl RunArgs {
    /// The scenario: the file (or the defaults) with the flags applied.
    pub fn scenario(&self) -> Result<Scenario> {
        let mut s = match &self.scenario {
            Some(path) => Scenario::load(path)?,
            None => Scenario::default(),
        };
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = self.$field.clone() { s.$field = v; } )* };
        }
        set!(
            name,
            transport,
            mqtt_version,
            qos,
            keep_alive_s,
            devices,
            first_index,
            profile,
            plc_values,
            rate,
            window,
            alarms_per_s,
            warmup_s,
            duration_s,
            connect_rate,
            verify_wait_s,
            http_connections,
            host,
            mqtt_port,
            http_port,
            username,
            password,
            connections_per_process
        );
        if self.messages_max.is_some() {
            s.messages_max = self.messages_max;
        }
        if self.create_devices {
            s.create_devices = true;
        }
        if self.no_verify {
            s.verify = false;
        }
        s.validate()?;
        Ok(s)
    }
}

/// Runs `fleetwire bench`; Ok(false) means the run completed but failed (missing points, nothing acked).
pub async fn main(args: BenchArgs) -> Result<bool> {
    match args.command {
        Some(BenchCommand::NullServer {
            bind,
            fsync_dir,
            commit_window_us,
            ring_mib,
        }) => {
            let journal = match fsync_dir {
                Some(dir) => {
                    let window = Duration::from_micros(commit_window_us);
                    let ring_bytes = ring_mib.saturating_mul(1024 * 1024);
                    let journal = tokio::task::spawn_blocking(move || {
                        Journal::open(&dir, ring_bytes, window).map_err(|e| {
                            Error::io(format!("opening a journal in {}", dir.display()), e)
                        })
                    })
                    .await
                    .map_err(|e| Error::Worker(format!("opening the journal: {e}")))??;
                    Some(Arc::new(journal))
                }
                None => None,
            };
            let listener = tokio::net::TcpListener::bind(bind)
                .await
                .map_err(|e| Error::io(format!("binding {bind}"), e))?;
            match &journal {
                Some(journal) => eprintln!(
                    "durable null server listening on {bind}, journal {} ({commit_window_us} µs window)",
                    journal.path().display()
                ),
                None => eprintln!("null server listening on {bind}"),
            }
            null_server::serve(listener, Arc::new(NullServerStats::default()), journal)
                .await
                .map_err(|e| Error::io("null server", e))?;
            Ok(true)
        }
        Some(BenchCommand::Query {
            server,
            device,
            runs,
            no_load,
            json,
        }) => {
            let opts = QueryOptions {
                device_name: device,
                days: 1,
                step_ms: 1000,
                interval_ms: 60_000,
                agg: "AVG".into(),
                runs,
                load: !no_load,
            };
            let report = query::run(
                server.http_addr()?,
                server.mqtt_addr()?,
                &server.username,
                &server.password,
                &opts,
            )
            .await?;
            print_report(&report, json, || {
                format!(
                    "query: {} points, 1-minute {} over 1 day ({} buckets), {} runs: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                    report.points, opts.agg, report.buckets, report.runs, report.p50_ms, report.p99_ms, report.max_ms
                )
            })?;
            Ok(true)
        }
        Some(BenchCommand::FsyncProbe {
            dir,
            seconds,
            write_bytes,
            interval_us,
            direct,
            json,
        }) => {
            let duration = Duration::try_from_secs_f64(seconds).map_err(|_| {
                Error::Scenario(format!("fsync probe: {seconds} is not a number of seconds"))
            })?;
            let opts = ProbeOptions {
                dir,
                duration,
                write_bytes,
                interval: Duration::from_micros(interval_us),
                direct,
            };
            let report = tokio::task::spawn_blocking(move || fsync_probe::run(&opts))
                .await
                .map_err(|e| Error::Worker(format!("fsync probe: {e}")))??;
            print_report(&report, json, || report.line())?;
            Ok(true)
        }
        Some(BenchCommand::Rpc {
            server,
            device,
            runs,
            json,
        }) => {
            let report = crate::rpc::run(
                server.http_addr()?,
                server.mqtt_addr()?,
                &server.username,
                &server.password,
                &device,
                runs,
            )
            .await?;
            print_report(&report, json, || {
                format!(
                    "rpc: {} two-way round trips: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                    report.runs, report.p50_ms, report.p95_ms, report.p99_ms, report.max_ms
                )
            })?;
            Ok(true)
        }
        None if args.run.worker => {
            run::worker().await?;
            Ok(true)
        }
        None if args.run.prepare_only => {
            let scenario = args.run.scenario()?;
            run::prepare_devices(&scenario).await?;
            Ok(true)
        }
        None => {
            let scenario = args.run.scenario()?;
            let options = RunOptions {
                server_pid: args.run.server_pid,
                progress: true,
                worker_command: None,
            };
            let report = run::run(&scenario, &options).await?;
            if args.run.json {
                eprint!("{}", report.table());
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report)
                        .map_err(|e| Error::json("printing the report", e))?
                );
            } else {
                print!("{}", report.table());
            }
            Ok(report.ok())
        }
    }
}

/// Prints a subcommand's report: all of it as JSON, or its one line for the terminal.
fn print_report<T: serde::Serialize>(
    report: &T,
    json: bool,
    line: impl FnOnce() -> String,
) -> Result<()> {
    if json {
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| Error::json("printing the report", e))?;
        println!("{text}");
    } else {
        println!("{}", line());
    }
    Ok(())
}

/// A scenario enum from its TOML name (`mqtt`, `3.1.1`, `smart-meter`, ...), so flags and files accept
/// the same words.
fn parse_name<T: serde::de::DeserializeOwned>(s: &str) -> std::result::Result<T, String> {
    use serde::de::value::{Error as ValueError, StrDeserializer};
    T::deserialize(StrDeserializer::<ValueError>::new(s)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_take_the_scenario_files_names() {
        assert_eq!(parse_name::<Transport>("http"), Ok(Transport::Http));
        assert_eq!(parse_name::<MqttVersion>("3.1"), Ok(MqttVersion::V31));
        assert_eq!(parse_name::<MqttVersion>("311"), Ok(MqttVersion::V311));
        assert_eq!(parse_name::<MqttVersion>("5.0"), Ok(MqttVersion::V5));
        assert_eq!(
            parse_name::<Profile>("industrial-plc"),
            Ok(Profile::IndustrialPlc)
        );
        let err = parse_name::<Profile>("smart-fridge").unwrap_err();
        assert!(err.contains("smart-meter"), "{err}");
    }
}
