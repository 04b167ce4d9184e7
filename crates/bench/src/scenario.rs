//! Scenarios: what a bench run does, read from TOML (`bench/scenarios/*.toml`) and overridden by flags.
//!
//! Every field has a default, so an empty scenario is the canonical workload: 10,000 smart meters over
//! MQTT 3.1.1, QoS 1, as fast as the server acknowledges (8 in flight per connection), 30 s.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// A bench workload. Field names are the TOML keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Scenario {
    /// A label printed with the results.
    pub name: String,
    /// `mqtt` or `http` (the ThingsBoard HTTP device API).
    pub transport: Transport,
    /// MQTT protocol version: "3.1", "3.1.1" or "5".
    pub mqtt_version: MqttVersion,
    /// 0 or 1. QoS 0 messages count as acknowledged once written to the socket.
    pub qos: u8,
    /// MQTT keep-alive; the generator sends PINGREQ on idle connections.
    pub keep_alive_s: u16,
    pub clean_session: bool,
    /// Number of devices (one connection each over MQTT).
    pub devices: u32,
    /// Index of the first device: devices are `DW` + 8-digit index, token = name.
    pub first_index: u32,
    pub profile: Profile,
    /// Number of double values per `industrial-plc` message.
    pub plc_values: u32,
    /// Total messages per second, paced evenly across devices (open loop), or "max" (closed loop).
    pub rate: Rate,
    /// Messages in flight per connection: the closed-loop window, and the open-loop cap.
    pub window: u32,
    /// Messages per second that carry `batteryLevel = 10` (the "battery low" alarm trigger).
    pub alarms_per_s: f64,
    /// Seconds of load before measuring starts (those messages are still verified).
    pub warmup_s: f64,
    /// Seconds of measured load.
    pub duration_s: f64,
    /// New connections per second while the fleet connects.
    pub connect_rate: f64,
    /// Stop after this many messages in total (spread evenly over devices), whatever the duration.
    pub messages_max: Option<u64>,
    /// HTTP transport: keep-alive connections shared by the devices.
    pub http_connections: u32,
    /// Server address (also used for the REST API).
    pub host: String,
    pub mqtt_port: u16,
    pub http_port: u16,
    /// Tenant administrator used for `create_devices` and verification.
    pub username: String,
    pub password: String,
    /// Create the devices (and the profile with its alarm rule) through the REST API before the run.
    pub create_devices: bool,
    /// After the run, compare per device the points stored with the points acknowledged.
    pub verify: bool,
    /// How long verification keeps recounting while points are missing: a server that is still applying a
    /// backlog (after an overload run) stores them late, not never. 0: one count.
    pub verify_wait_s: f64,
    /// Above this many connections the fleet is split over worker processes (one process may hold at
    /// most 20,000 open files here).
    pub connections_per_process: u32,
}

impl Default for Scenario {
    fn default() -> Scenario {
        Scenario {
            name: "canonical".into(),
            transport: Transport::Mqtt,
            mqtt_version: MqttVersion::V311,
            qos: 1,
            keep_alive_s: 60,
            clean_session: true,
            devices: 10_000,
            first_index: 0,
            profile: Profile::SmartMeter,
            plc_values: 10,
            rate: Rate::Max,
            window: 8,
            alarms_per_s: 0.0,
            warmup_s: 2.0,
            duration_s: 30.0,
            connect_rate: 5_000.0,
            messages_max: None,
            http_connections: 64,
            host: "127.0.0.1".into(),
            mqtt_port: 1883,
            http_port: 8080,
            username: "tenant@thingsboard.org".into(),
            password: "tenant".into(),
            create_devices: false,
            verify: true,
            verify_wait_s: 0.0,
            connections_per_process: 18_000,
        }
    }
}

