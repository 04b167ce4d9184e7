//! One WebSocket session: reads the client's commands, subscribes to devices' updates through
//! `ingest::events`, answers with snapshots and history, and forwards updates from its bounded queue;
//! a full queue closes the session.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use fleetwire_model::record::AttributeScope;
use fleetwire_model::Value;
use fleetwire_tsdb::{Agg, Order, Query as TsQuery};
use serde_json::Value as JsonValue;
use tokio::sync::{mpsc, Notify};
use uuid::Uuid;

use super::message::{error_code, error_message, keys_of, points_message, wanted, Cmd, Envelope};
use super::{authenticate, POLICY_VIOLATION, QUEUE_UPDATES_MAX, SEND_TIMEOUT, SUBSCRIPTIONS_MAX};
use crate::api::attributes::scope_attributes;
use crate::api::auth::CurrentUser;
use crate::api::telemetry::{device_of, parse_agg, CATCH_UP_TIMEOUT};
use crate::ingest::events::{Interest, Subscriber, SubscriptionId, Update};
use crate::AppState;

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

pub(super) struct Session {
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
    pub(super) fn new(state: AppState, user: Option<CurrentUser>) -> Session {
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

    pub(super) async fn run(mut self, mut socket: WebSocket) {
        crate::metrics::ws_sessions_add(1);
        let flow = self.serve(&mut socket).await;
        self.unsubscribe_all();
        crate::metrics::ws_sessions_add(-1);
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
            match authenticate(&self.state, &auth.token).await {
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
                crate::metrics::ws_subscriptions_add(-1);
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
            crate::metrics::ws_subscriptions_add(-1);
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
        crate::metrics::ws_subscriptions_add(1);
        None
    }

    fn unsubscribe_all(&mut self) {
        for (_, sub) in self.subscriptions.drain() {
            self.state.ingest.events().unsubscribe(sub.device, sub.id);
            crate::metrics::ws_subscriptions_add(-1);
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
        if points.is_empty() {
            return None;
        }
        crate::metrics::sent(
            crate::metrics::OutTransport::WebSocket,
            crate::metrics::Out::SubscriptionUpdate,
            points.len(),
        );
        Some(points_message(cmd_id, points, true))
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
