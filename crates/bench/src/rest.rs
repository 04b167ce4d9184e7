//! The tenant-administrator REST client the bench uses: log in, create the device profile with its
//! alarm rule and the devices, list device ids, and count stored points (reference section 4).
//!
//! Each [`Rest`] owns one keep-alive connection; [`Rest::fork`] opens another with the same token, which
//! is how device creation and verification run several requests at once.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use hyper::Method;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::{Error, Result};
use crate::http::HttpConn;
use crate::scenario::Profile;

/// Page size of the listings: the server caps nothing, and 1,000 rows keep each answer small.
const PAGE_SIZE: u32 = 1000;
/// The error body's message when a device name is taken (entities `save`, reference 4.3).
const NAME_TAKEN: &str = "Device with such name already exists";
/// A fixed alarm id, so that every profile the bench creates carries the same rule.
const BATTERY_ALARM_ID: &str = "5f0c7a52-7d4e-4b8e-9c1a-f1ee7b3e0b01";
const BATTERY_ALARM_TYPE: &str = "battery low";

/// A logged-in tenant administrator on one keep-alive connection.
pub struct Rest {
    conn: HttpConn,
    /// `Bearer <jwt>`, the value of `X-Authorization`.
    bearer: String,
}

#[derive(Deserialize)]
struct TokenPair {
    token: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page<T> {
    data: Vec<T>,
    has_next: bool,
}

#[derive(Deserialize)]
struct IdOut {
    id: String,
}

#[derive(Deserialize)]
struct Named {
    id: IdOut,
    name: String,
}

impl Rest {
    /// Logs in with `POST /api/auth/login`.
    pub async fn login(addr: SocketAddr, username: &str, password: &str) -> Result<Rest> {
        let mut conn = HttpConn::connect(addr, None).await?;
        let path = "/api/auth/login";
        let body = json!({"username": username, "password": password}).to_string();
        let (status, answer) = conn
            .request(Method::POST, path, &[], Bytes::from(body))
            .await?;
        check(&Method::POST, path, status, &answer)?;
        let pair: TokenPair = parse(&Method::POST, path, &answer)?;
        Ok(Rest {
            conn,
            bearer: format!("Bearer {}", pair.token),
        })
    }

