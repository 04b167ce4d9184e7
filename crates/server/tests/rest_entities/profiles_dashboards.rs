//! Device profiles, dashboards and the authorities that may use them.

use super::*;

#[tokio::test]
async fn device_profiles_lifecycle() {
    let app = app();
    let token = app.login(TENANT).await;
    let profile_data = json!({
        "configuration": {"type": "DEFAULT"},
        "transportConfiguration": {"type": "DEFAULT"},
        "provisionConfiguration": {"type": "DISABLED", "provisionDeviceSecret": null},
        "alarms": [{"id": "a1", "alarmType": "battery low", "createRules": {"CRITICAL": {"condition": {
            "condition": [{"key": {"type": "TIME_SERIES", "key": "batteryLevel"}, "valueType": "NUMERIC",
                "predicate": {"type": "NUMERIC", "operation": "LESS_OR_EQUAL", "value": {"defaultValue": 20}}}],
            "spec": {"type": "SIMPLE"}}}}}]
    });
    let r = app
        .send(
            "POST",
            "/api/deviceProfile",
            Some(&token),
            Some(json!({"name": "SMART_METER", "type": "DEFAULT", "transportType": "DEFAULT", "profileData": profile_data})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let profile = r.body;
    assert_eq!(profile["profileData"], profile_data);
    assert_eq!(
        (profile["default"].clone(), profile["version"].clone()),
        (json!(false), json!(1))
    );
    assert_eq!(profile["provisionType"], "DISABLED");
    let id = profile["id"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        app.send(
            "GET",
            &format!("/api/deviceProfile/{id}"),
            Some(&token),
            None
        )
        .await
        .body,
        profile
    );

    let list = app
        .send(
            "GET",
            "/api/deviceProfiles?pageSize=1000&page=0",
            Some(&token),
            None,
        )
        .await
        .body;
    let names: Vec<_> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "SMART_METER"]);
    let infos = app
        .send(
            "GET",
            "/api/deviceProfileInfos?pageSize=10&page=0&textSearch=smart",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(infos.body["data"][0]["name"], "SMART_METER");
    assert_eq!(infos.body["data"][0]["transportType"], "DEFAULT");

    let default = app
        .send("GET", "/api/deviceProfileInfo/default", Some(&token), None)
        .await
        .body;
    assert_eq!(default["name"], "default");
    let old_default_id = default["id"]["id"].as_str().unwrap().to_string();
    let r = app
        .send(
            "POST",
            &format!("/api/deviceProfile/{id}/default"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.body["default"], true);
    let default = app
        .send("GET", "/api/deviceProfileInfo/default", Some(&token), None)
        .await
        .body;
    assert_eq!(default["id"]["id"], id);
    let info = app
        .send(
            "GET",
            &format!("/api/deviceProfileInfo/{id}"),
            Some(&token),
            None,
        )
        .await
        .body;
    assert_eq!(info["name"], "SMART_METER");

    let r = app
        .send(
            "DELETE",
            &format!("/api/deviceProfile/{id}"),
            Some(&token),
            None,
        )
        .await;
    assert_error(&r, 400, 31);
    assert_eq!(
        r.body["message"],
        "Deletion of Default Device Profile is prohibited!"
    );
    // The old default still has the demo device.
    let r = app
        .send(
            "DELETE",
            &format!("/api/deviceProfile/{old_default_id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(
        r.body["message"],
        "The device profile referenced by the devices cannot be deleted!"
    );
    let spare = app
        .send(
            "POST",
            "/api/deviceProfile",
            Some(&token),
            Some(json!({"name": "spare"})),
        )
        .await
        .body;
    let spare_id = spare["id"]["id"].as_str().unwrap();
    let mut stale = spare.clone();
    stale["description"] = json!("v1");
    assert_eq!(
        app.send(
            "POST",
            "/api/deviceProfile",
            Some(&token),
            Some(stale.clone())
        )
        .await
        .body["version"],
        2
    );
    assert_error(
        &app.send("POST", "/api/deviceProfile", Some(&token), Some(stale))
            .await,
        409,
        35,
    );
    let r = app
        .send(
            "DELETE",
            &format!("/api/deviceProfile/{spare_id}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_error(
        &app.send(
            "GET",
            &format!("/api/deviceProfile/{spare_id}"),
            Some(&token),
            None,
        )
        .await,
        404,
        32,
    );
}

#[tokio::test]
async fn dashboards_lifecycle() {
    let app = app();
    let token = app.login(TENANT).await;
    let r = app
        .send(
            "GET",
            "/api/tenant/dashboards?pageSize=1000&page=0",
            Some(&token),
            None,
        )
        .await;
    assert_eq!(
        r.body,
        json!({"data": [], "totalPages": 0, "totalElements": 0, "hasNext": false})
    );
    let configuration =
        json!({"widgets": {"w": {"sizeX": 8}}, "states": {"default": {"name": "Meters"}}});
    let r = app
        .send(
            "POST",
            "/api/dashboard",
            Some(&token),
            Some(json!({"title": "Meters", "configuration": configuration})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let dashboard = r.body;
    assert_eq!(dashboard["id"]["entityType"], "DASHBOARD");
    assert_eq!(
        (dashboard["title"].clone(), dashboard["name"].clone()),
        (json!("Meters"), json!("Meters"))
    );
    assert_eq!(dashboard["configuration"], configuration);
    assert_eq!(dashboard["version"], 1);
    let id = dashboard["id"]["id"].as_str().unwrap().to_string();

    let list = app
        .send(
            "GET",
            "/api/tenant/dashboards?pageSize=1000&page=0",
            Some(&token),
            None,
        )
        .await
        .body;
    assert_eq!(list["totalElements"], 1);
    let info = &list["data"][0];
    assert_eq!(info["title"], "Meters");
    assert!(
        info.get("configuration").is_none(),
        "DashboardInfo has no configuration"
    );
    assert_eq!(info["mobileHide"], false);
    assert_eq!(
        app.send("GET", &format!("/api/dashboard/{id}"), Some(&token), None)
            .await
            .body,
        dashboard
    );
    assert_eq!(
        app.send(
            "GET",
            &format!("/api/dashboard/info/{id}"),
            Some(&token),
            None
        )
        .await
        .body,
        *info
    );
    assert_error(
        &app.send(
            "POST",
            "/api/dashboard",
            Some(&token),
            Some(json!({"configuration": {}})),
        )
        .await,
        400,
        31,
    );

    assert_eq!(
        app.send(
            "DELETE",
            &format!("/api/dashboard/{id}"),
            Some(&token),
            None
        )
        .await
        .status,
        StatusCode::OK
    );
    assert_error(
        &app.send("GET", &format!("/api/dashboard/{id}"), Some(&token), None)
            .await,
        404,
        32,
    );
}

#[tokio::test]
async fn sysadmin_is_refused_tenant_endpoints() {
    let app = app();
    let token = app.login(SYSADMIN).await;
    assert_eq!(
        app.send("GET", "/api/auth/user", Some(&token), None)
            .await
            .body["authority"],
        "SYS_ADMIN"
    );
    for (method, uri, body) in [
        ("GET", "/api/tenant/devices?pageSize=10&page=0", None),
        ("POST", "/api/device", Some(json!({"name": "x"}))),
        ("GET", "/api/deviceProfiles?pageSize=10&page=0", None),
        ("POST", "/api/deviceProfile", Some(json!({"name": "x"}))),
        ("GET", "/api/tenant/dashboards?pageSize=10&page=0", None),
    ] {
        let r = app.send(method, uri, Some(&token), body).await;
        assert_error(&r, 403, 20);
        assert_eq!(
            r.body["message"],
            "You don't have permission to perform this operation!"
        );
    }
}
