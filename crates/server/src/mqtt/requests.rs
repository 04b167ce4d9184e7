//! Requests a device makes over MQTT that the server answers itself: built-in client-side RPC methods
//! (reference 1.9) and attribute requests (reference 1.7).

use bytes::Bytes;
use uuid::Uuid;

use crate::ingest::attributes::split_keys;
use crate::ingest::now_ms;
use crate::AppState;

/// What a device's client-side RPC request (reference 1.9) needs.
pub enum ClientRpc {
    /// A built-in method: publish this body on this topic now.
    Answer(String, Bytes),
    /// Any other method: ask the profile's webhook ([`crate::client_rpc::answer`]) and publish its answer on
    /// this topic.
    Forward {
        topic: String,
        method: String,
        params: serde_json::Value,
    },
}

/// Classifies a client-side RPC request; `None` for one without a method, which gets no answer.
pub fn client_rpc(
    state: &AppState,
    id: &str,
    v2: bool,
    gateway: bool,
    payload: &[u8],
) -> Option<ClientRpc> {
    let mut request: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let method = request.get("method")?.as_str()?.to_string();
    let prefix = if v2 {
        "v2/r/res/"
    } else {
        "v1/devices/me/rpc/response/"
    };
    let topic = format!("{prefix}{id}");
    // getSessionLimits is a built-in on the v1 topic only, as in ThingsBoard.
    let built_in = (!(v2 && method == "getSessionLimits"))
        .then(|| built_in(state, &method, gateway))
        .flatten();
    Some(match built_in {
        Some(body) => ClientRpc::Answer(topic, Bytes::from(body.to_string())),
        None => ClientRpc::Forward {
            topic,
            method,
            params: request
                .get_mut("params")
                .map(serde_json::Value::take)
                .unwrap_or(serde_json::Value::Null),
        },
    })
}

/// The answer of a built-in client-side RPC method; `None` for any other method. Session limits report the
/// configured rate limits (reference 1.9): `rateLimits` are the device's (a gateway's own:
/// `transport_gateway_device_*`), and a gateway's also carry `gatewayRateLimits`, the limits of the devices
/// behind it (`transport_gateway_*`); null = unlimited.
pub fn built_in(state: &AppState, method: &str, gateway: bool) -> Option<serde_json::Value> {
    Some(match method {
        "getSessionLimits" => {
            let (own, behind) = state.limits.transport.session_limits(gateway);
            let mut limits = serde_json::json!({
                "maxPayloadSize": state.config.mqtt.packet_bytes_max,
                "maxInflightMessages": state.config.mqtt.inflight_max,
                "rateLimits": own.session_limits_json(),
            });
            if let Some(behind) = behind {
                limits["gatewayRateLimits"] = behind.session_limits_json();
            }
            limits
        }
        "getCurrentTime" => serde_json::json!({ "currentTime": now_ms() }),
        _ => return None,
    })
}

/// Answers an attribute request (reference 1.7) from the attribute store; `None` when it is malformed.
pub fn attributes_request(state: &AppState, device: Uuid, payload: &[u8]) -> Option<Bytes> {
    let request: serde_json::Value = if payload.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_slice(payload).ok()?
    };
    // Key lists are comma-separated strings; a JSON array works only with exactly one element, as in
    // ThingsBoard.
    let keys = |name: &str| -> Option<Option<Vec<&str>>> {
        match request.get(name) {
            None | Some(serde_json::Value::Null) => Some(None),
            Some(serde_json::Value::String(s)) => Some(Some(split_keys(s))),
            Some(serde_json::Value::Array(a)) if a.len() == 1 => {
                Some(Some(a[0].as_str().map(split_keys).unwrap_or_default()))
            }
            Some(_) => None,
        }
    };
    let client_keys = keys("clientKeys")?;
    let shared_keys = keys("sharedKeys")?;
    let body = state.ingest.attributes().device_request_json(
        device.as_u128(),
        client_keys.as_deref(),
        shared_keys.as_deref(),
    );
    Some(Bytes::from(body.to_string()))
}
