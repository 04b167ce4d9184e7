//! Devices and credentials over REST.

use super::*;

#[tokio::test]
async fn device_create_get_credentials_delete() {
    let app = app();
    let token = app.login(TENANT).await;
    let r = app
        .send(
            "POST",
            "/api/device?accessToken=DW00000001",
            Some(&token),
            Some(json!({"name": "DW00000001", "type": "SMART_METER", "additionalInfo": {"gateway": true}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let device = r.body;
    let id = device["id"]["id"].as_str().unwrap().to_string();
    assert_eq!(device["id"]["entityType"], "DEVICE");
    assert_eq!(
        device["customerId"],
        json!({"entityType": "CUSTOMER", "id": NULL_UUID.to_string()})
    );
    assert_eq!(device["type"], "SMART_METER");
    assert_eq!(device["deviceProfileId"]["entityType"], "DEVICE_PROFILE");
    assert_eq!(device["version"], 1);
    assert_eq!(device["label"], Value::Null);
    assert_eq!(device["firmwareId"], Value::Null);
    assert_eq!(device["additionalInfo"], json!({"gateway": true}));
    assert_eq!(device["deviceData"]["configuration"]["type"], "DEFAULT");
    assert!(device["createdTime"].as_i64().unwrap() > 0);

    let r = app
        .send(
            "GET",
            &format!("/api/device/{id}/credentials"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.body["credentialsType"], "ACCESS_TOKEN");
    assert_eq!(r.body["credentialsId"], "DW00000001");
    assert_eq!(r.body["credentialsValue"], Value::Null);
    assert_eq!(r.body["deviceId"]["id"], id);
    assert!(r.body["id"]["entityType"].is_null() && r.body["id"]["id"].is_string());
    let auth = app
        .state
        .entities
        .device_by_access_token("DW00000001")
        .unwrap();
    assert!(auth.gateway);

    assert_eq!(
        app.send("GET", &format!("/api/device/{id}"), Some(&token), None)
            .await
            .body,
        device
    );
    let info = app
        .send("GET", &format!("/api/device/info/{id}"), Some(&token), None)
        .await
        .body;
    assert_eq!(info["deviceProfileName"], "SMART_METER");
    assert_eq!(info["active"], false);
    let types = app
        .send("GET", "/api/device/types", Some(&token), None)
        .await
        .body;
    assert!(types
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["type"] == "SMART_METER" && t["entityType"] == "DEVICE"));

    let r = app
        .send(
            "POST",
            "/api/device",
            Some(&token),
            Some(json!({"name": "DW00000001"})),
        )
        .await;
    assert_error(&r, 400, 31);
    assert_eq!(r.body["message"], "Device with such name already exists!");
    let r = app
        .send(
            "POST",
            "/api/device",
            Some(&token),
            Some(json!({"label": "no name"})),
        )
        .await;
    assert_error(&r, 400, 31);

    assert_eq!(
        app.send("DELETE", &format!("/api/device/{id}"), Some(&token), None)
            .await
            .status,
        StatusCode::OK
    );
    let r = app
        .send("GET", &format!("/api/device/{id}"), Some(&token), None)
        .await;
    assert_error(&r, 404, 32);
    assert_eq!(
        r.body["message"],
        format!("Device with id [{id}] is not found")
    );
    assert!(app
        .state
        .entities
        .device_by_access_token("DW00000001")
        .is_none());
    assert_error(
        &app.send("GET", "/api/device/not-a-uuid", Some(&token), None)
            .await,
        400,
        31,
    );
}

#[tokio::test]
async fn device_update_uses_version() {
    let app = app();
    let token = app.login(TENANT).await;
    let mut device = app.create_device(&token, "d1").await;
    device["label"] = json!("Kitchen");
    let r = app
        .send("POST", "/api/device", Some(&token), Some(device.clone()))
        .await;
    assert_eq!(
        (r.status, r.body["version"].clone(), r.body["label"].clone()),
        (StatusCode::OK, json!(2), json!("Kitchen"))
    );
    // The stale version 1 now conflicts; a null version overwrites.
    let r = app
        .send("POST", "/api/device", Some(&token), Some(device.clone()))
        .await;
    assert_error(&r, 409, 35);
    device["version"] = Value::Null;
    let r = app
        .send("POST", "/api/device", Some(&token), Some(device))
        .await;
    assert_eq!(r.body["version"], 3);
}

#[tokio::test]
async fn find_device_by_name() {
    let app = app();
    let token = app.login(TENANT).await;
    let device = app.create_device(&token, "DW00000042").await;
    for path in ["/api/tenant/devices", "/api/tenant/device"] {
        let r = app
            .send(
                "GET",
                &format!("{path}?deviceName=DW00000042"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(r.body, device, "{path}");
        let r = app
            .send(
                "GET",
                &format!("{path}?deviceName=DW99999999"),
                Some(&token),
                None,
            )
            .await;
        assert_error(&r, 404, 32);
    }
}

#[tokio::test]
async fn device_paging_search_and_sort() {
    let app = app();
    let token = app.login(TENANT).await;
    for name in ["meter-a", "meter-b", "meter-c", "tracker-a", "Meter-D"] {
        app.create_device(&token, name).await;
    }
    let r = app
        .send(
            "GET",
            "/api/tenant/devices?pageSize=2&page=0&textSearch=METER",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(
        (
            r.body["totalElements"].clone(),
            r.body["totalPages"].clone()
        ),
        (json!(4), json!(2))
    );
    assert_eq!(r.body["hasNext"], true);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);
    let r = app
        .send(
            "GET",
            "/api/tenant/devices?pageSize=10&page=0&textSearch=meter&sortProperty=name&sortOrder=DESC",
            Some(&token),
            None,
        )
        .await;
    let names: Vec<_> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["meter-c", "meter-b", "meter-a", "Meter-D"]);
    let r = app
        .send(
            "GET",
            "/api/tenant/deviceInfos?pageSize=100&page=0",
            Some(&token),
            None,
        )
        .await;
    // The five plus the demo device.
    assert_eq!(r.body["totalElements"], 6);
    assert_eq!(r.body["data"][0]["deviceProfileName"], "default");
    assert_error(
        &app.send("GET", "/api/tenant/devices?page=0", Some(&token), None)
            .await,
        400,
        31,
    );
    let r = app
        .send(
            "GET",
            "/api/tenant/devices?pageSize=10&page=0&sortOrder=UP",
            Some(&token),
            None,
        )
        .await;
    assert_error(&r, 400, 31);
}

#[tokio::test]
async fn credentials_update_to_mqtt_basic() {
    let app = app();
    let token = app.login(TENANT).await;
    let device = app.create_device(&token, "mqtt-dev").await;
    let id = device["id"]["id"].as_str().unwrap();
    let mut creds = app
        .send(
            "GET",
            &format!("/api/device/{id}/credentials"),
            Some(&token),
            None,
        )
        .await
        .body;
    creds["credentialsType"] = json!("MQTT_BASIC");
    creds["credentialsValue"] = json!(r#"{"clientId":"c1","userName":"u1","password":"p1"}"#);
    let r = app
        .send(
            "POST",
            "/api/device/credentials",
            Some(&token),
            Some(creds.clone()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["version"], 2);
    assert_eq!(
        r.body["credentialsId"].as_str().unwrap().len(),
        64,
        "SHA3-256 hex of clientId|userName"
    );
    let auth = app
        .state
        .entities
        .authenticate_mqtt("c1", Some("u1"), Some(b"p1"));
    assert!(matches!(auth, MqttAuth::Device(d) if d.name == "mqtt-dev"));
    // creds still carries version 1: stale.
    assert_error(
        &app.send(
            "POST",
            "/api/device/credentials",
            Some(&token),
            Some(creds.clone()),
        )
        .await,
        409,
        35,
    );
    creds["version"] = Value::Null;
    creds["credentialsValue"] = json!(r#"{"clientId":"c1","password":"p1"}"#);
    let r = app
        .send("POST", "/api/device/credentials", Some(&token), Some(creds))
        .await;
    assert_error(&r, 400, 31);
    assert_eq!(
        r.body["message"],
        "Password cannot be specified along with client id"
    );
}

#[tokio::test]
async fn device_with_credentials() {
    let app = app();
    let token = app.login(TENANT).await;
    let body = json!({
        "device": {"name": "basic-dev"},
        "credentials": {"credentialsType": "MQTT_BASIC", "credentialsValue": "{\"userName\":\"solo\",\"password\":\"pw\"}"}
    });
    let r = app
        .send(
            "POST",
            "/api/device-with-credentials",
            Some(&token),
            Some(body),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let id = r.body["id"]["id"].as_str().unwrap();
    let creds = app
        .send(
            "GET",
            &format!("/api/device/{id}/credentials"),
            Some(&token),
            None,
        )
        .await
        .body;
    assert_eq!(creds["credentialsId"], "solo");
    assert!(matches!(
        app.state
            .entities
            .authenticate_mqtt("x", Some("solo"), Some(b"pw")),
        MqttAuth::Device(_)
    ));
}

#[tokio::test]
async fn other_tenants_entities_are_forbidden() {
    let app = app();
    let token = app.login(TENANT).await;
    let mine = app.create_device(&token, "mine").await;
    let other = app.state.entities.create_tenant("Other").unwrap();
    app.state
        .entities
        .create_user(&NewUser::tenant_admin(
            other.id,
            "other@example.com",
            "other",
        ))
        .unwrap();
    let other_token = app.login(("other@example.com", "other")).await;
    let id = mine["id"]["id"].as_str().unwrap();
    for (method, uri) in [
        ("GET", format!("/api/device/{id}")),
        ("GET", format!("/api/device/{id}/credentials")),
        ("DELETE", format!("/api/device/{id}")),
    ] {
        assert_error(
            &app.send(method, &uri, Some(&other_token), None).await,
            403,
            20,
        );
    }
    let r = app
        .send(
            "GET",
            "/api/tenant/devices?pageSize=10&page=0",
            Some(&other_token),
            None,
        )
        .await;
    assert_eq!(r.body["totalElements"], 0);
    // The same name is free in the other tenant.
    app.create_device(&other_token, "mine").await;
}

#[tokio::test]
async fn deleting_a_device_deletes_its_telemetry_and_attributes() {
    use fleetwire_model::record::AttributeScope;
    use fleetwire_tsdb::{Order, Query};
    use std::time::Duration;

    let app = app();
    let token = app.login(TENANT).await;
    let mut ids = Vec::new();
    for name in ["doomed", "kept"] {
        let device = app.create_device(&token, name).await;
        let id = device["id"]["id"].as_str().unwrap().to_string();
        let base = format!("/api/plugins/telemetry/DEVICE/{id}");
        for (path, body) in [
            (
                "timeseries/ANY",
                json!([{"ts": 1_000, "values": {"temperature": 20.5}},
                       {"ts": 2_000, "values": {"temperature": 21.5, "humidity": 40}}]),
            ),
            ("attributes/SHARED_SCOPE", json!({"target": 3})),
            ("attributes/SERVER_SCOPE", json!({"note": "basement"})),
        ] {
            let r = app
                .send("POST", &format!("{base}/{path}"), Some(&token), Some(body))
                .await;
            assert_eq!(r.status, StatusCode::OK, "{path}: {}", r.body);
        }
        let uuid = uuid::Uuid::parse_str(&id).unwrap();
        app.state
            .activity
            .http_request(&app.state.ingest, uuid, 3_000);
        ids.push(uuid);
    }
    app.state
        .activity
        .persist(app.state.ingest.attributes())
        .unwrap();
    let [doomed, kept] = [ids[0], ids[1]];

    let r = app
        .send(
            "DELETE",
            &format!("/api/device/{doomed}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);

    let ingest = &app.state.ingest;
    let points = |device: uuid::Uuid, key: &str| {
        ingest
            .tsdb()
            .query(
                device.as_u128(),
                key,
                &Query::raw(i64::MIN, i64::MAX, 100, Order::Asc),
            )
            .unwrap()
            .len()
    };
    let attributes =
        |device: uuid::Uuid, scope| ingest.attributes().get(device.as_u128(), scope, &[]);
    // The deletes went through the log; wait until the processor applied them.
    ingest.caught_up(doomed, Duration::from_secs(5)).await;
    assert_eq!(
        (points(doomed, "temperature"), points(doomed, "humidity")),
        (0, 0)
    );
    assert!(ingest
        .tsdb()
        .latest(doomed.as_u128(), &[] as &[&str])
        .is_empty());
    for scope in AttributeScope::ALL {
        assert!(attributes(doomed, scope).is_empty(), "{scope:?}");
    }
    assert!(!app.state.activity.is_active(doomed));
    ingest.attributes().persist().unwrap();

    // The other device keeps everything.
    assert_eq!(
        (points(kept, "temperature"), points(kept, "humidity")),
        (2, 1)
    );
    assert_eq!(
        ingest.tsdb().latest(kept.as_u128(), &[] as &[&str]).len(),
        2
    );
    assert_eq!(attributes(kept, AttributeScope::Shared).len(), 1);
    assert_eq!(attributes(kept, AttributeScope::Server).len(), 1);
    assert!(app.state.activity.is_active(kept));
}

/// A processor that has caught up waits `log.apply_interval_us` before its next batch; a read right after a
/// save still waits for the save to be applied, so it sees it (here with a long interval, 50 ms, so that
/// the later saves land while the processor sleeps).
#[tokio::test]
async fn a_read_right_after_a_save_sees_it_while_the_processor_waits_between_batches() {
    let app = app_with(|c| c.log.apply_interval_us = 50_000);
    let token = app.login(TENANT).await;
    let device = app.create_device(&token, "meter").await;
    let id = device["id"]["id"].as_str().unwrap().to_string();
    let base = format!("/api/plugins/telemetry/DEVICE/{id}");
    for round in 1..=3i64 {
        let ts = round * 1_000;
        let r = app
            .send(
                "POST",
                &format!("{base}/timeseries/ANY"),
                Some(&token),
                Some(json!({"ts": ts, "values": {"reading": round}})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        let r = app
            .send(
                "GET",
                &format!("{base}/values/timeseries?keys=reading"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.body);
        assert_eq!(
            r.body["reading"][0]["ts"],
            json!(ts),
            "round {round}: {}",
            r.body
        );
    }
}
