//! Live subscriptions over WebSocket (reference 4.11): `/api/ws` (`authCmd` + `cmds`) and the legacy
//! `/api/ws/plugins/telemetry` (`tsSubCmds`, `historyCmds`, `attrSubCmds`), authenticated by `?token=<jwt>`
//! or by an `authCmd` in the first message.
//!
//! TIMESERIES subscribes to a device's telemetry (latest values first, or a history window when
//! `startTs` and `timeWindow` are given), ATTRIBUTES to its attributes of one scope or all, and
//! TIMESERIES_HISTORY answers one query. Updates come from the processors through `ingest::events` once a
//! record is applied, so a client sees what a REST read would. Every session has one bounded queue of
//! updates: a client that does not read fast enough fills it and is dropped (close code 1008), it never
//! makes the server hold more.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use fleetwire_model::record::AttributeScope;
use fleetwire_model::Value;
use fleetwire_tsdb::{Agg, Order, Query as TsQuery};
use serde::Deserialize;
use serde_json::{json, Map, Value as JsonValue};
use tokio::sync::{mpsc, Notify};
use uuid::Uuid;

use super::attributes::scope_attributes;
use super::auth::CurrentUser;
use super::error::ApiError;
use super::telemetry::{device_of, parse_agg, CATCH_UP_TIMEOUT};
use crate::ingest::attributes::split_keys;
use crate::ingest::events::{Interest, Subscriber, SubscriptionId, Update};
use crate::AppState;

/// Updates one session may have queued before it is dropped as too slow.
const QUEUE_UPDATES_MAX: usize = 1024;
/// Subscriptions one session may hold.
const SUBSCRIPTIONS_MAX: usize = 1024;
/// A send that takes longer than this means the client stopped reading.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest message a client may send.
const MESSAGE_BYTES_MAX: usize = 64 << 10;

/// ThingsBoard's WebSocket error codes.
mod error_code {
    pub const NO_ERROR: i32 = 0;
    pub const INTERNAL: i32 = 1;
    pub const BAD_REQUEST: i32 = 2;
    pub const UNAUTHORIZED: i32 = 3;
}

/// WebSocket close code for a policy violation (RFC 6455): bad auth, a full queue.
const POLICY_VIOLATION: u16 = 1008;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/ws", get(upgrade))
        .route("/api/ws/plugins/telemetry", get(upgrade))
}

#[derive(Deserialize)]
struct TokenQuery {
    token: Option<String>,
}

fn authenticate(state: &AppState, token: &str) -> Result<CurrentUser, ApiError> {
    let claims = state
        .auth
        .verify(token)
        .map_err(|_| ApiError::unauthorized("Authentication failed"))?;
    CurrentUser::from_claims(&claims)
}

async fn upgrade(
    ws: WebSocketUpgrade,
    State(state): State<AppState>,
    Query(query): Query<TokenQuery>,
) -> Response {
    // A token in the URL is checked before the upgrade, so a bad one gets a plain 401.
    let user = match query.token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => match authenticate(&state, token) {
            Ok(user) => Some(user),
            Err(e) => return e.into_response(),
        },
        None => None,
    };
    ws.max_message_size(MESSAGE_BYTES_MAX)
        .on_upgrade(move |socket| Session::new(state, user).run(socket))
}

/// Set when a subscriber found the session's queue full.
#[derive(Default)]
struct Overflow {
    full: AtomicBool,
    notify: Notify,
}

/// Hands a device's updates to one session's queue, tagged with the subscription they are for.
struct WsSubscriber {
    cmd_id: i64,
    interest: Interest,
    tx: mpsc::Sender<(i64, Update)>,
    overflow: Arc<Overflow>,
}

impl Subscriber for WsSubscriber {
    fn interest(&self) -> Interest {
        self.interest
    }

