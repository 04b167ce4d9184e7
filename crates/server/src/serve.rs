//! `fleetwire serve`: opens the stores, creates the first accounts, binds the listeners and runs until
//! SIGINT/SIGTERM, then lets the processors persist and checkpoint before exiting.

use std::net::SocketAddr;

use fleetwire_entities::BootstrapSpec;
use tokio::net::{TcpListener, TcpSocket};

use crate::config::Config;
use crate::state::StartError;
use crate::AppState;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("creating the first accounts: {0}")]
    Bootstrap(#[from] fleetwire_entities::EntityError),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP server: {0}")]
    Http(std::io::Error),
}

/// Connections the kernel may hold completed but not yet accepted, per listener (capped by
/// `net.core.somaxconn`, 4096 by default). Tokio's `TcpListener::bind` asks for 128, as the
/// standard library does (`ss -ltn` shows it), and a storm of devices reconnecting at once (15,000
/// in `tests/e2e/test_adversarial.py`) overflows that while the accept loop is busy: the kernel
/// then drops handshakes, and clients wait for SYN retransmissions, seconds each, or see their
/// connection reset.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds a listener with `LISTEN_BACKLOG` (and `SO_REUSEADDR`, as `TcpListener::bind` sets it).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

pub async fn serve(config: Config) -> Result<(), ServeError> {
    let mqtt_addr = SocketAddr::new(config.bind, config.mqtt.port);
    let http_addr = SocketAddr::new(config.bind, config.http.port);
    let spec = BootstrapSpec {
        sysadmin_email: config.bootstrap.sysadmin_email.clone(),
        tenant_admin_email: config.bootstrap.tenant_admin_email.clone(),
        sysadmin_password: config.bootstrap.sysadmin_password.clone(),
        tenant_admin_password: config.bootstrap.tenant_admin_password.clone(),
        demo: config.bootstrap.demo,
    };
    let data_dir = config.data_dir.clone();
    // Opening recovers the log and the stores: blocking work, done before anything listens.
    let state = tokio::task::block_in_place(|| AppState::open(config))?;
    let report = state.entities.bootstrap(&spec)?;

    let mqtt = listen(mqtt_addr).map_err(|source| ServeError::Bind {
        what: "MQTT",
        addr: mqtt_addr,
        source,
    })?;
    let http = listen(http_addr).map_err(|source| ServeError::Bind {
        what: "HTTP",
        addr: http_addr,
        source,
    })?;
    tracing::info!(data_dir = %data_dir.display(), "stores open");
    println!("Fleetwire {} is running", env!("CARGO_PKG_VERSION"));
    println!("  MQTT  mqtt://{mqtt_addr}");
    println!("  HTTP  http://{http_addr}  (REST API, device HTTP API)");
    println!("  data  {}", data_dir.display());
    for (email, password) in &report.generated_passwords {
        println!("  created account {email} with password {password}  (shown once; change it)");
    }
    if let Some(demo) = &report.demo {
        let host = if config_is_wildcard(mqtt_addr) {
            "localhost".to_string()
        } else {
            mqtt_addr.ip().to_string()
        };
        println!(
            "Demo accounts: tenant@thingsboard.org / tenant, sysadmin@thingsboard.org / sysadmin"
        );
        println!(
            "Demo device \"{}\" with access token {}. Send it data:",
            demo.name, demo.access_token
        );
        println!(
            "  mosquitto_pub -h {host} -p {} -V mqttv311 -u {} -t v1/devices/me/telemetry -q 1 -m '{{\"temperature\":21.5}}'",
            mqtt_addr.port(),
            demo.access_token
        );
        println!(
            "  curl -X POST http://{host}:{}/api/v1/{}/telemetry -d '{{\"humidity\":40}}'",
            http_addr.port(),
            demo.access_token
        );
    }

    tokio::spawn(crate::activity::run_coarse_clock());
    tokio::spawn(crate::activity::run_checks(state.clone()));
    tokio::spawn(crate::mqtt::run(state.clone(), mqtt));
    match crate::api::rpc_persistent::resume(&state).await {
        Ok(0) => {}
        Ok(resumed) => tracing::info!(resumed, "resumed persistent RPC requests"),
        Err(e) => tracing::warn!(error = %e, "cannot resume persistent RPC requests"),
    }
    let app = crate::api::router(state.clone());
    // With the client's address: the HTTP device API's failed-authentication limit is per address.
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(http, app)
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(ServeError::Http)?;
    tracing::info!("shutting down: persisting state");
    crate::activity::persist(&state, crate::activity::Persist::All).await;
    tokio::task::block_in_place(|| state.ingest.shutdown());
    Ok(())
}

fn config_is_wildcard(addr: SocketAddr) -> bool {
    addr.ip().is_unspecified()
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// Asks for the configured time slice (`runtime.latency_slice_us`, see `fleetwire_log::sched`) for the calling
/// thread: the binary calls it on each of the async runtime's threads as it starts. Says once what came of it.
pub fn set_thread_slice(slice_us: u32) {
    static SAID: std::sync::Once = std::sync::Once::new();
    let outcome = fleetwire_log::sched::set_own_slice(slice_us);
    SAID.call_once(|| match outcome {
        Ok(fleetwire_log::sched::Slice::Set(us)) => {
            tracing::info!(
                slice_us = us,
                "runtime and log writer threads ask for a short time slice"
            )
        }
        Ok(fleetwire_log::sched::Slice::Ignored) => {
            tracing::info!(
                slice_us,
                "this kernel keeps its own time slice (custom slices need Linux 6.12)"
            )
        }
        Ok(fleetwire_log::sched::Slice::Default) => {}
        Err(e) => tracing::info!(slice_us, error = %e, "threads keep the kernel's time slice"),
    });
}
