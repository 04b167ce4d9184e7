//! The `fleetwire` binary: `serve` runs the platform, `bench` load-tests it, `check-config` validates a
//! configuration file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use fleetwire_server::Config;

#[derive(Parser)]
#[command(
    name = "fleetwire",
    version,
    about = "IoT telemetry platform and MQTT broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run Fleetwire: MQTT on 1883, HTTP on 8080, embedded store in ./data (see fleetwire.toml).
    Serve {
        /// Configuration file (TOML); without it the built-in defaults apply.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Create ThingsBoard's demo accounts and a demo device, and print how to send data to it.
        #[arg(long)]
        demo: bool,
        /// Data directory (overrides the config file and FLEETWIRE_DATA_DIR).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Load-test a server: device fleets over MQTT or HTTP, latency, verification (see bench/README.md).
    Bench(Box<fleetwire_bench::cli::BenchArgs>),
    /// Load and validate a configuration, then print the effective configuration.
    CheckConfig {
        /// Configuration file (TOML); without it the built-in defaults are checked.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

mod heap;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes on one line, without a backtrace: these are operator errors (bad config,
            // port in use), not bugs.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("FLEETWIRE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve {
            config,
            demo,
            data_dir,
        } => {
            let mut config = Config::load(config.as_deref()).context("loading configuration")?;
            if demo {
                config.bootstrap.demo = true;
            }
            if let Some(dir) = data_dir {
                config.data_dir = dir;
            }
            if config.runtime.huge_pages {
                heap::serve_with_huge_pages();
            }
            let slice_us = config.runtime.latency_slice_us;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("fleetwire")
                .on_thread_start(move || fleetwire_server::serve::set_thread_slice(slice_us))
                .build()
                .context("starting the async runtime")?;
            // Not on this thread, which `block_on` leaves waiting for the stop signal: the threads it starts
            // (the processors) would inherit the slice.
            runtime
                .block_on(fleetwire_server::serve::serve(config))
                .context("serving")
        }
        Command::Bench(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("bench")
                .build()
                .context("starting the async runtime")?;
            let ok = runtime
                .block_on(fleetwire_bench::cli::main(*args))
                .context("bench")?;
            if !ok {
                anyhow::bail!(
                    "the run failed: nothing acknowledged, or acknowledged points are missing"
                );
            }
            Ok(())
        }
        Command::CheckConfig { config } => {
            let config = Config::load(config.as_deref()).context("loading configuration")?;
            println!(
                "{}",
                toml::to_string_pretty(&config).context("printing configuration")?
            );
            eprintln!("configuration is valid");
            Ok(())
        }
    }
}
