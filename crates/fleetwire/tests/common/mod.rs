//! Black-box test harness: runs the real `fleetwire` binary on free loopback ports with its own data
//! directory, and talks to it the way devices and REST clients do.
//!
//! - [`Server`]: the child process; SIGKILLed on drop so no test leaks a server, restartable on the
//!   same data dir and ports for crash tests. Its output goes to `server.log` next to the data dir and
//!   is printed when a test panics.
//! - [`http`]: a minimal blocking HTTP/1.1 client (one request per connection).
//! - [`mqtt`]: a blocking MQTT client over `std::net::TcpStream` built on `fleetwire_mqtt`.
//!
//! Every socket read has a timeout, so a server that stops answering fails a test instead of hanging it.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

pub mod http;
pub mod mqtt;

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub use http::HttpResponse;
#[allow(unused_imports)]
pub use mqtt::{Event, MqttClient};

/// The access token of the device `FLEETWIRE_DEMO=true` creates.
pub const DEMO_TOKEN: &str = "DEMO_TOKEN";
pub const TENANT_EMAIL: &str = "tenant@thingsboard.org";
pub const TENANT_PASSWORD: &str = "tenant";

/// How long a server may take to answer `/healthz` after it is spawned (debug build, log recovery).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts at starting on fresh ports, in case another process took a port between our probe and
/// the server's bind.
const START_ATTEMPTS: usize = 3;

/// Ports handed out in this test process: parallel tests must never be given the same free port.
static PORTS_TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A free loopback port that no other test of this process was given.
fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        drop(listener);
        let mut taken = PORTS_TAKEN.lock().unwrap_or_else(|e| e.into_inner());
        if taken.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}

/// A running `fleetwire serve` with the demo accounts and the demo device.
pub struct Server {
    child: Option<Child>,
    /// Holds `data/` and `server.log`; removed on drop.
    dir: tempfile::TempDir,
    pub mqtt_port: u16,
    pub http_port: u16,
    /// Extra environment of the server process (config overrides).
    env: Vec<(String, String)>,
}

impl Server {
    /// Starts a server on fresh ports and a fresh data dir, and waits until `/healthz` answers 200.
    pub fn start() -> Server {
        Server::start_with_env(&[])
    }

    /// [`Server::start`] with extra environment variables, e.g. `FLEETWIRE_RATE_LIMITS_*` overrides.
    pub fn start_with_env(env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut server = Server {
            child: None,
            dir,
            mqtt_port: 0,
            http_port: 0,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        for attempt in 1..=START_ATTEMPTS {
            server.mqtt_port = free_port();
            server.http_port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(e) if attempt < START_ATTEMPTS => {
                    eprintln!("server start failed ({e}); retrying")
                }
                Err(e) => panic!("server did not start: {e}\n{}", server.log_tail()),
            }
        }
        unreachable!("the last attempt panics")
    }

    /// The server process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs the server (no shutdown hook runs) and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` is SIGKILL on Unix.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same data dir and ports (after [`Server::kill`]).
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn() {
            panic!("server did not restart: {e}\n{}", self.log_tail());
        }
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("cannot open the server log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(env!("CARGO_BIN_EXE_fleetwire"))
            .arg("serve")
            .arg("--data-dir")
            .arg(self.data_dir())
            .env("FLEETWIRE_MQTT_PORT", self.mqtt_port.to_string())
            .env("FLEETWIRE_HTTP_PORT", self.http_port.to_string())
            .env("FLEETWIRE_BIND", "127.0.0.1")
            .env("FLEETWIRE_DEMO", "true")
            .env_remove("FLEETWIRE_DATA_DIR")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", env!("CARGO_BIN_EXE_fleetwire")))?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let child = self.child.as_mut().ok_or("no child")?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Err(format!("server exited with {status} before it was ready"));
            }
            if let Ok(response) = http::request(self.http_port, "GET", "/healthz", None, None) {
                if response.status == 200 {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "/healthz did not answer 200 within {START_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last few kilobytes of the server's output.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let _ = file.seek(SeekFrom::Start(len.saturating_sub(8 * 1024)));
            let _ = file.read_to_string(&mut text);
        }
        text
    }

    // ---- MQTT ----

    /// A CONNECT that must be accepted: `username` is an access token.
    pub fn mqtt(&self, protocol: fleetwire_mqtt::Protocol, token: &str) -> MqttClient {
        MqttClient::connect_ok(self.mqtt_port, protocol, token)
    }

    // ---- REST ----

    /// Sends a request, panicking on I/O errors (not on error statuses).
    pub fn http(
        &self,
        method: &str,
        path: &str,
        jwt: Option<&str>,
        body: Option<&Value>,
    ) -> HttpResponse {
        http::request(self.http_port, method, path, jwt, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// Logs in as the demo tenant administrator; returns the JWT.
    pub fn login(&self) -> String {
        let body = json!({"username": TENANT_EMAIL, "password": TENANT_PASSWORD});
        let response = self.http("POST", "/api/auth/login", None, Some(&body));
        assert_eq!(response.status, 200, "login: {}", response.body);
        response.json()["token"]
            .as_str()
            .expect("login answer has a token")
            .to_string()
    }

    /// Creates a device with an access token; returns its id.
    pub fn create_device(&self, jwt: &str, name: &str, access_token: &str) -> String {
        let path = format!("/api/device?accessToken={access_token}");
        let response = self.http("POST", &path, Some(jwt), Some(&json!({"name": name})));
        assert_eq!(response.status, 200, "create device: {}", response.body);
        response.json()["id"]["id"]
            .as_str()
            .expect("device JSON has id.id")
            .to_string()
    }

    /// `GET .../values/timeseries` of one key over `[start_ts, end_ts]`, oldest first, strict types:
    /// the `[{"ts":…,"value":…}]` array of the key (empty if the key has no data).
    pub fn timeseries(
        &self,
        jwt: &str,
        device_id: &str,
        key: &str,
        start_ts: i64,
        end_ts: i64,
    ) -> Vec<Value> {
        let path = format!(
            "/api/plugins/telemetry/DEVICE/{device_id}/values/timeseries?keys={key}\
             &startTs={start_ts}&endTs={end_ts}&limit=1000&orderBy=ASC&useStrictDataTypes=true"
        );
        let response = self.http("GET", &path, Some(jwt), None);
        assert_eq!(response.status, 200, "timeseries: {}", response.body);
        match response.json().get(key) {
            None => Vec::new(),
            Some(points) => points.as_array().expect("points are an array").clone(),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("---- server log (tail) ----\n{}", self.log_tail());
        }
    }
}

/// A random `u64` from the standard library's per-process hash keys: enough for a test's random
/// choice without a dependency.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish()
}