impl Scenario {
    /// Reads a scenario file; absent keys keep their defaults.
    pub fn load(path: &Path) -> Result<Scenario> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let scenario: Scenario = toml::from_str(&text)
            .map_err(|e| Error::Scenario(format!("{}: {e}", path.display())))?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Checks the combinations a run cannot start with.
    pub fn validate(&self) -> Result<()> {
        let fail = |m: &str| Err(Error::Scenario(m.to_string()));
        if self.qos > 1 {
            return fail("qos must be 0 or 1");
        }
        if self.window == 0 {
            return fail("window must be at least 1");
        }
        if let Rate::PerSecond(r) = self.rate {
            if !(r.is_finite() && r >= 0.0) {
                return fail("rate must be a non-negative number or \"max\"");
            }
        }
        if !(self.alarms_per_s.is_finite() && self.alarms_per_s >= 0.0) {
            return fail("alarms_per_s must be a non-negative number");
        }
        let non_negative = |x: f64| x.is_finite() && x >= 0.0;
        if !non_negative(self.duration_s) || !non_negative(self.warmup_s) {
            return fail("duration_s and warmup_s must be non-negative numbers");
        }
        if !(self.connect_rate.is_finite() && self.connect_rate > 0.0) {
            return fail("connect_rate must be positive");
        }
        if self.first_index as u64 + self.devices as u64 > 100_000_000 {
            return fail("device indexes must fit in 8 digits");
        }
        if self.profile == Profile::IndustrialPlc && self.plc_values == 0 {
            return fail("plc_values must be at least 1");
        }
        if self.http_connections == 0 {
            return fail("http_connections must be at least 1");
        }
        if self.connections_per_process == 0 || self.connections_per_process > 19_900 {
            return fail("connections_per_process must be between 1 and 19900");
        }
        Ok(())
    }

    /// The server's address on `port` (`host` must be an IP address: the generator does no DNS).
    pub fn server_addr(&self, port: u16) -> Result<SocketAddr> {
        socket_addr(&self.host, port)
    }

    /// `DW` + 8-digit index: the device name, which is also its access token.
    pub fn device_name(index: u32) -> String {
        format!("DW{index:08}")
    }

    /// The names of this scenario's devices.
    pub fn device_names(&self) -> impl Iterator<Item = String> + '_ {
        (self.first_index..self.first_index + self.devices).map(Scenario::device_name)
    }
}

/// `host:port` for a host given as an IP address.
pub fn socket_addr(host: &str, port: u16) -> Result<SocketAddr> {
    let ip: IpAddr = host
        .parse()
        .map_err(|_| Error::Scenario(format!("host {host:?} is not an IP address")))?;
    Ok(SocketAddr::new(ip, port))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Mqtt,
    Http,
}

/// The MQTT protocol version a fleet speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MqttVersion {
    #[serde(rename = "3.1")]
    V31,
    #[serde(rename = "3.1.1", alias = "311")]
    V311,
    #[serde(rename = "5", alias = "5.0")]
    V5,
}

impl MqttVersion {
    pub fn protocol(self) -> fleetwire_mqtt::Protocol {
        match self {
            MqttVersion::V31 => fleetwire_mqtt::Protocol::V31,
            MqttVersion::V311 => fleetwire_mqtt::Protocol::V311,
            MqttVersion::V5 => fleetwire_mqtt::Protocol::V5,
        }
    }
}

/// The payload a device sends, after ThingsBoard's performance-tests device profiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// `pulseCounter` (long), `leakage` (bool), `batteryLevel` (long).
    SmartMeter,
    /// `latitude`, `longitude`, `speed` (JSON strings), `fuel`, `batteryLevel`.
    SmartTracker,
    /// N doubles.
    IndustrialPlc,
}

