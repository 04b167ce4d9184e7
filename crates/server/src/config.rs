//! The one typed configuration tree.
//!
//! `fleetwire.toml` at the repository root is the built-in default (compiled in with `include_str!`): a
//! user's file only needs the keys it changes, because every struct here is `#[serde(default)]` and its
//! `Default` is that file. A handful of environment variables override what deployments change.

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The checked-in, fully commented default configuration.
pub const DEFAULT_TOML: &str = include_str!("../../../fleetwire.toml");

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("invalid value {value:?} for environment variable {var}: {reason}")]
    Env {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address every listener binds to.
    pub bind: IpAddr,
    /// Where the embedded stores live.
    pub data_dir: PathBuf,
    pub mqtt: MqttConfig,
    pub http: HttpConfig,
    pub auth: AuthConfig,
    pub bootstrap: BootstrapConfig,
    pub log: LogConfig,
    pub tsdb: TsdbConfig,
    pub activity: ActivityConfig,
    pub runtime: RuntimeConfig,
    pub rate_limits: RateLimitsConfig,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// The time slice, in microseconds, that the threads every acknowledgement waits on ask the kernel for:
    /// the async runtime's threads (connections, HTTP) and the ingest log's writer (Linux 6.12 and later;
    /// older kernels ignore it). 0 leaves the kernel's default; otherwise 100 to 100000.
    pub latency_slice_us: u32,
    /// Serve with the heap in transparent huge pages: `serve` starts itself again with glibc's malloc told
    /// to use one arena, whose memory it advises the kernel to back with huge pages (glibc 2.35 and later,
    /// with THP `madvise` or `always`; elsewhere nothing changes). The processors' state (series, heads,
    /// alarm state) is read one device after another across hundreds of MB, and on this kind of VM each
    /// record's objects cost page walks as much as cache misses.
    pub huge_pages: bool,
    /// The ingest log's writer thread rings the task that wakes the connections whose records a commit made
    /// durable through an eventfd that the runtime's I/O driver watches (Linux), so that the task runs from a
    /// worker's own queue; off, it wakes that task through its waker, which puts it in the runtime's global
    /// queue.
    pub dispatcher_doorbell: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            latency_slice_us: 0,
            huge_pages: true,
            dispatcher_doorbell: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ActivityConfig {
    /// A device without uplinks for this long is marked inactive, unless its `inactivityTimeout` SERVER
    /// attribute (ms) says otherwise.
    pub inactivity_timeout_ms: u64,
    /// How often devices are checked for inactivity.
    pub check_interval_ms: u64,
    /// A connected device's uplinks are written as activity at most this often, and the changes of the
    /// activity state (connects, disconnects, `active`) reach the attribute table at this pace.
    pub report_interval_ms: u64,
    /// Every device's `lastActivityTime` reaches the attribute table within about this long. When that is
    /// all that changed, each persist writes the next slice of the devices in the table's key order, so a
    /// steady fleet costs the disk a few pages per persist rather than a rewrite of every device's row.
    /// After a crash the stored `lastActivityTime` may be up to this much older than the last uplink the
    /// server saw (until the device's next one); a graceful stop writes it all. At or below
    /// `report_interval_ms`, every persist writes every change.
    pub last_activity_persist_interval_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MqttConfig {
    /// MQTT listener port.
    pub port: u16,
    /// Largest MQTT packet accepted, in bytes.
    pub packet_bytes_max: usize,
    /// Most simultaneous MQTT connections.
    pub connections_max: usize,
    /// Most QoS 1 messages from one client awaiting their PUBACK.
    pub inflight_max: u16,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// HTTP listener port (REST and device HTTP API).
    pub port: u16,
    /// Largest request body accepted, in bytes.
    pub body_bytes_max: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HS512 secret for JWTs; empty = generated on first start and kept in the data dir.
    pub jwt_secret: String,
    /// Access token lifetime, seconds.
    pub access_token_ttl_s: u64,
    /// Refresh token lifetime, seconds.
    pub refresh_token_ttl_s: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BootstrapConfig {
    /// Email of the system administrator created on first start.
    pub sysadmin_email: String,
    /// Email of the tenant administrator created on first start.
    pub tenant_admin_email: String,
    /// Initial sysadmin password; empty = generated and printed once.
    pub sysadmin_password: String,
    /// Initial tenant admin password; empty = generated and printed once.
    pub tenant_admin_password: String,
    /// Create ThingsBoard's demo accounts and a demo device.
    pub demo: bool,
}

/// How far an acknowledged record has gone before the acknowledgement is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// fdatasync'd to disk.
    Fsync,
    /// Written to the OS page cache only.
    Os,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Number of ingest-log partitions (one processor each).
    pub partitions: u16,
    /// Whether acknowledgements wait for fsync.
    pub durability: Durability,
    /// Segment size at which a new segment file starts.
    pub segment_bytes_max: u64,
    /// The least time between the starts of two group commits (the log's commit window).
    pub group_commit_max_delay_us: u64,
    /// The nice value of the log's writer thread (-20 to 19; 0 leaves it alone): below 0 it gets a core
    /// sooner on a busy machine, where it needs `CAP_SYS_NICE` or `RLIMIT_NICE` (otherwise it is left alone).
    pub writer_nice: i8,
    /// While a processor has applied everything durable, the least time from the start of one batch of
    /// records to the start of the next: the records of several commits are then applied in one wake-up
    /// rather than one wake-up per commit, which on a small machine took a core just as each commit's
    /// PUBACKs went out. Reads, pushes and alarm rules see new data up to this much later. 0 to 100000;
    /// 0 applies every commit as it comes.
    pub apply_interval_us: u32,
    /// Disk budget of the ingest log: at this many bytes of segments, transports stop reading until the
    /// processors catch up (backpressure). 0: no budget.
    pub disk_bytes_max: u64,
    /// Writes are refused while the data directory's file system has less free space than this.
    pub disk_free_min_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TsdbConfig {
    /// Points per series held in memory before sealing into a chunk, at most: each series seals at its
    /// own size between three quarters of this and this, so a fleet reporting in step does not seal in step.
    pub chunk_points_max: usize,
    /// Age (of the log data it holds) at which an in-memory head is sealed regardless of its size.
    pub head_age_max_s: u64,
    /// Most ingest-log bytes, over all partitions, that unsealed heads may keep from being reclaimed.
    pub head_log_bytes_max: u64,
    /// Most points one query returns per key.
    pub query_points_max: usize,
}

/// Rate limits (reference 7), ThingsBoard's tenant-profile keys in snake_case. This section is the default
/// tenant profile of every tenant. Each limit is `"capacity:seconds[,capacity:seconds…]"`; empty = unlimited.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitsConfig {
    /// All transport messages of a tenant that carry no data points (`transportTenantMsgRateLimit`).
    pub transport_tenant_msg: String,
    /// A tenant's messages carrying data points (`transportTenantTelemetryMsgRateLimit`).
    pub transport_tenant_telemetry_msg: String,
    /// A tenant's data points (`transportTenantTelemetryDataPointsRateLimit`).
    pub transport_tenant_telemetry_data_points: String,
    /// Per directly connected device (`transportDeviceMsgRateLimit`).
    pub transport_device_msg: String,
    /// `transportDeviceTelemetryMsgRateLimit`.
    pub transport_device_telemetry_msg: String,
    /// `transportDeviceTelemetryDataPointsRateLimit`.
    pub transport_device_telemetry_data_points: String,
    /// Per gateway, messages of the devices behind it (`transportGatewayMsgRateLimit`).
    pub transport_gateway_msg: String,
    /// `transportGatewayTelemetryMsgRateLimit`.
    pub transport_gateway_telemetry_msg: String,
    /// `transportGatewayTelemetryDataPointsRateLimit`.
    pub transport_gateway_telemetry_data_points: String,
    /// Per gateway, its own messages (`transportGatewayDeviceMsgRateLimit`).
    pub transport_gateway_device_msg: String,
    /// `transportGatewayDeviceTelemetryMsgRateLimit`.
    pub transport_gateway_device_telemetry_msg: String,
    /// `transportGatewayDeviceTelemetryDataPointsRateLimit`.
    pub transport_gateway_device_telemetry_data_points: String,
    /// REST requests per tenant (`tenantServerRestLimitsConfiguration`).
    pub rest_tenant: String,
    /// REST requests per customer, for customer users (`customerServerRestLimitsConfiguration`).
    pub rest_customer: String,
    /// Block a source address after repeated failed device authentications (MQTT CONNECT, HTTP device
    /// API token); ThingsBoard's `TB_TRANSPORT_IP_RATE_LIMITS_ENABLED`.
    pub failed_auth_limit_enabled: bool,
    /// Failed authentications from one address, without a success between, that block it.
    pub failed_auth_per_ip_max: u32,
    /// How long a blocked address stays blocked, seconds.
    pub failed_auth_block_s: u64,
}

impl RateLimitsConfig {
    /// The limit keys with their values, in file order (for validation, env overrides and reporting).
    pub fn specs(&self) -> [(&'static str, &String); 14] {
        [
            ("transport_tenant_msg", &self.transport_tenant_msg),
            (
                "transport_tenant_telemetry_msg",
                &self.transport_tenant_telemetry_msg,
            ),
            (
                "transport_tenant_telemetry_data_points",
                &self.transport_tenant_telemetry_data_points,
            ),
            ("transport_device_msg", &self.transport_device_msg),
            (
                "transport_device_telemetry_msg",
                &self.transport_device_telemetry_msg,
            ),
            (
                "transport_device_telemetry_data_points",
                &self.transport_device_telemetry_data_points,
            ),
            ("transport_gateway_msg", &self.transport_gateway_msg),
            (
                "transport_gateway_telemetry_msg",
                &self.transport_gateway_telemetry_msg,
            ),
            (
                "transport_gateway_telemetry_data_points",
                &self.transport_gateway_telemetry_data_points,
            ),
            (
                "transport_gateway_device_msg",
                &self.transport_gateway_device_msg,
            ),
            (
                "transport_gateway_device_telemetry_msg",
                &self.transport_gateway_device_telemetry_msg,
            ),
            (
                "transport_gateway_device_telemetry_data_points",
                &self.transport_gateway_device_telemetry_data_points,
            ),
            ("rest_tenant", &self.rest_tenant),
            ("rest_customer", &self.rest_customer),
        ]
    }

    fn spec_mut(&mut self, key: &str) -> Option<&mut String> {
        Some(match key {
            "transport_tenant_msg" => &mut self.transport_tenant_msg,
            "transport_tenant_telemetry_msg" => &mut self.transport_tenant_telemetry_msg,
            "transport_tenant_telemetry_data_points" => {
                &mut self.transport_tenant_telemetry_data_points
            }
            "transport_device_msg" => &mut self.transport_device_msg,
            "transport_device_telemetry_msg" => &mut self.transport_device_telemetry_msg,
            "transport_device_telemetry_data_points" => {
                &mut self.transport_device_telemetry_data_points
            }
            "transport_gateway_msg" => &mut self.transport_gateway_msg,
            "transport_gateway_telemetry_msg" => &mut self.transport_gateway_telemetry_msg,
            "transport_gateway_telemetry_data_points" => {
                &mut self.transport_gateway_telemetry_data_points
            }
            "transport_gateway_device_msg" => &mut self.transport_gateway_device_msg,
            "transport_gateway_device_telemetry_msg" => {
                &mut self.transport_gateway_device_telemetry_msg
            }
            "transport_gateway_device_telemetry_data_points" => {
                &mut self.transport_gateway_device_telemetry_data_points
            }
            "rest_tenant" => &mut self.rest_tenant,
            "rest_customer" => &mut self.rest_customer,
            _ => return None,
        })
    }
}

/// Parses a TOML document into a config, naming `origin` in errors.
fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse {
        origin: origin.to_string(),
        message: e.to_string(),
    })
}

fn builtin() -> Config {
    // The built-in file is checked by the `builtin_file_equals_defaults` test; a failure here is a build defect.
    parse(DEFAULT_TOML, "fleetwire.toml (built in)").expect("built-in fleetwire.toml is valid")
}

// The defaults below are the values written in fleetwire.toml; the `builtin_file_equals_defaults` test keeps
// the two in step, so a partial user file and the built-in file agree.

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: IpAddr::from([0, 0, 0, 0]),
            data_dir: PathBuf::from("./data"),
            mqtt: MqttConfig::default(),
            http: HttpConfig::default(),
            auth: AuthConfig::default(),
            bootstrap: BootstrapConfig::default(),
            log: LogConfig::default(),
            tsdb: TsdbConfig::default(),
            activity: ActivityConfig::default(),
            runtime: RuntimeConfig::default(),
            rate_limits: RateLimitsConfig::default(),
        }
    }
}

