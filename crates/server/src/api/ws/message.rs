//! The WebSocket protocol's JSON: the commands a client sends (unified `cmds` and the legacy lists) and
//! the update and error messages the server answers with.

use std::collections::BTreeMap;

use fleetwire_model::Value;
use serde::Deserialize;
use serde_json::{json, Map, Value as JsonValue};

use crate::ingest::attributes::split_keys;

/// ThingsBoard's WebSocket error codes.
pub(super) mod error_code {
    pub const NO_ERROR: i32 = 0;
    pub const INTERNAL: i32 = 1;
    pub const BAD_REQUEST: i32 = 2;
    pub const UNAUTHORIZED: i32 = 3;
}

/// One command, in the unified form; legacy commands are translated into it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct Cmd {
    #[serde(rename = "type")]
    pub(super) kind: String,
    pub(super) cmd_id: i64,
    pub(super) entity_type: Option<String>,
    pub(super) entity_id: Option<String>,
    pub(super) keys: Option<String>,
    pub(super) scope: Option<String>,
    pub(super) unsubscribe: bool,
    pub(super) start_ts: Option<i64>,
    pub(super) end_ts: Option<i64>,
    pub(super) time_window: Option<i64>,
    pub(super) interval: Option<i64>,
    pub(super) limit: Option<usize>,
    pub(super) agg: Option<String>,
    pub(super) order_by: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct AuthCmd {
    pub(super) token: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct Envelope {
    pub(super) auth_cmd: Option<AuthCmd>,
    cmds: Vec<Cmd>,
    ts_sub_cmds: Vec<Cmd>,
    history_cmds: Vec<Cmd>,
    attr_sub_cmds: Vec<Cmd>,
}

impl Envelope {
    /// Every command in unified form: legacy lists carry their type in the list they are in.
    pub(super) fn commands(self) -> Vec<Cmd> {
        let mut all = self.cmds;
        for (kind, list) in [
            ("TIMESERIES", self.ts_sub_cmds),
            ("TIMESERIES_HISTORY", self.history_cmds),
            ("ATTRIBUTES", self.attr_sub_cmds),
        ] {
            all.extend(list.into_iter().map(|mut cmd| {
                cmd.kind = kind.to_owned();
                cmd
            }));
        }
        all
    }
}

/// A rendered value: WebSocket updates carry strings, as ThingsBoard's do.
fn text(value: &Value) -> JsonValue {
    JsonValue::String(value.to_string())
}

pub(super) fn keys_of(list: Option<&str>) -> Option<Vec<String>> {
    let keys: Vec<String> = split_keys(list.unwrap_or(""))
        .into_iter()
        .map(String::from)
        .collect();
    (!keys.is_empty()).then_some(keys)
}

pub(super) fn wanted(keys: &Option<Vec<String>>, key: &str) -> bool {
    keys.as_ref()
        .is_none_or(|keys| keys.iter().any(|k| k == key))
}

fn update_message(
    cmd_id: i64,
    data: Map<String, JsonValue>,
    latest: Option<Map<String, JsonValue>>,
) -> JsonValue {
    let mut message = json!({
        "subscriptionId": cmd_id,
        "errorCode": error_code::NO_ERROR,
        "errorMsg": null,
        "data": data,
    });
    if let Some(latest) = latest {
        message["latestValues"] = JsonValue::Object(latest);
    }
    message
}

pub(super) fn error_message(cmd_id: i64, code: i32, text: &str) -> JsonValue {
    json!({
        "subscriptionId": cmd_id,
        "errorCode": code,
        "errorMsg": text,
        "data": null,
    })
}

/// `data` and `latestValues` from (key, ts, value) points; several points of a key keep their order.
pub(super) fn points_message(
    cmd_id: i64,
    points: Vec<(String, i64, Value)>,
    with_latest: bool,
) -> JsonValue {
    let mut data: BTreeMap<String, Vec<JsonValue>> = BTreeMap::new();
    let mut latest: BTreeMap<String, i64> = BTreeMap::new();
    for (key, ts, value) in points {
        let newest = latest.entry(key.clone()).or_insert(ts);
        *newest = (*newest).max(ts);
        data.entry(key).or_default().push(json!([ts, text(&value)]));
    }
    let data = data
        .into_iter()
        .map(|(k, v)| (k, JsonValue::Array(v)))
        .collect();
    let latest = with_latest.then(|| latest.into_iter().map(|(k, ts)| (k, json!(ts))).collect());
    update_message(cmd_id, data, latest)
}