    fn deliver(&self, update: &Update) -> bool {
        match self.tx.try_send((self.cmd_id, update.clone())) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.overflow.full.store(true, Ordering::Release);
                self.overflow.notify.notify_one();
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

enum Watch {
    /// Telemetry keys, `None` for all.
    Timeseries(Option<Vec<String>>),
    /// Attributes of one scope (`None`: all scopes), keys `None` for all.
    Attributes(Option<AttributeScope>, Option<Vec<String>>),
}

struct Subscription {
    device: Uuid,
    id: SubscriptionId,
    watch: Watch,
}

/// One command, in the unified form; legacy commands are translated into it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Cmd {
    #[serde(rename = "type")]
    kind: String,
    cmd_id: i64,
    entity_type: Option<String>,
    entity_id: Option<String>,
    keys: Option<String>,
    scope: Option<String>,
    unsubscribe: bool,
    start_ts: Option<i64>,
    end_ts: Option<i64>,
    time_window: Option<i64>,
    interval: Option<i64>,
    limit: Option<usize>,
    agg: Option<String>,
    order_by: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct AuthCmd {
    token: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Envelope {
    auth_cmd: Option<AuthCmd>,
    cmds: Vec<Cmd>,
    ts_sub_cmds: Vec<Cmd>,
    history_cmds: Vec<Cmd>,
    attr_sub_cmds: Vec<Cmd>,
}

impl Envelope {
    /// Every command in unified form: legacy lists carry their type in the list they are in.
    fn commands(self) -> Vec<Cmd> {
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

fn keys_of(list: Option<&str>) -> Option<Vec<String>> {
    let keys: Vec<String> = split_keys(list.unwrap_or(""))
        .into_iter()
        .map(String::from)
        .collect();
    (!keys.is_empty()).then_some(keys)
}

fn wanted(keys: &Option<Vec<String>>, key: &str) -> bool {
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

fn error_message(cmd_id: i64, code: i32, text: &str) -> JsonValue {
    json!({
        "subscriptionId": cmd_id,
        "errorCode": code,
        "errorMsg": text,
        "data": null,
    })
}

/// `data` and `latestValues` from (key, ts, value) points; several points of a key keep their order.
fn points_message(cmd_id: i64, points: Vec<(String, i64, Value)>, with_latest: bool) -> JsonValue {
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

struct Session {
    state: AppState,
    user: Option<CurrentUser>,
    tx: mpsc::Sender<(i64, Update)>,
    rx: mpsc::Receiver<(i64, Update)>,
    overflow: Arc<Overflow>,
    subscriptions: HashMap<i64, Subscription>,
}

enum Flow {
    Continue,
    Close(u16, &'static str),
}

impl Session {
    fn new(state: AppState, user: Option<CurrentUser>) -> Session {
        let (tx, rx) = mpsc::channel(QUEUE_UPDATES_MAX);
        Session {
            state,
            user,
            tx,
            rx,
            overflow: Arc::new(Overflow::default()),
            subscriptions: HashMap::new(),
        }
    }

    async fn run(mut self, mut socket: WebSocket) {
        let flow = self.serve(&mut socket).await;
        self.unsubscribe_all();
        if let Flow::Close(code, reason) = flow {
            let frame = CloseFrame {
                code,
                reason: reason.into(),
            };
            let _ =
                tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Close(Some(frame)))).await;
        }
    }

    async fn serve(&mut self, socket: &mut WebSocket) -> Flow {
        let overflow = self.overflow.clone();
        loop {
            if overflow.full.load(Ordering::Acquire) {
                return Flow::Close(
                    POLICY_VIOLATION,
                    "Too many updates queued: the client reads too slowly",
                );
            }
            tokio::select! {
                incoming = socket.recv() => {
                    let text = match incoming {
                        Some(Ok(Message::Text(text))) => text,
                        Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return Flow::Continue,
                        // Pings are answered by the library; binary frames carry nothing we read.
                        Some(Ok(_)) => continue,
                    };
                    let replies = match self.handle(text.as_str()).await {
                        Ok(replies) => replies,
                        Err(close) => return close,
                    };
                    for reply in replies {
                        if !send(socket, &reply).await {
                            return Flow::Continue;
                        }
                    }
                }
                update = self.rx.recv() => {
                    let Some((cmd_id, update)) = update else { return Flow::Continue };
                    if let Some(message) = self.render(cmd_id, &update) {
                        if !send(socket, &message).await {
                            return Flow::Continue;
                        }
                    }
                }
                () = overflow.notify.notified() => {}
            }
        }
    }

    /// Handles one client message; returns the replies, or how to close.
    async fn handle(&mut self, text: &str) -> Result<Vec<JsonValue>, Flow> {
        let envelope: Envelope = match serde_json::from_str(text) {
            Ok(envelope) => envelope,
            Err(_) => {
                return Ok(vec![error_message(
                    0,
                    error_code::BAD_REQUEST,
                    "Failed to parse the payload",
                )])
            }
        };
        if let Some(auth) = &envelope.auth_cmd {
            match authenticate(&self.state, &auth.token) {
                Ok(user) => self.user = Some(user),
                Err(_) => return Err(Flow::Close(POLICY_VIOLATION, "Authentication failed")),
            }
        }
        let Some(user) = self.user.clone() else {
            return Err(Flow::Close(POLICY_VIOLATION, "Auth cmd is missing"));
        };
        let mut replies = Vec::new();
        for cmd in envelope.commands() {
            if let Some(reply) = self.command(&user, cmd).await {
                replies.push(reply);
            }
        }
        Ok(replies)
    }

    async fn command(&mut self, user: &CurrentUser, cmd: Cmd) -> Option<JsonValue> {
        let cmd_id = cmd.cmd_id;
        if cmd.unsubscribe {
            if let Some(sub) = self.subscriptions.remove(&cmd_id) {
                self.state.ingest.events().unsubscribe(sub.device, sub.id);
            }
            return None;
        }
        let kind = cmd.kind.as_str();
        if !matches!(kind, "TIMESERIES" | "ATTRIBUTES" | "TIMESERIES_HISTORY") {
            return Some(error_message(
                cmd_id,
                error_code::BAD_REQUEST,
                &format!("Unsupported command type: {kind}"),
            ));
        }
        let entity_type = cmd.entity_type.as_deref().unwrap_or("");
        let entity_id = cmd.entity_id.as_deref().unwrap_or("");
        let device = match device_of(&self.state, user, entity_type, entity_id).await {
            Ok(device) => device,
            Err(e) => {
                let code = match e.status().as_u16() {
                    401 | 403 => error_code::UNAUTHORIZED,
                    _ => error_code::BAD_REQUEST,
                };
                return Some(error_message(cmd_id, code, &e.message()));
            }
        };
        self.state.ingest.caught_up(device, CATCH_UP_TIMEOUT).await;
        match kind {
            "TIMESERIES_HISTORY" => Some(self.history(device, &cmd)),
            "TIMESERIES" => {
                let keys = keys_of(cmd.keys.as_deref());
                // Subscribe before reading the snapshot: an update applied in between then arrives
                // after it (at worst twice), never not at all.
                if let Some(refused) = self.watch(
                    cmd_id,
                    device,
                    Interest::TELEMETRY,
                    Watch::Timeseries(keys.clone()),
                ) {
                    return refused;
                }
                let window = cmd.time_window.filter(|w| *w > 0);
                Some(match (cmd.start_ts, window) {
                    (Some(start_ts), Some(window)) => {
                        let ranged = Cmd {
                            end_ts: Some(start_ts.saturating_add(window)),
                            keys: Some(
                                keys.unwrap_or_else(|| {
                                    self.state.ingest.tsdb().keys(device.as_u128())
                                })
                                .join(","),
                            ),
                            ..cmd
                        };
                        self.history(device, &ranged)
                    }
                    _ => self.latest(cmd_id, device, &keys),
                })
            }
            _ => {
                let scope = match cmd.scope.as_deref().filter(|s| !s.is_empty()) {
                    None => None,
                    Some(name) => match name.parse::<AttributeScope>() {
                        Ok(scope) => Some(scope),
                        Err(_) => {
                            return Some(error_message(
                                cmd_id,
                                error_code::BAD_REQUEST,
                                &format!("Invalid scope: {name}"),
                            ))
                        }
                    },
                };
                let keys = keys_of(cmd.keys.as_deref());
                if let Some(refused) = self.watch(
                    cmd_id,
                    device,
                    Interest::ATTRIBUTES,
                    Watch::Attributes(scope, keys.clone()),
                ) {
                    return refused;
                }
                Some(self.attributes_snapshot(cmd_id, device, scope, &keys))
            }
        }
    }

    /// Registers a subscription (replacing one with the same id). `Some(error)` when the session holds
    /// too many already.
    fn watch(
        &mut self,
        cmd_id: i64,
        device: Uuid,
        interest: Interest,
        watch: Watch,
    ) -> Option<Option<JsonValue>> {
        if let Some(old) = self.subscriptions.remove(&cmd_id) {
            self.state.ingest.events().unsubscribe(old.device, old.id);
        }
        if self.subscriptions.len() >= SUBSCRIPTIONS_MAX {
            return Some(Some(error_message(
                cmd_id,
                error_code::BAD_REQUEST,
                "Too many subscriptions in one session",
            )));
        }
        let subscriber = Arc::new(WsSubscriber {
            cmd_id,
            interest,
            tx: self.tx.clone(),
            overflow: self.overflow.clone(),
        });
        let id = self.state.ingest.events().subscribe(device, subscriber);
        self.subscriptions
            .insert(cmd_id, Subscription { device, id, watch });
        None
    }

    fn unsubscribe_all(&mut self) {
        for (_, sub) in self.subscriptions.drain() {
            self.state.ingest.events().unsubscribe(sub.device, sub.id);
        }
    }

    fn latest(&self, cmd_id: i64, device: Uuid, keys: &Option<Vec<String>>) -> JsonValue {
        let tsdb = self.state.ingest.tsdb();
        let keys = keys.clone().unwrap_or_else(|| tsdb.keys(device.as_u128()));
        let points = tsdb
            .latest(device.as_u128(), &keys)
            .into_iter()
            .map(|l| (l.key, l.ts, l.value))
            .collect();
        points_message(cmd_id, points, true)
    }

    fn history(&self, device: Uuid, cmd: &Cmd) -> JsonValue {
        let cmd_id = cmd.cmd_id;
        let (Some(start_ts), Some(end_ts)) = (cmd.start_ts, cmd.end_ts) else {
            return error_message(
                cmd_id,
                error_code::BAD_REQUEST,
                "startTs and endTs are required",
            );
        };
        let name = cmd.agg.as_deref().unwrap_or("NONE");
        let Some(agg) = parse_agg(name) else {
            return error_message(
                cmd_id,
                error_code::BAD_REQUEST,
                &format!("Unsupported aggregation: {name}"),
            );
        };
        let interval = cmd.interval.unwrap_or(0);
        if agg != Agg::None && interval < 1 {
            return error_message(
                cmd_id,
                error_code::BAD_REQUEST,
                "'interval' must be greater than 0",
            );
        }
        let points_max = self.state.config.tsdb.query_points_max;
        let order = match cmd.order_by.as_deref() {
            Some(o) if o.eq_ignore_ascii_case("ASC") => Order::Asc,
            _ => Order::Desc,
        };
        let query = TsQuery {
            start_ts,
            end_ts,
            interval_ms: interval,
            agg,
            limit: cmd.limit.unwrap_or(100).min(points_max),
            order,
            buckets_max: points_max,
        };
        let keys = keys_of(cmd.keys.as_deref()).unwrap_or_default();
        let mut points = Vec::new();
        for key in keys {
            match self
                .state
                .ingest
                .tsdb()
                .query(device.as_u128(), &key, &query)
            {
                Ok(found) => points.extend(found.into_iter().map(|(ts, v)| (key.clone(), ts, v))),
                Err(e) => return error_message(cmd_id, error_code::INTERNAL, &e.to_string()),
            }
        }
        points_message(cmd_id, points, false)
    }

    fn attributes_snapshot(
        &self,
        cmd_id: i64,
        device: Uuid,
        scope: Option<AttributeScope>,
        keys: &Option<Vec<String>>,
    ) -> JsonValue {
        let wanted_keys: Vec<&str> = keys.iter().flatten().map(String::as_str).collect();
        let scopes = scope.map_or(AttributeScope::ALL.to_vec(), |s| vec![s]);
        let points = scopes
            .into_iter()
            .flat_map(|scope| scope_attributes(&self.state, device, scope, &wanted_keys))
            .map(|a| (a.key, a.last_update_ts, a.value))
            .collect();
        points_message(cmd_id, points, true)
    }

    /// The message for an update of subscription `cmd_id`, if it carries anything the subscription wants.
    fn render(&self, cmd_id: i64, update: &Update) -> Option<JsonValue> {
        let sub = self.subscriptions.get(&cmd_id)?;
        let points: Vec<(String, i64, Value)> = match (&sub.watch, update) {
            (Watch::Timeseries(keys), Update::Telemetry(records)) => records
                .iter()
                .flat_map(|r| {
                    r.kvs
                        .iter()
                        .filter(|kv| wanted(keys, &kv.key))
                        .map(|kv| (kv.key.clone(), r.ts, kv.value.clone()))
                })
                .collect(),
            (
                Watch::Attributes(scope, keys),
                Update::Attributes {
                    scope: changed,
                    ts,
                    kvs,
                    ..
                },
            ) if scope.is_none_or(|s| s == *changed) => kvs
                .iter()
                .filter(|kv| wanted(keys, &kv.key))
                .map(|kv| (kv.key.clone(), *ts, kv.value.clone()))
                .collect(),
            _ => return None,
        };
        (!points.is_empty()).then(|| points_message(cmd_id, points, true))
    }
}

/// Sends one JSON message; false when the client is gone or stopped reading.
async fn send(socket: &mut WebSocket, message: &JsonValue) -> bool {
    let text = message.to_string();
    matches!(
        tokio::time::timeout(SEND_TIMEOUT, socket.send(Message::Text(text.into()))).await,
        Ok(Ok(()))
    )
}