impl Default for MqttConfig {
    fn default() -> Self {
        MqttConfig {
            port: 1883,
            packet_bytes_max: 65536,
            connections_max: 19000,
            inflight_max: 100,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            port: 8080,
            body_bytes_max: 50 << 20,
        }
    }
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            jwt_secret: String::new(),
            access_token_ttl_s: 9000,
            refresh_token_ttl_s: 604800,
        }
    }
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            sysadmin_email: "sysadmin@fleetwire.local".into(),
            tenant_admin_email: "tenant@fleetwire.local".into(),
            sysadmin_password: String::new(),
            tenant_admin_password: String::new(),
            demo: false,
        }
    }
}

impl Default for ActivityConfig {
    fn default() -> Self {
        ActivityConfig {
            inactivity_timeout_ms: 600_000,
            check_interval_ms: 60_000,
            report_interval_ms: 3_000,
            last_activity_persist_interval_ms: 60_000,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            partitions: 1,
            durability: Durability::Fsync,
            segment_bytes_max: 64 << 20,
            group_commit_max_delay_us: 1000,
            writer_nice: -10,
            apply_interval_us: 4000,
            disk_bytes_max: 16 << 30,
            disk_free_min_bytes: 256 << 20,
        }
    }
}

impl Default for RateLimitsConfig {
    fn default() -> Self {
        // ThingsBoard CE's default tenant profile sets no transport or REST limit.
        RateLimitsConfig {
            transport_tenant_msg: String::new(),
            transport_tenant_telemetry_msg: String::new(),
            transport_tenant_telemetry_data_points: String::new(),
            transport_device_msg: String::new(),
            transport_device_telemetry_msg: String::new(),
            transport_device_telemetry_data_points: String::new(),
            transport_gateway_msg: String::new(),
            transport_gateway_telemetry_msg: String::new(),
            transport_gateway_telemetry_data_points: String::new(),
            transport_gateway_device_msg: String::new(),
            transport_gateway_device_telemetry_msg: String::new(),
            transport_gateway_device_telemetry_data_points: String::new(),
            rest_tenant: String::new(),
            rest_customer: String::new(),
            failed_auth_limit_enabled: false,
            failed_auth_per_ip_max: 10,
            failed_auth_block_s: 60,
        }
    }
}

