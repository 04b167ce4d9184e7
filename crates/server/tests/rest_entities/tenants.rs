//! Tenants and their administrators, as the system administrator manages them, and who else may not.

use super::*;

#[tokio::test]
async fn the_system_administrator_manages_tenants_and_their_administrators() {
    let app = app();
    let sys = app.login(SYSADMIN).await;
    let tenant = app.login(TENANT).await;

    // Only the system administrator creates and lists tenants.
    let body = json!({"title": "Acme"});
    assert_error(
        &app.send("POST", "/api/tenant", Some(&tenant), Some(body.clone()))
            .await,
        403,
        20,
    );
    assert_error(
        &app.send(
            "POST",
            "/api/tenant",
            Some(&sys),
            Some(json!({"title": " "})),
        )
        .await,
        400,
        31,
    );
    let r = app
        .send("POST", "/api/tenant", Some(&sys), Some(body))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["id"]["entityType"], "TENANT");
    assert_eq!(r.body["title"], "Acme");
    let id = r.body["id"]["id"].as_str().unwrap().to_string();
    let renamed = json!({"id": {"entityType": "TENANT", "id": id}, "title": "Acme Inc"});
    let r = app
        .send("POST", "/api/tenant", Some(&sys), Some(renamed))
        .await;
    assert_eq!(r.body["title"], "Acme Inc", "{}", r.body);
    let r = app
        .send(
            "GET",
            "/api/tenants?pageSize=10&page=0&textSearch=acme",
            Some(&sys),
            None,
        )
        .await;
    assert_eq!(r.body["totalElements"], 1, "{}", r.body);
    assert_error(
        &app.send(
            "GET",
            "/api/tenants?pageSize=10&page=0",
            Some(&tenant),
            None,
        )
        .await,
        403,
        20,
    );
    // A tenant administrator reads its own tenant, not another.
    assert_error(
        &app.send("GET", &format!("/api/tenant/{id}"), Some(&tenant), None)
            .await,
        403,
        20,
    );

    // Its first administrator: created by the system administrator, who may create nothing else.
    let admin = json!({"email": "boss@acme.example", "authority": "TENANT_ADMIN",
                       "tenantId": {"entityType": "TENANT", "id": id}});
    let r = app
        .send("POST", "/api/user", Some(&sys), Some(admin.clone()))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(r.body["tenantId"]["id"], id.as_str());
    let user_id = r.body["id"]["id"].as_str().unwrap().to_string();
    let customer_user = json!({"email": "c@acme.example", "authority": "CUSTOMER_USER",
                               "tenantId": {"entityType": "TENANT", "id": id}});
    assert_error(
        &app.send("POST", "/api/user", Some(&sys), Some(customer_user))
            .await,
        400,
        31,
    );
    let nowhere = json!({"email": "x@acme.example", "authority": "TENANT_ADMIN",
                         "tenantId": {"entityType": "TENANT", "id": NULL_UUID.to_string()}});
    assert_error(
        &app.send("POST", "/api/user", Some(&sys), Some(nowhere))
            .await,
        404,
        32,
    );
    // The demo tenant's administrator cannot read or delete the new tenant's administrator.
    for method in ["GET", "DELETE"] {
        assert_error(
            &app.send(method, &format!("/api/user/{user_id}"), Some(&tenant), None)
                .await,
            403,
            20,
        );
    }
    let r = app
        .send(
            "GET",
            &format!("/api/tenant/{id}/users?pageSize=10&page=0"),
            Some(&sys),
            None,
        )
        .await;
    assert_eq!(
        r.body["data"][0]["email"], "boss@acme.example",
        "{}",
        r.body
    );

    // Deleting the tenant takes its users and devices with it.
    let r = app
        .send("DELETE", &format!("/api/tenant/{id}"), Some(&tenant), None)
        .await;
    assert_error(&r, 403, 20);
    let r = app
        .send("DELETE", &format!("/api/tenant/{id}"), Some(&sys), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_error(
        &app.send("GET", &format!("/api/tenant/{id}"), Some(&sys), None)
            .await,
        404,
        32,
    );
    assert_error(
        &app.send("GET", &format!("/api/user/{user_id}"), Some(&sys), None)
            .await,
        404,
        32,
    );
}