    /// Another connection to the same server with the same token.
    pub async fn fork(&self) -> Result<Rest> {
        Ok(Rest {
            conn: HttpConn::connect(self.conn.addr(), None).await?,
            bearer: self.bearer.clone(),
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.conn.addr()
    }

    /// One authenticated request; any status is returned with the body.
    pub async fn call(&mut self, method: Method, path: &str, body: Bytes) -> Result<(u16, Bytes)> {
        let headers = [("X-Authorization", self.bearer.as_str())];
        self.conn.request(method, path, &headers, body).await
    }

    /// `GET path`, expecting 200 and JSON.
    pub async fn get_json<T: for<'de> Deserialize<'de>>(&mut self, path: &str) -> Result<T> {
        let (status, body) = self.call(Method::GET, path, Bytes::new()).await?;
        check(&Method::GET, path, status, &body)?;
        parse(&Method::GET, path, &body)
    }

    /// `POST path` with a JSON body, expecting 200 and JSON.
    pub async fn post_json<T: for<'de> Deserialize<'de>>(
        &mut self,
        path: &str,
        body: &Value,
    ) -> Result<T> {
        let (status, answer) = self
            .call(Method::POST, path, Bytes::from(body.to_string()))
            .await?;
        check(&Method::POST, path, status, &answer)?;
        parse(&Method::POST, path, &answer)
    }

    /// Finds the device profile named `profile.device_type()`, creating it if missing. Profiles whose
    /// messages carry `batteryLevel` get the "battery low" alarm rule, also added to an existing profile
    /// that lacks it (creating devices by type alone makes a profile without rules). Returns its id.
    pub async fn ensure_profile(&mut self, profile: Profile) -> Result<String> {
        let name = profile.device_type();
        let mut page = 0;
        let found = loop {
            let path = format!("/api/deviceProfiles?pageSize={PAGE_SIZE}&page={page}");
            let listed: Page<Value> = self.get_json(&path).await?;
            if let Some(p) = listed.data.into_iter().find(|p| p["name"] == name) {
                break Some(p);
            }
            if !listed.has_next {
                break None;
            }
            page += 1;
        };
        let path = "/api/deviceProfile";
        let saved: Named = match found {
            None => {
                tracing::info!(profile = name, "creating the device profile");
                self.post_json(path, &profile_json(profile)).await?
            }
            Some(mut existing) if profile.has_battery() && !has_battery_alarm(&existing) => {
                tracing::info!(profile = name, "adding the battery-low alarm rule");
                add_battery_alarm(&mut existing);
                self.post_json(path, &existing).await?
            }
            Some(existing) => serde_json::from_value(existing)
                .map_err(|e| Error::json(format!("device profile {name}"), e))?,
        };
        Ok(saved.id.id)
    }

    /// Creates devices named `names` with type `profile.device_type()` and access token = name
    /// (`POST /api/device?accessToken=NAME`), skipping ones that exist. Runs `concurrency` requests at
    /// once, each on its own connection. Returns (created, existing).
    ///
    /// Existing devices are found first with one listing (1,000 per page), so a rerun over an existing
    /// fleet costs a few requests instead of one failing POST per device; a 400 "already exists" (a device
    /// created meanwhile) also counts as existing.
    pub async fn create_devices(
        &self,
        names: &[String],
        profile: Profile,
        concurrency: usize,
    ) -> Result<(u64, u64)> {
        let unique: Vec<&String> = {
            let mut seen = HashSet::with_capacity(names.len());
            names.iter().filter(|n| seen.insert(n.as_str())).collect()
        };
        let known = self.fork().await?.device_ids(common_prefix(names)).await?;
        let todo: Arc<Vec<String>> = Arc::new(
            unique
                .iter()
                .filter(|n| !known.contains_key(n.as_str()))
                .map(|n| n.to_string())
                .collect(),
        );
        let mut existing = (unique.len() - todo.len()) as u64;
        let mut created = 0u64;
        if todo.is_empty() {
            return Ok((created, existing));
        }
        let next = Arc::new(AtomicUsize::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency.clamp(1, todo.len()) {
            let mut rest = self.fork().await?;
            let (todo, next) = (todo.clone(), next.clone());
            tasks.spawn(async move {
                let (mut created, mut existing) = (0u64, 0u64);
                while let Some(name) = todo.get(next.fetch_add(1, Ordering::Relaxed)) {
                    if rest.create_device(name, profile).await? {
                        created += 1;
                    } else {
                        existing += 1;
                    }
                }
                Ok::<_, Error>((created, existing))
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let (c, e) =
                joined.map_err(|e| Error::Worker(format!("device creation task: {e}")))??;
            created += c;
            existing += e;
        }
        tracing::info!(created, existing, "devices ready");
        Ok((created, existing))
    }

    /// Creates one device with access token = name; false when the name was taken already.
    pub async fn create_device(&mut self, name: &str, profile: Profile) -> Result<bool> {
        let path = format!("/api/device?accessToken={}", encode_component(name));
        let body = json!({"name": name, "type": profile.device_type()}).to_string();
        let (status, answer) = self.call(Method::POST, &path, Bytes::from(body)).await?;
        if status == 400 && String::from_utf8_lossy(&answer).contains(NAME_TAKEN) {
            return Ok(false);
        }
        check(&Method::POST, &path, status, &answer)?;
        Ok(true)
    }

    /// Device ids by name for names starting with `prefix`, paging
    /// `GET /api/tenant/devices?pageSize=1000&page=N&textSearch=prefix` (the server's search is a
    /// case-insensitive substring match, so the prefix is checked here).
    pub async fn device_ids(&mut self, prefix: &str) -> Result<HashMap<String, String>> {
        let search = match prefix {
            "" => String::new(),
            p => format!("&textSearch={}", encode_component(p)),
        };
        let mut ids = HashMap::new();
        for page in 0.. {
            let path = format!("/api/tenant/devices?pageSize={PAGE_SIZE}&page={page}{search}");
            let listed: Page<Named> = self.get_json(&path).await?;
            ids.extend(
                listed
                    .data
                    .into_iter()
                    .filter(|d| d.name.starts_with(prefix))
                    .map(|d| (d.name, d.id.id)),
            );
            if !listed.has_next {
                break;
            }
        }
        Ok(ids)
    }

    /// Active "battery low" alarms of the tenant: (originator name, severity) of each.
    pub async fn active_battery_alarms(&mut self) -> Result<Vec<(String, String)>> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct AlarmOut {
            originator_name: Option<String>,
            severity: String,
        }
        let mut found = Vec::new();
        for page in 0.. {
            let path = format!(
                "/api/v2/alarms?pageSize={PAGE_SIZE}&page={page}&statusList=ACTIVE&typeList={}",
                encode_component(BATTERY_ALARM_TYPE)
            );
            let listed: Page<AlarmOut> = self.get_json(&path).await?;
            found.extend(
                listed
                    .data
                    .into_iter()
                    .map(|a| (a.originator_name.unwrap_or_default(), a.severity)),
            );
            if !listed.has_next {
                break;
            }
        }
        Ok(found)
    }

    /// The id of the device named `name`, if it exists (`GET /api/tenant/devices?deviceName=`).
    pub async fn device_id(&mut self, name: &str) -> Result<Option<String>> {
        let path = format!("/api/tenant/devices?deviceName={}", encode_component(name));
        let (status, body) = self.call(Method::GET, &path, Bytes::new()).await?;
        if status == 404 {
            return Ok(None);
        }
        check(&Method::GET, &path, status, &body)?;
        let device: Named = parse(&Method::GET, &path, &body)?;
        Ok(Some(device.id.id))
    }

    /// Points stored per key for one device in `[start_ts, end_ts)`: one COUNT aggregation whose single
    /// interval spans the range (the server caps buckets holding data, not their width). Keys without
    /// data are absent from the answer and count 0.
    pub async fn count_points(
        &mut self,
        device_id: &str,
        keys: &[String],
        start_ts: i64,
        end_ts: i64,
    ) -> Result<HashMap<String, u64>> {
        let mut counts: HashMap<String, u64> = keys.iter().map(|k| (k.clone(), 0)).collect();
        if keys.is_empty() || end_ts <= start_ts {
            return Ok(counts);
        }
        let keys_param = keys
            .iter()
            .map(|k| encode_component(k))
            .collect::<Vec<_>>()
            .join(",");
        let path = format!(
            "/api/plugins/telemetry/DEVICE/{}/values/timeseries?keys={keys_param}&startTs={start_ts}&endTs={end_ts}&interval={}&agg=COUNT&useStrictDataTypes=true",
            encode_component(device_id),
            end_ts - start_ts
        );
        let answer: HashMap<String, Vec<Value>> = self.get_json(&path).await?;
        for (key, buckets) in answer {
            let mut total = 0u64;
            for bucket in &buckets {
                // Strict types give a number; a server that ignores the flag sends a string.
                let count = match &bucket["value"] {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.parse().ok(),
                    _ => None,
                };
                total += count.ok_or_else(|| Error::Rest {
                    method: "GET".into(),
                    path: path.clone(),
                    status: 200,
                    body: format!("unexpected COUNT bucket {bucket}"),
                })?;
            }
            if let Some(count) = counts.get_mut(&key) {
                *count = total;
            }
        }
        Ok(counts)
    }
}

/// 2xx or an [`Error::Rest`] carrying the start of the body.
fn check(method: &Method, path: &str, status: u16, body: &[u8]) -> Result<()> {
    if (200..300).contains(&status) {
        return Ok(());
    }
    let text = String::from_utf8_lossy(body);
    let mut end = text.len().min(500);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Err(Error::Rest {
        method: method.to_string(),
        path: path.to_string(),
        status,
        body: text[..end].to_string(),
    })
}

fn parse<T: for<'de> Deserialize<'de>>(method: &Method, path: &str, body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| Error::json(format!("{method} {path}"), e))
}

/// Percent-encodes everything but RFC 3986's unreserved characters, for a query value or path segment.
pub fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The longest prefix all `names` share ("" for none or no names): one listing by it finds them all.
pub fn common_prefix(names: &[String]) -> &str {
    let Some(first) = names.first() else {
        return "";
    };
    let mut len = first.len();
    for name in &names[1..] {
        len = first
            .bytes()
            .zip(name.bytes())
            .take(len)
            .take_while(|(a, b)| a == b)
            .count();
    }
    while !first.is_char_boundary(len) {
        len -= 1;
    }
    &first[..len]
}

/// ThingsBoard's "battery low" rule as performance-tests defines it (reference 5.1): CRITICAL when
/// the latest `batteryLevel` is at most 20; never cleared by a rule.
pub fn battery_alarm() -> Value {
    json!({
        "id": BATTERY_ALARM_ID,
        "alarmType": BATTERY_ALARM_TYPE,
        "createRules": {
            "CRITICAL": {
                "condition": {
                    "condition": [{
                        "key": {"type": "TIME_SERIES", "key": "batteryLevel"},
                        "valueType": "NUMERIC",
                        "value": null,
                        "predicate": {
                            "type": "NUMERIC",
                            "operation": "LESS_OR_EQUAL",
                            "value": {"defaultValue": 20, "userValue": null, "dynamicValue": null}
                        }
                    }],
                    "spec": {"type": "SIMPLE"}
                },
                "schedule": null,
                "alarmDetails": "battery = ${batteryLevel}",
                "dashboardId": null
            }
        },
        "clearRule": null,
        "propagate": false,
        "propagateToOwner": false,
        "propagateToTenant": false,
        "propagateRelationTypes": null
    })
}

/// The DeviceProfile JSON the bench creates for `profile`.
pub fn profile_json(profile: Profile) -> Value {
    let alarms = if profile.has_battery() {
        json!([battery_alarm()])
    } else {
        Value::Null
    };
    json!({
        "name": profile.device_type(),
        "description": format!("fleetwire bench: {profile}"),
        "type": "DEFAULT",
        "transportType": "DEFAULT",
        "provisionType": "DISABLED",
        "profileData": {
            "configuration": {"type": "DEFAULT"},
            "transportConfiguration": {"type": "DEFAULT"},
            "provisionConfiguration": {"type": "DISABLED", "provisionDeviceSecret": null},
            "alarms": alarms
        },
        "default": false
    })
}

fn has_battery_alarm(profile: &Value) -> bool {
    profile["profileData"]["alarms"]
        .as_array()
        .is_some_and(|alarms| alarms.iter().any(|a| a["alarmType"] == BATTERY_ALARM_TYPE))
}

/// Appends the battery alarm to a profile's JSON, creating `profileData` and `alarms` as needed.
fn add_battery_alarm(profile: &mut Value) {
    if !profile["profileData"].is_object() {
        profile["profileData"] = profile_json(Profile::SmartMeter)["profileData"].clone();
        profile["profileData"]["alarms"] = Value::Null;
    }
    let alarms = &mut profile["profileData"]["alarms"];
    match alarms.as_array_mut() {
        Some(list) => list.push(battery_alarm()),
        None => *alarms = json!([battery_alarm()]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_prefix_of_names() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            common_prefix(&names(&["DW00000001", "DW00000002", "DW00000150"])),
            "DW00000"
        );
        assert_eq!(common_prefix(&names(&["DW00000001"])), "DW00000001");
        assert_eq!(common_prefix(&names(&["DW1", "X"])), "");
        assert_eq!(common_prefix(&[]), "");
        assert_eq!(common_prefix(&names(&["é1", "é2"])), "é");
        assert_eq!(
            common_prefix(&names(&["\u{e9}", "\u{e8}"])),
            "",
            "never splits a character"
        );
    }

    #[test]
    fn encodes_query_components() {
        assert_eq!(encode_component("DW00000001"), "DW00000001");
        assert_eq!(encode_component("a b&c=d,e"), "a%20b%26c%3Dd%2Ce");
        assert_eq!(encode_component("é"), "%C3%A9");
    }

    #[test]
    fn battery_profiles_carry_the_alarm_rule() {
        let meter = profile_json(Profile::SmartMeter);
        assert_eq!(meter["name"], "SMART_METER");
        assert!(has_battery_alarm(&meter));
        let rule = &meter["profileData"]["alarms"][0]["createRules"]["CRITICAL"];
        let filter = &rule["condition"]["condition"][0];
        assert_eq!(filter["key"]["key"], "batteryLevel");
        assert_eq!(filter["predicate"]["operation"], "LESS_OR_EQUAL");
        assert_eq!(filter["predicate"]["value"]["defaultValue"], 20);
        assert_eq!(rule["alarmDetails"], "battery = ${batteryLevel}");
        assert!(has_battery_alarm(&profile_json(Profile::SmartTracker)));
        let plc = profile_json(Profile::IndustrialPlc);
        assert!(!has_battery_alarm(&plc));
        assert!(plc["profileData"]["alarms"].is_null());
    }

    #[test]
    fn the_alarm_is_added_to_a_profile_without_it() {
        let mut bare = json!({"name": "SMART_METER", "profileData": {"alarms": null}});
        add_battery_alarm(&mut bare);
        assert!(has_battery_alarm(&bare));
        let other = json!({"id": "x", "alarmType": "overheat"});
        let mut with_other = json!({"profileData": {"alarms": [other.clone()]}});
        add_battery_alarm(&mut with_other);
        let alarms = with_other["profileData"]["alarms"].as_array().unwrap();
        assert_eq!(alarms.len(), 2);
        assert_eq!(alarms[0], other, "existing rules are kept");
        let mut no_data = json!({"name": "SMART_METER"});
        add_battery_alarm(&mut no_data);
        assert!(has_battery_alarm(&no_data));
        assert_eq!(no_data["profileData"]["configuration"]["type"], "DEFAULT");
    }
}