impl Default for TsdbConfig {
    fn default() -> Self {
        TsdbConfig {
            chunk_points_max: 1024,
            head_age_max_s: 3600,
            head_log_bytes_max: 1 << 30,
            query_points_max: 100_000,
        }
    }
}

impl Config {
    /// Loads the config: the given file (or the built-in default), then environment overrides, then checks.
    pub fn load(path: Option<&std::path::Path>) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                parse(&text, &path.display().to_string())?
            }
            None => builtin(),
        };
        config.apply_env(|name| std::env::var(name).ok())?;
        config.validate()?;
        Ok(config)
    }

    /// Applies `FLEETWIRE_*` overrides read through `get` (a function so tests need not touch the process
    /// environment).
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn parsed<T: std::str::FromStr>(var: &'static str, value: String) -> Result<T, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            value.parse().map_err(|e: T::Err| ConfigError::Env {
                var,
                reason: e.to_string(),
                value,
            })
        }
        if let Some(v) = get("FLEETWIRE_BIND") {
            self.bind = parsed("FLEETWIRE_BIND", v)?;
        }
        if let Some(v) = get("FLEETWIRE_MQTT_PORT") {
            self.mqtt.port = parsed("FLEETWIRE_MQTT_PORT", v)?;
        }
        if let Some(v) = get("FLEETWIRE_HTTP_PORT") {
            self.http.port = parsed("FLEETWIRE_HTTP_PORT", v)?;
        }
        if let Some(v) = get("FLEETWIRE_ACTIVITY_CHECK_INTERVAL_MS") {
            self.activity.check_interval_ms = parsed("FLEETWIRE_ACTIVITY_CHECK_INTERVAL_MS", v)?;
        }
        if let Some(v) = get("FLEETWIRE_ACTIVITY_INACTIVITY_TIMEOUT_MS") {
            self.activity.inactivity_timeout_ms =
                parsed("FLEETWIRE_ACTIVITY_INACTIVITY_TIMEOUT_MS", v)?;
        }
        if let Some(v) = get("FLEETWIRE_LOG_SEGMENT_BYTES_MAX") {
            self.log.segment_bytes_max = parsed("FLEETWIRE_LOG_SEGMENT_BYTES_MAX", v)?;
        }
        if let Some(v) = get("FLEETWIRE_LOG_DISK_BYTES_MAX") {
            self.log.disk_bytes_max = parsed("FLEETWIRE_LOG_DISK_BYTES_MAX", v)?;
        }
        if let Some(v) = get("FLEETWIRE_LOG_DISK_FREE_MIN_BYTES") {
            self.log.disk_free_min_bytes = parsed("FLEETWIRE_LOG_DISK_FREE_MIN_BYTES", v)?;
        }
        if let Some(v) = get("FLEETWIRE_RUNTIME_LATENCY_SLICE_US") {
            self.runtime.latency_slice_us = parsed("FLEETWIRE_RUNTIME_LATENCY_SLICE_US", v)?;
        }
        if let Some(v) = get("FLEETWIRE_RUNTIME_HUGE_PAGES") {
            self.runtime.huge_pages = parsed("FLEETWIRE_RUNTIME_HUGE_PAGES", v)?;
        }
        if let Some(v) = get("FLEETWIRE_RUNTIME_DISPATCHER_DOORBELL") {
            self.runtime.dispatcher_doorbell = parsed("FLEETWIRE_RUNTIME_DISPATCHER_DOORBELL", v)?;
        }
        if let Some(v) = get("FLEETWIRE_DATA_DIR") {
            self.data_dir = PathBuf::from(v);
        }
        if let Some(v) = get("FLEETWIRE_JWT_SECRET") {
            self.auth.jwt_secret = v;
        }
        if let Some(v) = get("FLEETWIRE_SYSADMIN_PASSWORD") {
            self.bootstrap.sysadmin_password = v;
        }
        if let Some(v) = get("FLEETWIRE_TENANT_ADMIN_PASSWORD") {
            self.bootstrap.tenant_admin_password = v;
        }
        if let Some(v) = get("FLEETWIRE_DEMO") {
            self.bootstrap.demo = matches!(v.as_str(), "1" | "true" | "yes" | "on");
        }
        // Every limit of `[rate_limits]`: FLEETWIRE_RATE_LIMITS_TRANSPORT_DEVICE_MSG="20:1,600:60" and so on.
        for (key, _) in self.rate_limits.clone().specs() {
            if let Some(v) = get(&format!(
                "FLEETWIRE_RATE_LIMITS_{}",
                key.to_ascii_uppercase()
            )) {
                if let Some(spec) = self.rate_limits.spec_mut(key) {
                    *spec = v;
                }
            }
        }
        if let Some(v) = get("FLEETWIRE_RATE_LIMITS_FAILED_AUTH_LIMIT_ENABLED") {
            self.rate_limits.failed_auth_limit_enabled =
                matches!(v.as_str(), "1" | "true" | "yes" | "on");
        }
        if let Some(v) = get("FLEETWIRE_RATE_LIMITS_FAILED_AUTH_PER_IP_MAX") {
            self.rate_limits.failed_auth_per_ip_max =
                parsed("FLEETWIRE_RATE_LIMITS_FAILED_AUTH_PER_IP_MAX", v)?;
        }
        if let Some(v) = get("FLEETWIRE_RATE_LIMITS_FAILED_AUTH_BLOCK_S") {
            self.rate_limits.failed_auth_block_s =
                parsed("FLEETWIRE_RATE_LIMITS_FAILED_AUTH_BLOCK_S", v)?;
        }
        if let Some(v) = get("FLEETWIRE_DURABILITY") {
            self.log.durability = match v.as_str() {
                "fsync" => Durability::Fsync,
                "os" => Durability::Os,
                _ => {
                    return Err(ConfigError::Env {
                        var: "FLEETWIRE_DURABILITY",
                        value: v,
                        reason: "expected \"fsync\" or \"os\"".into(),
                    })
                }
            };
        }
        Ok(())
    }

    /// Rejects values that cannot work, with a message naming the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if self.log.partitions == 0 || self.log.partitions > 256 {
            return bad("log.partitions must be between 1 and 256");
        }
        if !(-20..=19).contains(&self.log.writer_nice) {
            return bad("log.writer_nice must be between -20 and 19");
        }
        if self.log.apply_interval_us > 100_000 {
            return bad("log.apply_interval_us must be between 0 and 100000");
        }
        let slice = self.runtime.latency_slice_us;
        if slice != 0 && !(100..=100_000).contains(&slice) {
            return bad("runtime.latency_slice_us must be 0 (the kernel's default) or between 100 and 100000");
        }
        if self.log.segment_bytes_max < 1 << 20 {
            return bad("log.segment_bytes_max must be at least 1 MiB");
        }
        // Each partition keeps an active segment and a partly consumed one that cannot be reclaimed yet, and
        // heads pin a quarter of the budget: below this the log could not drain under 90% of it.
        if self.log.disk_bytes_max != 0
            && self.log.disk_bytes_max
                < 8 * u64::from(self.log.partitions) * self.log.segment_bytes_max
        {
            return bad(
                "log.disk_bytes_max must be 0 (no budget) or at least 8 x log.partitions x log.segment_bytes_max",
            );
        }
        if self.mqtt.packet_bytes_max < 1024 {
            return bad("mqtt.packet_bytes_max must be at least 1024");
        }
        if self.mqtt.inflight_max == 0 {
            return bad("mqtt.inflight_max must be at least 1");
        }
        if self.tsdb.chunk_points_max < 16 || self.tsdb.chunk_points_max > 1 << 20 {
            return bad("tsdb.chunk_points_max must be between 16 and 1048576");
        }
        if self.auth.access_token_ttl_s == 0 || self.auth.refresh_token_ttl_s == 0 {
            return bad("auth token lifetimes must be positive");
        }
        if self.activity.check_interval_ms == 0 || self.activity.inactivity_timeout_ms == 0 {
            return bad(
                "activity.check_interval_ms and activity.inactivity_timeout_ms must be positive",
            );
        }
        for (key, value) in self.rate_limits.specs() {
            if let Err(e) = crate::limits::rate::RateSpec::parse(value) {
                return Err(ConfigError::Invalid(format!("rate_limits.{key}: {e}")));
            }
        }
        if self.rate_limits.failed_auth_per_ip_max == 0 || self.rate_limits.failed_auth_block_s == 0
        {
            return bad(
                "rate_limits.failed_auth_per_ip_max and rate_limits.failed_auth_block_s must be positive",
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_file_equals_defaults() {
        let file = builtin();
        assert_eq!(file, Config::default());
        file.validate().expect("default config is valid");
        // Every key is spelled out in the file: serializing the defaults yields no key the file lacks.
        let keys = toml::to_string(&Config::default()).unwrap();
        for line in keys.lines().filter(|l| l.contains(" = ")) {
            let key = line.split(" = ").next().unwrap();
            assert!(
                DEFAULT_TOML.contains(&format!("\n{key} = ")),
                "fleetwire.toml lacks {key}"
            );
        }
    }

    #[test]
    fn partial_file_keeps_defaults() {
        let c = parse("[mqtt]\nport = 1999\n", "test").unwrap();
        assert_eq!(c.mqtt.port, 1999);
        assert_eq!(c.mqtt.packet_bytes_max, 65536);
        assert_eq!(c.http.port, 8080);
    }

    #[test]
    fn a_latency_slice_is_off_or_in_the_kernels_range() {
        for ok in [0, 100, 200, 100_000] {
            let c = parse(&format!("[runtime]\nlatency_slice_us = {ok}\n"), "test").unwrap();
            assert_eq!(c.runtime.latency_slice_us, ok);
            c.validate().unwrap();
        }
        for bad in [1, 99, 100_001] {
            let c = parse(&format!("[runtime]\nlatency_slice_us = {bad}\n"), "test").unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("runtime.latency_slice_us"), "{err}");
        }
    }

    #[test]
    fn the_apply_interval_is_at_most_a_tenth_of_a_second() {
        assert_eq!(Config::default().log.apply_interval_us, 4000);
        for ok in [0, 4000, 100_000] {
            let c = parse(&format!("[log]\napply_interval_us = {ok}\n"), "test").unwrap();
            assert_eq!(c.log.apply_interval_us, ok);
            c.validate().unwrap();
        }
        let c = parse("[log]\napply_interval_us = 100001\n", "test").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("log.apply_interval_us"), "{err}");
    }

    #[test]
    fn unknown_key_is_rejected() {
        let err = parse("[mqtt]\nprot = 1\n", "test").unwrap_err();
        assert!(err.to_string().contains("prot"), "{err}");
    }

    #[test]
    fn env_overrides() {
        let mut c = Config::default();
        c.apply_env(|k| match k {
            "FLEETWIRE_MQTT_PORT" => Some("11883".into()),
            "FLEETWIRE_DATA_DIR" => Some("/tmp/x".into()),
            "FLEETWIRE_DEMO" => Some("true".into()),
            "FLEETWIRE_RUNTIME_HUGE_PAGES" => Some("false".into()),
            "FLEETWIRE_RUNTIME_DISPATCHER_DOORBELL" => Some("false".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.mqtt.port, 11883);
        assert_eq!(c.data_dir, PathBuf::from("/tmp/x"));
        assert!(c.bootstrap.demo);
        assert!(Config::default().runtime.huge_pages && !c.runtime.huge_pages);
        assert!(Config::default().runtime.dispatcher_doorbell && !c.runtime.dispatcher_doorbell);
        let err = c
            .apply_env(|k| (k == "FLEETWIRE_HTTP_PORT").then(|| "http".to_string()))
            .unwrap_err();
        assert!(err.to_string().contains("FLEETWIRE_HTTP_PORT"));
    }

    #[test]
    fn rate_limits_from_env_and_checked_at_start() {
        let mut c = Config::default();
        c.apply_env(|k| match k {
            "FLEETWIRE_RATE_LIMITS_TRANSPORT_DEVICE_MSG" => Some("20:1,600:60".into()),
            "FLEETWIRE_RATE_LIMITS_REST_TENANT" => Some("100:1".into()),
            "FLEETWIRE_RATE_LIMITS_FAILED_AUTH_LIMIT_ENABLED" => Some("true".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(c.rate_limits.transport_device_msg, "20:1,600:60");
        assert_eq!(c.rate_limits.rest_tenant, "100:1");
        assert!(c.rate_limits.failed_auth_limit_enabled);
        c.validate().unwrap();
        let c = parse(
            "[rate_limits]\ntransport_gateway_telemetry_data_points = \"10:1,x\"\n",
            "test",
        )
        .unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid config: rate_limits.transport_gateway_telemetry_data_points: \"x\" is not of the form capacity:seconds"
        );
    }
}
