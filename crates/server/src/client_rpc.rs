//! Client-side RPC methods the server does not answer itself (reference 1.9). Until a rule engine exists,
//! a device profile may name a webhook in `profileData.clientRpc`:
//!
//! ```json
//! "clientRpc": {"webhookUrl": "http://127.0.0.1:9000/rpc", "timeoutMs": 60000}
//! ```
//!
//! The request is POSTed there as `{"deviceId","deviceName","tenantId","requestId","method","params"}` and
//! the webhook's JSON answer is the device's reply. No answer within `timeoutMs` (default 60 s, ThingsBoard's
//! `CLIENT_SIDE_RPC_TIMEOUT`) gives `{"error":"timeout"}`; a profile without a webhook gives
//! `{"error":"Unsupported RPC method: …"}` at once. Plain HTTP only.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value as JsonValue};
use uuid::Uuid;

use crate::AppState;

/// ThingsBoard's `CLIENT_SIDE_RPC_TIMEOUT`.
const TIMEOUT_MS_DEFAULT: u64 = 60_000;
/// Largest webhook answer taken.
const ANSWER_BYTES_MAX: usize = 64 << 10;

/// Where a profile sends its devices' client-side RPC requests.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Webhook {
    url: hyper::Uri,
    timeout: Duration,
}

/// The webhook of a profile's `profileData`, if it names a usable one.
fn webhook_of(profile_data: &JsonValue) -> Option<Webhook> {
    let config = profile_data.get("clientRpc")?;
    let url: hyper::Uri = config.get("webhookUrl")?.as_str()?.parse().ok()?;
    if url.scheme_str() != Some("http") || url.host().is_none() {
        return None;
    }
    let timeout_ms = config
        .get("timeoutMs")
        .and_then(JsonValue::as_u64)
        .filter(|ms| *ms > 0)
        .unwrap_or(TIMEOUT_MS_DEFAULT);
    Some(Webhook {
        url,
        timeout: Duration::from_millis(timeout_ms),
    })
}

/// The reply to a device's client-side RPC `method` that no built-in answers.
pub async fn answer(
    state: &AppState,
    device: Uuid,
    request_id: &str,
    method: &str,
    params: JsonValue,
) -> JsonValue {
    let unsupported = || json!({ "error": format!("Unsupported RPC method: {method}") });
    let Some(auth) = state.entities.device_auth(device) else {
        return unsupported();
    };
    let entities = state.entities.clone();
    let profile = tokio::task::spawn_blocking(move || entities.device_profile(auth.profile_id))
        .await
        .ok()
        .and_then(Result::ok)
        .flatten();
    let Some(webhook) = profile.and_then(|p| webhook_of(&p.profile_data)) else {
        return unsupported();
    };
    let body = json!({
        "deviceId": device,
        "deviceName": auth.name,
        "tenantId": auth.tenant_id,
        "requestId": request_id,
        "method": method,
        "params": params,
    });
    match tokio::time::timeout(webhook.timeout, call(&webhook.url, body.to_string())).await {
        Err(_) => json!({"error": "timeout"}),
        Ok(Ok(answer)) => answer,
        Ok(Err(message)) => {
            tracing::debug!(%device, url = %webhook.url, %message, "client-side RPC webhook failed");
            json!({ "error": message })
        }
    }
}

/// One POST; the answer must be 2xx and JSON.
async fn call(url: &hyper::Uri, body: String) -> Result<JsonValue, String> {
    let host = url.host().ok_or("the webhook URL has no host")?;
    let port = url.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("cannot reach the webhook: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("webhook handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let authority = url
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_else(|| host.to_string());
    let request = Request::post(url.path_and_query().map_or("/", |p| p.as_str()))
        .header(HOST, authority)
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("webhook request: {e}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("webhook request failed: {e}"))?;
    let status = response.status();
    let bytes = http_body_util::Limited::new(response.into_body(), ANSWER_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| format!("webhook answer: {e}"))?
        .to_bytes();
    if !status.is_success() {
        return Err(format!("webhook answered {}", status.as_u16()));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(JsonValue::Object(Default::default()));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("webhook answer is not JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_from_profile_data() {
        let data =
            json!({"clientRpc": {"webhookUrl": "http://127.0.0.1:9000/rpc?x=1", "timeoutMs": 500}});
        let hook = webhook_of(&data).unwrap();
        assert_eq!(hook.timeout, Duration::from_millis(500));
        assert_eq!(hook.url.path_and_query().unwrap().as_str(), "/rpc?x=1");
        let default = webhook_of(&json!({"clientRpc": {"webhookUrl": "http://h/"}})).unwrap();
        assert_eq!(default.timeout, Duration::from_millis(TIMEOUT_MS_DEFAULT));
        for none in [
            json!({}),
            json!({"clientRpc": null}),
            json!({"clientRpc": {"webhookUrl": "https://secure/"}}),
            json!({"clientRpc": {"webhookUrl": "not a url"}}),
        ] {
            assert_eq!(webhook_of(&none), None, "{none}");
        }
    }
}
