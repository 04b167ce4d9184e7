//! The pages (v1 and v2 filters, sorting, paging), the highest severity, the alarm types, and who may
//! read them.

use super::*;

/// Five alarms on two devices, created a few milliseconds apart:
///
/// | # | device | type | severity | status |
/// |---|---|---|---|---|
/// | 0 | A | battery low | CRITICAL | ACTIVE_UNACK |
/// | 1 | A | door open | MINOR | ACTIVE_ACK |
/// | 2 | A | overheat | MAJOR | CLEARED_UNACK |
/// | 3 | B | battery low | WARNING | CLEARED_ACK |
/// | 4 | B | pressure | INDETERMINATE | ACTIVE_UNACK, propagated to the tenant |
struct Data {
    s: Server,
    token: String,
    a: String,
    b: String,
    created: Vec<i64>,
}

async fn data() -> Data {
    let s = server().await;
    let token = s.login(TENANT).await;
    let a = s.device(&token, "meter-a", Some("A label")).await;
    let b = s.device(&token, "meter-b", None).await;
    let spec = [
        (&a, "battery low", "CRITICAL"),
        (&a, "door open", "MINOR"),
        (&a, "overheat", "MAJOR"),
        (&b, "battery low", "WARNING"),
        (&b, "pressure", "INDETERMINATE"),
    ];
    let mut ids = Vec::new();
    let mut created = Vec::new();
    for (i, (device, alarm_type, severity)) in spec.into_iter().enumerate() {
        let body = json!({"type": alarm_type, "severity": severity, "propagateToTenant": i == 4,
                          "originator": {"entityType": "DEVICE", "id": device}});
        let r = s.post("/api/alarm", &token, body).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        ids.push(id_of(&r.body));
        created.push(r.body["createdTime"].as_i64().unwrap());
        // Distinct created times, so the time-range filter has something to tell apart.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    for (action, i) in [("ack", 1), ("clear", 2), ("ack", 3), ("clear", 3)] {
        let r = s
            .post(
                &format!("/api/alarm/{}/{action}", ids[i]),
                &token,
                json!(null),
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
    }
    Data {
        s,
        token,
        a,
        b,
        created,
    }
}

impl Data {
    async fn page(&self, path: &str) -> Value {
        let r = self.s.get(path, &self.token).await;
        assert_eq!(r.status, 200, "{path}: {:?}", r.body);
        r.body
    }

    /// The types of a tenant-wide v1 page with these extra parameters.
    async fn tenant(&self, params: &str) -> Vec<String> {
        types(
            &self
                .page(&format!("/api/alarms?pageSize=100&page=0{params}"))
                .await,
        )
    }

    async fn v2(&self, params: &str) -> Vec<String> {
        types(
            &self
                .page(&format!("/api/v2/alarms?pageSize=100&page=0{params}"))
                .await,
        )
    }

    async fn error(&self, path: &str) -> Reply {
        self.s.get(path, &self.token).await
    }
}

#[tokio::test]
async fn v1_pages_filters_sorting_paging() {
    let d = data().await;
    let page = d
        .page(&format!("/api/alarm/DEVICE/{}?pageSize=10&page=0", d.a))
        .await;
    assert_eq!(types(&page), ["battery low", "door open", "overheat"]);
    assert_eq!(page["totalElements"], 3);
    assert_eq!(page["data"][0]["originatorName"], "meter-a");
    assert_eq!(page["data"][0]["originatorDisplayName"], "A label");
    let page = d
        .page(&format!(
            "/api/alarm/DEVICE/{}?pageSize=10&page=0&fetchOriginator=true",
            d.b
        ))
        .await;
    assert_eq!(types(&page), ["battery low", "pressure"]);
    assert_eq!(page["data"][1]["originatorDisplayName"], "meter-b");

    assert_eq!(d.tenant("").await.len(), 5);
    assert_eq!(d.tenant("&searchStatus=ANY").await.len(), 5);
    assert_eq!(
        d.tenant("&searchStatus=ACTIVE").await,
        ["battery low", "door open", "pressure"]
    );
    assert_eq!(
        d.tenant("&searchStatus=CLEARED").await,
        ["overheat", "battery low"]
    );
    assert_eq!(
        d.tenant("&searchStatus=ACK").await,
        ["door open", "battery low"]
    );
    assert_eq!(
        d.tenant("&searchStatus=UNACK").await,
        ["battery low", "overheat", "pressure"]
    );
    assert_eq!(
        d.tenant("&status=ACTIVE_UNACK").await,
        ["battery low", "pressure"]
    );
    assert_eq!(d.tenant("&status=ACTIVE_ACK").await, ["door open"]);
    assert_eq!(d.tenant("&status=CLEARED_UNACK").await, ["overheat"]);
    assert_eq!(d.tenant("&status=CLEARED_ACK").await, ["battery low"]);
    assert_eq!(
        d.tenant("&searchStatus=&status=").await.len(),
        5,
        "empty means absent"
    );
    let both = d
        .error("/api/alarms?pageSize=10&page=0&searchStatus=ACTIVE&status=ACTIVE_ACK")
        .await;
    assert_message(
        &both,
        400,
        "Invalid alarms search query: Both parameters 'searchStatus' and 'status' can't be specified at the same time!",
    );
    assert_error(
        &d.error("/api/alarms?pageSize=10&page=0&searchStatus=OPEN")
            .await,
        400,
        31,
    );
    assert_error(
        &d.error("/api/alarms?pageSize=10&page=0&status=OPEN").await,
        400,
        31,
    );

    assert_eq!(
        d.tenant("&textSearch=BATTERY").await,
        ["battery low", "battery low"]
    );
    assert_eq!(
        d.tenant("&textSearch=minor").await,
        ["door open"],
        "severity"
    );
    assert_eq!(
        d.tenant("&textSearch=cleared_a").await,
        ["battery low"],
        "status"
    );
    let sort = "&sortProperty=severity&sortOrder=ASC";
    assert_eq!(
        d.tenant(sort).await,
        [
            "battery low",
            "overheat",
            "door open",
            "battery low",
            "pressure"
        ]
    );
    let sort = "&sortProperty=createdTime&sortOrder=desc";
    assert_eq!(
        d.tenant(sort).await,
        [
            "pressure",
            "battery low",
            "overheat",
            "door open",
            "battery low"
        ]
    );
    assert_eq!(
        d.tenant("&sortProperty=type&sortOrder=DESC").await[0],
        "pressure"
    );
    assert_error(
        &d.error("/api/alarms?pageSize=10&page=0&sortProperty=nope")
            .await,
        400,
        31,
    );
    assert_error(
        &d.error("/api/alarms?pageSize=10&page=0&sortOrder=UP").await,
        400,
        31,
    );

    let range = format!("&startTime={}&endTime={}", d.created[1], d.created[3]);
    assert_eq!(
        d.tenant(&range).await,
        ["door open", "overheat", "battery low"]
    );
    assert_eq!(
        d.tenant(&format!("&startTime={}", d.created[4])).await,
        ["pressure"]
    );
    assert_error(
        &d.error("/api/alarms?pageSize=10&page=0&startTime=yesterday")
            .await,
        400,
        31,
    );

    let page = d.page("/api/alarms?pageSize=2&page=1").await;
    assert_eq!(types(&page), ["overheat", "battery low"]);
    assert_eq!(
        (
            page["totalPages"].clone(),
            page["totalElements"].clone(),
            page["hasNext"].clone()
        ),
        (json!(3), json!(5), json!(true))
    );
    let page = d.page("/api/alarms?pageSize=2&page=2").await;
    assert_eq!(
        (types(&page), page["hasNext"].clone()),
        (vec!["pressure".to_string()], json!(false))
    );
    assert_error(&d.error("/api/alarms?page=0").await, 400, 31);
    assert_error(&d.error("/api/alarms?pageSize=0&page=0").await, 400, 31);
    assert_error(
        &d.error("/api/alarms?pageSize=10&page=0&assigneeId=bob")
            .await,
        400,
        31,
    );
}

#[tokio::test]
async fn v2_lists() {
    let d = data().await;
    assert_eq!(
        d.v2("&statusList=ACTIVE,UNACK").await,
        ["battery low", "pressure"]
    );
    assert_eq!(
        d.v2("&statusList=CLEARED&statusList=ACK").await,
        ["battery low"]
    );
    assert_eq!(d.v2("&statusList=ACTIVE,CLEARED").await.len(), 5);
    assert_eq!(
        d.v2("&severityList=CRITICAL,MAJOR").await,
        ["battery low", "overheat"]
    );
    assert_eq!(
        d.v2("&typeList=battery%20low,pressure&statusList=ACTIVE")
            .await,
        ["battery low", "pressure"]
    );
    assert_eq!(
        d.v2("&typeList=battery+low").await,
        ["battery low", "battery low"]
    );
    let page = d
        .page(&format!(
            "/api/v2/alarm/DEVICE/{}?pageSize=10&page=0&typeList=battery%20low",
            d.b
        ))
        .await;
    assert_eq!(page["totalElements"], 1);
    assert_eq!(page["data"][0]["severity"], "WARNING");
    assert_error(
        &d.error("/api/v2/alarms?pageSize=10&page=0&severityList=HIGH")
            .await,
        400,
        31,
    );
    assert_error(
        &d.error("/api/v2/alarms?pageSize=10&page=0&statusList=OPEN")
            .await,
        400,
        31,
    );
}

#[tokio::test]
async fn highest_severity_and_types() {
    let d = data().await;
    let highest = |params: String| {
        let d = &d;
        async move {
            let r = d
                .error(&format!("/api/alarm/highestSeverity/{params}"))
                .await;
            assert_eq!(r.status, 200, "{params}: {:?}", r.body);
            r
        }
    };
    let r = highest(format!("DEVICE/{}", d.a)).await;
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    assert_eq!(r.body, json!("CRITICAL"));
    assert_eq!(
        highest(format!("DEVICE/{}?searchStatus=CLEARED", d.a))
            .await
            .body,
        "MAJOR"
    );
    assert_eq!(
        highest(format!("DEVICE/{}?status=ACTIVE_ACK", d.a))
            .await
            .body,
        "MINOR"
    );
    assert_eq!(
        highest(format!("DEVICE/{}?searchStatus=ACTIVE", d.b))
            .await
            .body,
        "INDETERMINATE"
    );
    let quiet = d.s.device(&d.token, "quiet", None).await;
    let r = highest(format!("DEVICE/{quiet}")).await;
    assert_eq!(r.body, Value::Null, "no alarm: an empty body");
    let both = d
        .error(&format!(
            "/api/alarm/highestSeverity/DEVICE/{}?searchStatus=ACK&status=ACTIVE_ACK",
            d.a
        ))
        .await;
    assert_error(&both, 400, 31);
    assert_error(
        &d.error(&format!(
            "/api/alarm/highestSeverity/DEVICE/{}",
            Uuid::new_v4()
        ))
        .await,
        404,
        32,
    );

    let page = d.page("/api/alarm/types?pageSize=10&page=0").await;
    let tenant = json!({"entityType": "TENANT", "id": d.s.tenant_id()});
    assert_eq!(
        page["data"],
        json!(["battery low", "door open", "overheat", "pressure"]
            .iter()
            .map(|t| json!({"tenantId": tenant, "entityType": "ALARM", "type": t}))
            .collect::<Vec<_>>())
    );
    let page = d.page("/api/alarm/types?pageSize=3&page=1").await;
    assert_eq!(types(&page), ["pressure"]);
    assert_eq!(
        (page["totalPages"].clone(), page["hasNext"].clone()),
        (json!(2), json!(false))
    );
    let page = d
        .page("/api/alarm/types?pageSize=10&page=0&sortOrder=DESC&textSearch=O")
        .await;
    assert_eq!(
        types(&page),
        ["overheat", "door open", "battery low"],
        "sorted down, \"pressure\" has no o"
    );
    let page = d
        .page("/api/alarm/types?pageSize=10&page=0&textSearch=door")
        .await;
    assert_eq!(types(&page), ["door open"]);
    assert_error(&d.error("/api/alarm/types?page=0").await, 400, 31);
}

#[tokio::test]
async fn originators_and_authorities() {
    let d = data().await;
    let tenant_id = d.s.tenant_id();
    // A TENANT originator shows what is propagated to the tenant.
    let page = d
        .page(&format!("/api/alarm/TENANT/{tenant_id}?pageSize=10&page=0"))
        .await;
    assert_eq!(types(&page), ["pressure"]);
    let other_tenant =
        d.s.state
            .entities
            .user_by_email(OTHER.0)
            .unwrap()
            .unwrap()
            .tenant_id;
    assert_error(
        &d.error(&format!(
            "/api/alarm/TENANT/{other_tenant}?pageSize=10&page=0"
        ))
        .await,
        403,
        20,
    );
    // Types without alarms here answer an empty page; unknown types and ids are 400; unknown devices 404.
    let page = d
        .page(&format!(
            "/api/alarm/ASSET/{}?pageSize=10&page=0",
            Uuid::new_v4()
        ))
        .await;
    assert_eq!(page["totalElements"], 0);
    assert_error(
        &d.error(&format!("/api/alarm/GADGET/{}?pageSize=10&page=0", d.a))
            .await,
        400,
        31,
    );
    assert_error(
        &d.error("/api/alarm/DEVICE/nope?pageSize=10&page=0").await,
        400,
        31,
    );
    assert_error(
        &d.error(&format!(
            "/api/alarm/DEVICE/{}?pageSize=10&page=0",
            Uuid::new_v4()
        ))
        .await,
        404,
        32,
    );

    // The system administrator may call the page by originator, but sees no tenant's data.
    let sys = d.s.login(SYSADMIN).await;
    let r =
        d.s.get(
            &format!("/api/alarm/DEVICE/{}?pageSize=10&page=0", d.a),
            &sys,
        )
        .await;
    assert_error(&r, 403, 20);
    let r =
        d.s.get(
            &format!("/api/alarm/TENANT/{tenant_id}?pageSize=10&page=0"),
            &sys,
        )
        .await;
    assert_eq!((r.status, r.body["totalElements"].clone()), (200, json!(0)));
    let r =
        d.s.get(
            &format!("/api/v2/alarm/TENANT/{tenant_id}?pageSize=10&page=0"),
            &sys,
        )
        .await;
    assert_eq!((r.status, r.body["totalElements"].clone()), (200, json!(0)));
    for path in [
        "/api/alarms?pageSize=10&page=0".to_string(),
        "/api/v2/alarms?pageSize=10&page=0".to_string(),
        "/api/alarm/types?pageSize=10&page=0".to_string(),
        format!("/api/alarm/highestSeverity/DEVICE/{}", d.a),
    ] {
        assert_error(&d.s.get(&path, &sys).await, 403, 20);
    }
    // No token: 401 everywhere.
    let r =
        d.s.send("GET", "/api/alarms?pageSize=10&page=0", None, None)
            .await;
    assert_error(&r, 401, 10);
    let _ = &d.b;
}