impl Profile {
    /// The ThingsBoard device profile (device type) name.
    pub fn device_type(self) -> &'static str {
        match self {
            Profile::SmartMeter => "SMART_METER",
            Profile::SmartTracker => "SMART_TRACKER",
            Profile::IndustrialPlc => "INDUSTRIAL_PLC",
        }
    }

    /// Whether messages of this profile carry `batteryLevel`, so alarm messages make sense.
    pub fn has_battery(self) -> bool {
        !matches!(self, Profile::IndustrialPlc)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Profile::SmartMeter => "smart-meter",
            Profile::SmartTracker => "smart-tracker",
            Profile::IndustrialPlc => "industrial-plc",
        })
    }
}

/// Offered load: a total rate paced evenly over the devices, or as fast as acknowledgements come back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    Max,
    PerSecond(f64),
}

impl Rate {
    pub fn parse(text: &str) -> Result<Rate> {
        if text.eq_ignore_ascii_case("max") {
            return Ok(Rate::Max);
        }
        match text.parse::<f64>() {
            Ok(r) if r.is_finite() && r >= 0.0 => Ok(Rate::PerSecond(r)),
            _ => Err(Error::Scenario(format!(
                "rate {text:?}: expected \"max\" or messages per second"
            ))),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Max => f.write_str("max"),
            Rate::PerSecond(r) => write!(f, "{r}"),
        }
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Rate::Max => s.serialize_str("max"),
            Rate::PerSecond(r) => s.serialize_f64(*r),
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Rate, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(r) if r.is_finite() && r >= 0.0 => Ok(Rate::PerSecond(r)),
            Raw::Number(r) => Err(serde::de::Error::custom(format!(
                "rate {r}: must be non-negative"
            ))),
            Raw::Text(t) => Rate::parse(&t).map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_scenario_is_the_canonical_workload() {
        let s: Scenario = toml::from_str("").unwrap();
        assert_eq!(s, Scenario::default());
        assert_eq!(s.devices, 10_000);
        assert_eq!(s.rate, Rate::Max);
        assert_eq!(s.duration_s, 30.0);
    }

    #[test]
    fn rates_read_as_numbers_or_max() {
        let s: Scenario = toml::from_str("rate = 5000\nprofile = \"smart-tracker\"").unwrap();
        assert_eq!(s.rate, Rate::PerSecond(5000.0));
        assert_eq!(s.profile, Profile::SmartTracker);
        let s: Scenario = toml::from_str("rate = \"max\"\nmqtt_version = \"5\"").unwrap();
        assert_eq!(s.rate, Rate::Max);
        assert_eq!(s.mqtt_version, MqttVersion::V5);
        assert!(toml::from_str::<Scenario>("rate = -1").is_err());
        assert!(toml::from_str::<Scenario>("rate = \"fast\"").is_err());
        assert!(
            toml::from_str::<Scenario>("devcies = 3").is_err(),
            "typos are refused"
        );
    }

    #[test]
    fn device_names_follow_thingsboards_load_tool() {
        assert_eq!(Scenario::device_name(1), "DW00000001");
        let s = Scenario {
            devices: 2,
            first_index: 99,
            ..Scenario::default()
        };
        assert_eq!(
            s.device_names().collect::<Vec<_>>(),
            ["DW00000099", "DW00000100"]
        );
    }

    #[test]
    fn validation_names_the_bad_field() {
        let s = Scenario {
            qos: 2,
            ..Scenario::default()
        };
        assert!(s.validate().unwrap_err().to_string().contains("qos"));
        let s = Scenario {
            connections_per_process: 20_000,
            ..Scenario::default()
        };
        assert!(s.validate().is_err());
    }

    #[test]
    fn every_checked_in_scenario_loads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios");
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let s = Scenario::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                names.push(s.name);
            }
        }
        names.sort();
        assert!(names.contains(&"canonical".to_string()), "{names:?}");
        assert!(names.contains(&"scenario-a".to_string()), "{names:?}");
        // The canonical file is the built-in default, so `fleetwire bench` alone runs it.
        let canonical = Scenario::load(&dir.join("canonical.toml")).unwrap();
        assert_eq!(canonical, Scenario::default());
    }
}
