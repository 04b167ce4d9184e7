//! The REST API for auth, devices, credentials, profiles and dashboards, driven in-process through
//! `api::router` (plus one real TCP connection for a chunked request body).

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use fleetwire_entities::{BootstrapSpec, MqttAuth, NewUser, NULL_UUID};
use fleetwire_server::api::token::now_s;
use fleetwire_server::{api, AppState, Config};
use serde_json::{json, Value};
use tower::ServiceExt;

const TENANT: (&str, &str) = ("tenant@thingsboard.org", "tenant");
const SYSADMIN: (&str, &str) = ("sysadmin@thingsboard.org", "sysadmin");

struct App {
    router: Router,
    state: AppState,
    _dir: tempfile::TempDir,
}

fn app_with(config_change: impl FnOnce(&mut Config)) -> App {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().join("data"),
        ..Config::default()
    };
    config_change(&mut config);
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
    App {
        router: api::router(state.clone()),
        state,
        _dir: dir,
    }
}

fn app() -> App {
    app_with(|_| {})
}

struct Reply {
    status: StatusCode,
    body: Value,
}

impl App {
    /// Sends a request; asserts that every non-empty response is JSON with the JSON content type.
    async fn send(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        self.send_with(method, uri, token.map(|t| ("x-authorization", t)), body)
            .await
    }

