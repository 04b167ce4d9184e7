//! Save, get, info, ack, clear, assign, unassign, delete, and their errors.

use super::*;

#[tokio::test]
async fn save_get_info_json_shape() {
    let s = server().await;
    let token = s.login(TENANT).await;
    let device = s.device(&token, "meter-1", Some("Boiler room")).await;
    let body = json!({
        "type": "battery low",
        "originator": {"entityType": "DEVICE", "id": device},
        "severity": "CRITICAL",
        "startTs": 1_700_000_000_000i64,
        "endTs": 1_700_000_300_000i64,
        "details": {"data": "battery = 10"},
        "propagateToTenant": true,
        "propagateRelationTypes": ["Contains"],
        // Read-only and server-managed fields are ignored.
        "name": "ignored", "status": "CLEARED_ACK", "createdTime": 5,
        "tenantId": {"entityType": "TENANT", "id": Uuid::new_v4()},
    });
    let r = s.post("/api/alarm", &token, body).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    let alarm = r.body;
    assert_eq!(keys(&alarm), sorted(&ALARM_FIELDS[..22]));
    let id = id_of(&alarm);
    let created = alarm["createdTime"].as_i64().unwrap();
    assert!(created > 1_700_000_000_000);
    assert_eq!(
        alarm,
        json!({
            "id": {"entityType": "ALARM", "id": id},
            "createdTime": created,
            "tenantId": {"entityType": "TENANT", "id": s.tenant_id()},
            "customerId": {"entityType": "CUSTOMER", "id": NULL_UUID},
            "type": "battery low",
            "originator": {"entityType": "DEVICE", "id": device},
            "severity": "CRITICAL",
            "acknowledged": false,
            "cleared": false,
            "assigneeId": null,
            "startTs": 1_700_000_000_000i64,
            "endTs": 1_700_000_300_000i64,
            "ackTs": 0,
            "clearTs": 0,
            "assignTs": 0,
            "details": {"data": "battery = 10"},
            "propagate": false,
            "propagateToOwner": false,
            "propagateToTenant": true,
            "propagateRelationTypes": ["Contains"],
            "name": "battery low",
            "status": "ACTIVE_UNACK",
        })
    );
    assert_eq!(s.get(&format!("/api/alarm/{id}"), &token).await.body, alarm);

    let info = s.get(&format!("/api/alarm/info/{id}"), &token).await.body;
    let mut info_fields = ALARM_FIELDS.to_vec();
    info_fields.extend(["originatorLabel", "originatorDisplayName", "assignee"]);
    assert_eq!(keys(&info), sorted(&info_fields));
    assert_eq!(info["originatorName"], "meter-1");
    assert_eq!(info["originatorLabel"], "Boiler room");
    assert_eq!(info["originatorDisplayName"], "Boiler room");
    assert_eq!(info["assignee"], Value::Null);
    assert_eq!(info["status"], "ACTIVE_UNACK");

    // Creating the same type again updates the active alarm (start kept, severity and end replaced).
    let again = s
        .post(
            "/api/alarm",
            &token,
            json!({"type": "battery low", "originator": {"entityType": "DEVICE", "id": device},
                   "severity": "MAJOR"}),
        )
        .await
        .body;
    assert_eq!(id_of(&again), id);
    assert_eq!(again["severity"], "MAJOR");
    assert_eq!(again["startTs"], 1_700_000_000_000i64);
    assert!(again["endTs"].as_i64().unwrap() >= created);
    assert_eq!(again["details"], Value::Null);
    // Without start and end: both now.
    let other = s.alarm(&token, &device, "door open", "MINOR").await;
    assert_ne!(id_of(&other), id);
    assert_eq!(other["startTs"], other["endTs"]);
    assert!(other["startTs"].as_i64().unwrap() >= created);
    // Update by id: severity and details change, type does not.
    let r = s
        .post(
            "/api/alarm",
            &token,
            json!({"id": {"entityType": "ALARM", "id": id_of(&other)}, "type": "renamed",
                   "originator": {"entityType": "DEVICE", "id": device}, "severity": "WARNING",
                   "details": {"k": 1}, "acknowledged": true}),
        )
        .await
        .body;
    assert_eq!(
        (r["type"].clone(), r["severity"].clone()),
        (json!("door open"), json!("WARNING"))
    );
    assert_eq!(
        (r["acknowledged"].clone(), r["status"].clone()),
        (json!(true), json!("ACTIVE_ACK"))
    );
    assert!(r["ackTs"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn save_errors() {
    let s = server().await;
    let token = s.login(TENANT).await;
    let device = s.device(&token, "meter", None).await;
    let save = |body: Value| {
        let token = token.clone();
        let s = &s;
        async move { s.post("/api/alarm", &token, body).await }
    };
    let dev = json!({"entityType": "DEVICE", "id": device});
    assert_message(
        &save(json!({"type": "t", "severity": "MAJOR"})).await,
        404,
        "Requested item wasn't found!",
    );
    assert_message(
        &save(json!({"type": "t", "severity": "MAJOR", "originator": {"id": device}})).await,
        400,
        "Missing entityType or id!",
    );
    assert_message(
        &save(json!({"type": "t", "severity": "MAJOR", "originator": {"entityType": "DEVICE"}}))
            .await,
        400,
        "Missing entityType or id!",
    );
    let asset = save(json!({"type": "t", "severity": "MAJOR",
                            "originator": {"entityType": "ASSET", "id": Uuid::new_v4()}}))
    .await;
    assert_error(&asset, 400, 31);
    assert_error(
        &save(json!({"type": "t", "severity": "MAJOR", "originator": {"entityType": "NOPE", "id": device}})).await,
        400,
        31,
    );
    let missing = Uuid::new_v4();
    assert_message(
        &save(json!({"type": "t", "severity": "MAJOR", "originator": {"entityType": "DEVICE", "id": missing}})).await,
        404,
        &format!("Device with id [{missing}] is not found"),
    );
    assert_message(
        &save(json!({"severity": "MAJOR", "originator": dev})).await,
        400,
        "Alarm type should be specified!",
    );
    assert_message(
        &save(json!({"type": "t", "originator": dev})).await,
        400,
        "Alarm severity should be specified!",
    );
    assert_error(
        &save(json!({"type": "t", "severity": "HIGH", "originator": dev})).await,
        400,
        31,
    );
    assert_message(
        &save(
            json!({"type": "t", "severity": "MAJOR", "originator": dev, "startTs": 10, "endTs": 5}),
        )
        .await,
        400,
        "Alarm start ts can't be greater then alarm end ts!",
    );
    let unknown_user = Uuid::new_v4();
    assert_message(
        &save(json!({"type": "t", "severity": "MAJOR", "originator": dev,
                     "assigneeId": {"entityType": "USER", "id": unknown_user}}))
        .await,
        404,
        &format!("User with id [{unknown_user}] is not found"),
    );
    let unknown_alarm = Uuid::new_v4();
    assert_message(
        &save(
            json!({"id": {"entityType": "ALARM", "id": unknown_alarm}, "type": "t",
                     "severity": "MAJOR", "originator": dev}),
        )
        .await,
        404,
        &format!("Alarm with id [{unknown_alarm}] is not found"),
    );
    let bad = s
        .send("POST", "/api/alarm", Some(&token), Some("{\"type\":"))
        .await;
    assert_error(&bad, 400, 31);
    let r = s
        .send("POST", "/api/alarm", None, Some(&json!({}).to_string()))
        .await;
    assert_error(&r, 401, 10);
    let sysadmin = s.login(SYSADMIN).await;
    let r = s
        .post(
            "/api/alarm",
            &sysadmin,
            json!({"type": "t", "severity": "MAJOR", "originator": dev}),
        )
        .await;
    assert_error(&r, 403, 20);
    // Nothing was stored by the refused requests.
    let page = s.get("/api/alarms?pageSize=10&page=0", &token).await;
    assert_eq!(page.body["totalElements"], 0);
}

#[tokio::test]
async fn ack_clear_delete() {
    let s = server().await;
    let token = s.login(TENANT).await;
    let device = s.device(&token, "meter", None).await;
    let id = id_of(&s.alarm(&token, &device, "battery low", "CRITICAL").await);

    let r = s
        .post(&format!("/api/alarm/{id}/ack"), &token, json!(null))
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        (r.body["acknowledged"].clone(), r.body["status"].clone()),
        (json!(true), json!("ACTIVE_ACK"))
    );
    assert!(r.body["ackTs"].as_i64().unwrap() > 0);
    assert_eq!(r.body["originatorName"], "meter", "ack returns AlarmInfo");
    assert_message(
        &s.post(&format!("/api/alarm/{id}/ack"), &token, json!(null))
            .await,
        400,
        "Alarm was already acknowledged!",
    );

    let r = s
        .post(&format!("/api/alarm/{id}/clear"), &token, json!(null))
        .await;
    assert_eq!(
        (r.body["cleared"].clone(), r.body["status"].clone()),
        (json!(true), json!("CLEARED_ACK"))
    );
    assert!(r.body["clearTs"].as_i64().unwrap() > 0);
    assert_eq!(
        r.body["originatorDisplayName"], "meter",
        "clear returns AlarmInfo"
    );
    assert_message(
        &s.post(&format!("/api/alarm/{id}/clear"), &token, json!(null))
            .await,
        400,
        "Alarm was already cleared!",
    );
    // The next create of the type is a new alarm.
    let next = s.alarm(&token, &device, "battery low", "MINOR").await;
    assert_ne!(id_of(&next), id);

    let r = s.delete(&format!("/api/alarm/{id}"), &token).await;
    assert_eq!((r.status, r.body.clone()), (200, json!(true)));
    assert_message(
        &s.get(&format!("/api/alarm/{id}"), &token).await,
        404,
        &format!("Alarm with id [{id}] is not found"),
    );
    assert_error(
        &s.delete(&format!("/api/alarm/{id}"), &token).await,
        404,
        32,
    );
    assert_error(
        &s.post(&format!("/api/alarm/{id}/ack"), &token, json!(null))
            .await,
        404,
        32,
    );
    assert_error(
        &s.get(&format!("/api/alarm/info/{id}"), &token).await,
        404,
        32,
    );
    assert_error(&s.get("/api/alarm/not-a-uuid", &token).await, 400, 31);
}

#[tokio::test]
async fn assign_and_unassign() {
    let s = server().await;
    let token = s.login(TENANT).await;
    let device = s.device(&token, "meter", None).await;
    let id = id_of(&s.alarm(&token, &device, "battery low", "CRITICAL").await);
    let user = s
        .state
        .entities
        .create_user(&NewUser {
            first_name: Some("Ada".into()),
            last_name: Some("Lovelace".into()),
            ..NewUser::tenant_admin(s.tenant_id(), "ada@example.com", "pw")
        })
        .unwrap()
        .id;

    let r = s
        .post(
            &format!("/api/alarm/{id}/assign/{user}"),
            &token,
            json!(null),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(
        keys(&r.body),
        sorted(&ALARM_FIELDS[..22]),
        "assign returns Alarm"
    );
    assert_eq!(
        r.body["assigneeId"],
        json!({"entityType": "USER", "id": user})
    );
    assert!(r.body["assignTs"].as_i64().unwrap() > 0);
    let info = s.get(&format!("/api/alarm/info/{id}"), &token).await.body;
    assert_eq!(
        info["assignee"],
        json!({"id": {"entityType": "USER", "id": user}, "firstName": "Ada",
               "lastName": "Lovelace", "email": "ada@example.com"})
    );
    assert_message(
        &s.post(
            &format!("/api/alarm/{id}/assign/{user}"),
            &token,
            json!(null),
        )
        .await,
        400,
        "Alarm was already assigned to this user!",
    );
    let page = s
        .get(
            &format!("/api/alarms?pageSize=10&page=0&assigneeId={user}"),
            &token,
        )
        .await;
    assert_eq!(page.body["totalElements"], 1);

    let r = s.delete(&format!("/api/alarm/{id}/assign"), &token).await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.body["assigneeId"], Value::Null);
    assert_message(
        &s.delete(&format!("/api/alarm/{id}/assign"), &token).await,
        400,
        "Alarm was already unassigned!",
    );
    let nobody = Uuid::new_v4();
    assert_message(
        &s.post(
            &format!("/api/alarm/{id}/assign/{nobody}"),
            &token,
            json!(null),
        )
        .await,
        404,
        &format!("User with id [{nobody}] is not found"),
    );
    let foreign_user = s.state.entities.user_by_email(OTHER.0).unwrap().unwrap().id;
    assert_error(
        &s.post(
            &format!("/api/alarm/{id}/assign/{foreign_user}"),
            &token,
            json!(null),
        )
        .await,
        403,
        20,
    );
    assert_error(
        &s.post(&format!("/api/alarm/{id}/assign/x"), &token, json!(null))
            .await,
        400,
        31,
    );
}

#[tokio::test]
async fn another_tenants_alarm_is_forbidden() {
    let s = server().await;
    let token = s.login(TENANT).await;
    let other = s.login(OTHER).await;
    let device = s.device(&token, "meter", None).await;
    let alarm = s.alarm(&token, &device, "battery low", "CRITICAL").await;
    let id = id_of(&alarm);
    let other_user = s.state.entities.user_by_email(OTHER.0).unwrap().unwrap().id;
    for (method, path) in [
        ("GET", format!("/api/alarm/{id}")),
        ("GET", format!("/api/alarm/info/{id}")),
        ("POST", format!("/api/alarm/{id}/ack")),
        ("POST", format!("/api/alarm/{id}/clear")),
        ("POST", format!("/api/alarm/{id}/assign/{other_user}")),
        ("DELETE", format!("/api/alarm/{id}/assign")),
        ("DELETE", format!("/api/alarm/{id}")),
        (
            "GET",
            format!("/api/alarm/DEVICE/{device}?pageSize=10&page=0"),
        ),
        (
            "GET",
            format!("/api/v2/alarm/DEVICE/{device}?pageSize=10&page=0"),
        ),
        ("GET", format!("/api/alarm/highestSeverity/DEVICE/{device}")),
    ] {
        let r = s.send(method, &path, Some(&other), None).await;
        assert_error(&r, 403, 20);
        assert_eq!(
            r.body["message"],
            "You don't have permission to perform this operation!"
        );
    }
    // Saving on another tenant's device, or updating its alarm by id.
    let dev = json!({"entityType": "DEVICE", "id": device});
    let r = s
        .post(
            "/api/alarm",
            &other,
            json!({"type": "t", "severity": "MAJOR", "originator": dev}),
        )
        .await;
    assert_error(&r, 403, 20);
    let r = s
        .post(
            "/api/alarm",
            &other,
            json!({"id": alarm["id"], "type": "t", "severity": "MAJOR", "originator": dev}),
        )
        .await;
    assert_error(&r, 403, 20);
    // The other tenant's pages and types do not show it; ours is untouched.
    let page = s.get("/api/alarms?pageSize=10&page=0", &other).await;
    assert_eq!(page.body["totalElements"], 0);
    let page = s.get("/api/alarm/types?pageSize=10&page=0", &other).await;
    assert_eq!(page.body["totalElements"], 0);
    let mine = s.get(&format!("/api/alarm/{id}"), &token).await.body;
    assert_eq!(mine, alarm);
}
