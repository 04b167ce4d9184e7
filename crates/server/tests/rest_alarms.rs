//! The alarm REST API (reference 4.8) over real HTTP: the app is served on a loopback socket and every
//! request is written and read back byte by byte, status line, headers and body.

use std::net::SocketAddr;

use fleetwire_entities::{
    AlarmOutcome, AlarmRaise, AlarmSeverity, BootstrapSpec, NewUser, Propagation, NULL_UUID,
};
use fleetwire_server::{api, AppState, Config};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

const TENANT: (&str, &str) = ("tenant@thingsboard.org", "tenant");
const SYSADMIN: (&str, &str) = ("sysadmin@thingsboard.org", "sysadmin");
const OTHER: (&str, &str) = ("other@example.com", "other");

struct Server {
    addr: SocketAddr,
    state: AppState,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    content_type: Option<String>,
    /// `Value::Null` for an empty body.
    body: Value,
}

/// A server with the demo data and a second tenant whose admin is [`OTHER`].
async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    let state = AppState::open(config).unwrap();
    state
        .entities
        .bootstrap(&BootstrapSpec {
            sysadmin_email: "sysadmin@fleetwire.local".into(),
            tenant_admin_email: "tenant@fleetwire.local".into(),
            sysadmin_password: "sys-pass".into(),
            tenant_admin_password: "tenant-pass".into(),
            demo: true,
        })
        .unwrap();
    let other = state.entities.create_tenant("Other").unwrap();
    state
        .entities
        .create_user(&NewUser::tenant_admin(other.id, OTHER.0, OTHER.1))
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = api::router(state.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, router).await.unwrap();
    });
    Server {
        addr,
        state,
        task,
        _dir: dir,
    }
}