    async fn send_with(
        &self,
        method: &str,
        uri: &str,
        auth: Option<(&str, &str)>,
        body: Option<Value>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some((name, token)) = auth {
            request = request.header(name, format!("Bearer {token}"));
        }
        let body = match body {
            Some(v) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(v.to_string())
            }
            None => Body::empty(),
        };
        self.raw(request.body(body).unwrap()).await
    }

    async fn raw(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            assert_eq!(
                content_type.as_deref(),
                Some("application/json"),
                "status {status}"
            );
            serde_json::from_slice(&bytes).unwrap()
        };
        Reply { status, body }
    }

    async fn login(&self, (username, password): (&str, &str)) -> String {
        let r = self
            .send(
                "POST",
                "/api/auth/login",
                None,
                Some(json!({"username": username, "password": password})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        r.body["token"].as_str().unwrap().to_string()
    }

    async fn create_device(&self, token: &str, name: &str) -> Value {
        let r = self
            .send(
                "POST",
                "/api/device",
                Some(token),
                Some(json!({"name": name})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        r.body
    }
}

/// Asserts ThingsBoard's error body.
fn assert_error(r: &Reply, status: u16, error_code: u64) {
    assert_eq!(r.status.as_u16(), status, "{}", r.body);
    assert_eq!(r.body["status"], status, "{}", r.body);
    assert_eq!(r.body["errorCode"], error_code, "{}", r.body);
    assert!(r.body["message"].is_string(), "{}", r.body);
    assert!(
        r.body["timestamp"].as_i64().unwrap() > 1_600_000_000_000,
        "{}",
        r.body
    );
}

#[path = "rest_entities/devices.rs"]
mod devices;
#[path = "rest_entities/profiles_dashboards.rs"]
mod profiles_dashboards;
#[path = "rest_entities/tenants.rs"]
mod tenants;

#[tokio::test]
async fn login_issues_thingsboard_claims() {
    let app = app();
    let r = app
        .send(
            "POST",
            "/api/auth/login",
            None,
            Some(json!({"username": TENANT.0, "password": TENANT.1})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let access = app
        .state
        .auth
        .verify(r.body["token"].as_str().unwrap())
        .unwrap();
    let refresh = app
        .state
        .auth
        .verify(r.body["refreshToken"].as_str().unwrap())
        .unwrap();
    let user = app.state.entities.user_by_email(TENANT.0).unwrap().unwrap();
    assert_eq!(access.sub, TENANT.0);
    assert_eq!(access.user_id, user.id.to_string());
    assert_eq!(access.scopes, ["TENANT_ADMIN"]);
    assert_eq!(access.tenant_id, Some(user.tenant_id.to_string()));
    assert_eq!(access.customer_id, Some(NULL_UUID.to_string()));
    assert_eq!(access.iss, "thingsboard.io");
    assert_eq!(access.exp - access.iat, 9000);
    assert_eq!(refresh.scopes, ["REFRESH_TOKEN"]);
    assert_eq!(refresh.exp - refresh.iat, 604800);
}

#[tokio::test]
async fn login_failures_are_401_code_10() {
    let app = app();
    for body in [
        json!({"username": TENANT.0, "password": "wrong"}),
        json!({"username": "nobody@example.com", "password": "tenant"}),
        json!({"username": TENANT.0}),
    ] {
        let r = app.send("POST", "/api/auth/login", None, Some(body)).await;
        assert_error(&r, 401, 10);
    }
    let r = app
        .send(
            "POST",
            "/api/auth/login",
            None,
            Some(json!({"username": TENANT.0, "password": "x"})),
        )
        .await;
    assert_eq!(r.body["message"], "Invalid username or password");
    let bad_json = Request::post("/api/auth/login")
        .body(Body::from("{nope"))
        .unwrap();
    assert_error(&app.raw(bad_json).await, 401, 10);
}

#[tokio::test]
async fn refresh_token_flow() {
    let app = app();
    let r = app
        .send(
            "POST",
            "/api/auth/login",
            None,
            Some(json!({"username": TENANT.0, "password": TENANT.1})),
        )
        .await;
    let refresh = r.body["refreshToken"].as_str().unwrap().to_string();
    let access = r.body["token"].as_str().unwrap().to_string();
    let r = app
        .send(
            "POST",
            "/api/auth/token",
            None,
            Some(json!({"refreshToken": refresh})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let new_access = r.body["token"].as_str().unwrap();
    assert_eq!(
        app.send("GET", "/api/auth/user", Some(new_access), None)
            .await
            .status,
        StatusCode::OK
    );
    assert!(r.body["refreshToken"].is_string());
    // An access token is not a refresh token, and a refresh token is not an access token.
    let r = app
        .send(
            "POST",
            "/api/auth/token",
            None,
            Some(json!({"refreshToken": access})),
        )
        .await;
    assert_error(&r, 401, 10);
    assert_error(
        &app.send("GET", "/api/auth/user", Some(&refresh), None)
            .await,
        401,
        10,
    );
    let r = app
        .send(
            "POST",
            "/api/auth/token",
            None,
            Some(json!({"refreshToken": "garbage"})),
        )
        .await;
    assert_error(&r, 401, 10);
}

#[tokio::test]
async fn current_user_and_token_headers() {
    let app = app();
    let token = app.login(TENANT).await;
    let r = app.send("GET", "/api/auth/user", Some(&token), None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body["email"], TENANT.0);
    assert_eq!(r.body["authority"], "TENANT_ADMIN");
    assert_eq!(r.body["id"]["entityType"], "USER");
    assert_eq!(r.body["tenantId"]["entityType"], "TENANT");
    assert_eq!(r.body["customerId"]["id"], NULL_UUID.to_string());
    // Authorization: Bearer works as well as X-Authorization.
    let r = app
        .send_with(
            "GET",
            "/api/auth/user",
            Some(("authorization", &token)),
            None,
        )
        .await;
    assert_eq!(r.body["email"], TENANT.0);
    // Missing, invalid, and expired tokens.
    assert_error(
        &app.send("GET", "/api/auth/user", None, None).await,
        401,
        10,
    );
    assert_error(
        &app.send("GET", "/api/auth/user", Some("not.a.jwt"), None)
            .await,
        401,
        10,
    );
    let user = app.state.entities.user_by_email(TENANT.0).unwrap().unwrap();
    let old = app.state.auth.issue(&user, now_s() - 10_000).unwrap();
    let r = app
        .send("GET", "/api/auth/user", Some(&old.token), None)
        .await;
    assert_error(&r, 401, 11);
    assert_eq!(r.body["message"], "Token has expired");
    assert_eq!(
        app.send("POST", "/api/auth/logout", Some(&token), None)
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn errors_health_and_limits() {
    let app = app_with(|c| c.http.body_bytes_max = 1024);
    let r = app.send("GET", "/healthz", None, None).await;
    assert_eq!(
        (r.status, r.body.clone()),
        (StatusCode::OK, json!({"status": "UP"}))
    );
    assert_error(
        &app.send("GET", "/api/nothing/here", None, None).await,
        404,
        32,
    );
    let token = app.login(TENANT).await;
    let bad = Request::post("/api/device")
        .header("x-authorization", format!("Bearer {token}"))
        .body(Body::from("{\"name\":"))
        .unwrap();
    assert_error(&app.raw(bad).await, 400, 31);
    let wrong_type = app
        .send(
            "POST",
            "/api/device",
            Some(&token),
            Some(json!({"name": 5})),
        )
        .await;
    assert_error(&wrong_type, 400, 31);
    let big = json!({"name": "x".repeat(2048)});
    let r = app
        .send("POST", "/api/device", Some(&token), Some(big))
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.body);
}

/// ThingsBoard's Java RestClient sends the login body chunked, without Content-Length.
#[tokio::test]
async fn chunked_login_body_over_tcp() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = app();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = app.router.clone();
    let server = tokio::spawn(async move { axum::serve(listener, router).await });
    let body = format!(r#"{{"username":"{}","password":"{}"}}"#, TENANT.0, TENANT.1);
    let (first, second) = body.split_at(10);
    let request = format!(
        "POST /api/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{first}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
        first.len(),
        second.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{response}"
    );
    assert!(response.contains("\"refreshToken\""), "{response}");
    server.abort();
}