/// Decodes a `Transfer-Encoding: chunked` body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n").unwrap();
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16)
            .unwrap();
        raw = &raw[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

impl Server {
    /// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to the end.
    async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> Reply {
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if let Some(token) = token {
            request.push_str(&format!("X-Authorization: Bearer {token}\r\n"));
        }
        let body = body.unwrap_or("");
        if method != "GET" {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        request.push_str(body);
        let mut stream = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        let head = String::from_utf8(raw[..split].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let header = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let mut bytes = raw[split + 4..].to_vec();
        if header("transfer-encoding").as_deref() == Some("chunked") {
            bytes = dechunk(&bytes);
        }
        let content_type = header("content-type");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            assert_eq!(
                content_type.as_deref(),
                Some("application/json"),
                "{method} {path}"
            );
            serde_json::from_slice(&bytes).unwrap()
        };
        Reply {
            status,
            content_type,
            body,
        }
    }

    async fn get(&self, path: &str, token: &str) -> Reply {
        self.send("GET", path, Some(token), None).await
    }

    async fn post(&self, path: &str, token: &str, body: Value) -> Reply {
        self.send("POST", path, Some(token), Some(&body.to_string()))
            .await
    }

    async fn delete(&self, path: &str, token: &str) -> Reply {
        self.send("DELETE", path, Some(token), None).await
    }

    async fn login(&self, (username, password): (&str, &str)) -> String {
        let body = json!({"username": username, "password": password}).to_string();
        let r = self
            .send("POST", "/api/auth/login", None, Some(&body))
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body["token"].as_str().unwrap().to_string()
    }

    /// Creates a device over REST; returns its id.
    async fn device(&self, token: &str, name: &str, label: Option<&str>) -> String {
        let r = self
            .post("/api/device", token, json!({"name": name, "label": label}))
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body["id"]["id"].as_str().unwrap().to_string()
    }

    /// Saves an alarm over REST; asserts 200 and returns the Alarm JSON.
    async fn alarm(&self, token: &str, device: &str, alarm_type: &str, severity: &str) -> Value {
        let r = self
            .post(
                "/api/alarm",
                token,
                json!({
                    "type": alarm_type,
                    "originator": {"entityType": "DEVICE", "id": device},
                    "severity": severity,
                }),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body
    }

    fn tenant_id(&self) -> Uuid {
        self.state
            .entities
            .user_by_email(TENANT.0)
            .unwrap()
            .unwrap()
            .tenant_id
    }
}

/// Asserts ThingsBoard's error body.
fn assert_error(r: &Reply, status: u16, error_code: u64) {
    assert_eq!(r.status, status, "{:?}", r.body);
    assert_eq!(r.body["status"], status, "{:?}", r.body);
    assert_eq!(r.body["errorCode"], error_code, "{:?}", r.body);
    assert!(r.body["message"].is_string(), "{:?}", r.body);
}

fn assert_message(r: &Reply, status: u16, message: &str) {
    assert_error(r, status, if status == 404 { 32 } else { 31 });
    assert_eq!(r.body["message"], message);
}

fn id_of(alarm: &Value) -> String {
    alarm["id"]["id"].as_str().unwrap().to_string()
}

/// The types of a PageData<AlarmInfo>, in order.
fn types(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["type"].as_str().unwrap().to_string())
        .collect()
}

const ALARM_FIELDS: [&str; 23] = [
    "id",
    "createdTime",
    "tenantId",
    "customerId",
    "type",
    "originator",
    "severity",
    "acknowledged",
    "cleared",
    "assigneeId",
    "startTs",
    "endTs",
    "ackTs",
    "clearTs",
    "assignTs",
    "details",
    "propagate",
    "propagateToOwner",
    "propagateToTenant",
    "propagateRelationTypes",
    "name",
    "status",
    // Not an Alarm field: the list ends with the first AlarmInfo field for the slice below.
    "originatorName",
];

fn keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

fn sorted(fields: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = fields.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[path = "rest_alarms/pages.rs"]
mod pages;
#[path = "rest_alarms/writes.rs"]
mod writes;

#[tokio::test]
async fn the_evaluator_and_rest_share_the_active_alarm() {
    let s = server().await;
    let token = s.login(TENANT).await;
    let device = s.device(&token, "meter", None).await;
    let device_id = Uuid::parse_str(&device).unwrap();
    let propagation = Propagation::default();
    let raise = |severity| AlarmRaise {
        device_id,
        alarm_type: "battery low",
        severity,
        details: Some(json!({"data": "battery = 10"})),
        data_ts: 0,
        propagation: &propagation,
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let created = s
        .state
        .entities
        .raise_alarm(&raise(AlarmSeverity::Critical), now())
        .unwrap();
    assert_eq!(created.outcome, AlarmOutcome::Created);
    let id = created.alarm.id.to_string();
    // A REST create of the same type updates the evaluator's alarm.
    let rest = s.alarm(&token, &device, "battery low", "CRITICAL").await;
    assert_eq!(id_of(&rest), id);
    let info = s.get(&format!("/api/alarm/info/{id}"), &token).await;
    assert_eq!(info.body["originatorName"], "meter");
    // A REST clear makes the evaluator's next TRUE create rule create a new alarm.
    let r = s
        .post(&format!("/api/alarm/{id}/clear"), &token, json!(null))
        .await;
    assert_eq!(r.body["status"], "CLEARED_UNACK");
    assert_eq!(
        s.state.entities.active_alarm(device_id, "battery low"),
        None
    );
    let again = s
        .state
        .entities
        .raise_alarm(&raise(AlarmSeverity::Major), now())
        .unwrap();
    assert_eq!(again.outcome, AlarmOutcome::Created);
    assert_ne!(again.alarm.id.to_string(), id);
    // Deleting the device over REST deletes its alarms.
    let r = s.delete(&format!("/api/device/{device}"), &token).await;
    assert_eq!(r.status, 200);
    assert_error(&s.get(&format!("/api/alarm/{id}"), &token).await, 404, 32);
    assert_eq!(
        s.state.entities.active_alarm(device_id, "battery low"),
        None
    );
    let page = s.get("/api/alarms?pageSize=10&page=0", &token).await;
    assert_eq!(page.body["totalElements"], 0);
}
