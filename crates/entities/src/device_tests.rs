//! Tests of devices and credentials writes (kept apart from device.rs to keep it short).

use std::sync::{Arc, Mutex};

use serde_json::json;

use super::*;
use crate::{CredentialsType, ProfileDraft, SortOrder};

fn setup() -> (Entities, Uuid) {
    let e = Entities::open_in_memory().unwrap();
    let t = e.create_tenant("T").unwrap();
    (e, t.id)
}

#[test]
fn create_defaults_and_access_token() {
    let (e, t) = setup();
    let d = e
        .save_device(
            t,
            &DeviceDraft::named("DW00000001"),
            Some(&CredentialsDraft::access_token("DW00000001")),
        )
        .unwrap();
    assert_eq!(
        (d.version, d.profile_name.as_str(), d.customer_id),
        (1, "default", NULL_UUID)
    );
    assert_eq!(
        d.device_data,
        json!({"configuration":{"type":"DEFAULT"},"transportConfiguration":{"type":"DEFAULT"}})
    );
    assert_eq!(d.additional_info, None);
    let c = e.device_credentials(d.id).unwrap().unwrap();
    assert_eq!(
        (
            c.credentials_type,
            c.credentials_id.as_str(),
            c.credentials_value.as_deref(),
            c.version
        ),
        (CredentialsType::AccessToken, "DW00000001", None, 1)
    );
    assert_eq!(
        e.device_by_access_token("DW00000001").unwrap().device_id,
        d.id
    );
    // Without a token, a random 20-character one.
    let d2 = e
        .save_device(t, &DeviceDraft::named("other"), None)
        .unwrap();
    let c2 = e.device_credentials(d2.id).unwrap().unwrap();
    assert_eq!(c2.credentials_id.len(), 20);
    assert!(e.device_by_access_token(&c2.credentials_id).is_some());
}

#[test]
fn names_unique_per_tenant_and_tokens_unique_globally() {
    let (e, t) = setup();
    e.save_device(
        t,
        &DeviceDraft::named("d1"),
        Some(&CredentialsDraft::access_token("TOK")),
    )
    .unwrap();
    let err = e
        .save_device(t, &DeviceDraft::named("d1"), None)
        .unwrap_err();
    assert_eq!(err.to_string(), "Device with such name already exists!");
    assert!(matches!(err, EntityError::AlreadyExists(_)));
    // Duplicate token: refused, and the device is not created either (one transaction).
    let err = e
        .save_device(
            t,
            &DeviceDraft::named("d2"),
            Some(&CredentialsDraft::access_token("TOK")),
        )
        .unwrap_err();
    assert!(matches!(err, EntityError::AlreadyExists(_)), "{err}");
    assert!(e.device_by_name(t, "d2").unwrap().is_none());
    // Same name in another tenant is fine; the token is not.
    let t2 = e.create_tenant("T2").unwrap().id;
    e.save_device(t2, &DeviceDraft::named("d1"), None).unwrap();
    assert!(e
        .save_device(
            t2,
            &DeviceDraft::named("x"),
            Some(&CredentialsDraft::access_token("TOK"))
        )
        .is_err());
    assert!(e.save_device(t, &DeviceDraft::named("  "), None).is_err());
}

#[test]
fn profile_resolution() {
    let (e, t) = setup();
    let d = e
        .save_device(
            t,
            &DeviceDraft {
                type_name: Some("thermostat".into()),
                ..DeviceDraft::named("a")
            },
            None,
        )
        .unwrap();
    assert_eq!(d.profile_name, "thermostat");
    let created = e.device_profile_by_name(t, "thermostat").unwrap().unwrap();
    assert_eq!(d.profile_id, created.id);
    assert!(!created.is_default);
    let mqtt = e
        .save_device_profile(
            t,
            &ProfileDraft {
                transport_type: Some("MQTT".into()),
                ..ProfileDraft::named("M")
            },
        )
        .unwrap();
    let d = e
        .save_device(
            t,
            &DeviceDraft {
                profile_id: Some(mqtt.id),
                type_name: Some("ignored".into()),
                ..DeviceDraft::named("b")
            },
            None,
        )
        .unwrap();
    assert_eq!(d.profile_name, "M");
    assert_eq!(d.device_data["transportConfiguration"]["type"], "MQTT");
    let t2 = e.create_tenant("T2").unwrap().id;
    let err = e
        .save_device(
            t2,
            &DeviceDraft {
                profile_id: Some(mqtt.id),
                ..DeviceDraft::named("c")
            },
            None,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Device is referencing non existing device profile!"
    );
}

#[test]
fn update_versions_and_cache() {
    let (e, t) = setup();
    let d = e
        .save_device(
            t,
            &DeviceDraft::named("gw"),
            Some(&CredentialsDraft::access_token("GW")),
        )
        .unwrap();
    assert!(!e.device_by_access_token("GW").unwrap().gateway);
    let mut draft = DeviceDraft {
        id: Some(d.id),
        version: Some(1),
        label: Some("Gateway 1".into()),
        additional_info: Some(json!({"gateway": true})),
        ..DeviceDraft::named("gw-renamed")
    };
    let d2 = e
        .save_device(t, &draft, Some(&CredentialsDraft::access_token("IGNORED")))
        .unwrap();
    assert_eq!((d2.version, d2.created_time), (2, d.created_time));
    assert!(d2.is_gateway());
    let auth = e.device_by_access_token("GW").unwrap();
    assert!(auth.gateway);
    assert_eq!(auth.name, "gw-renamed");
    assert_eq!(e.device_auth(d.id), Some(auth));
    assert!(
        e.device_by_access_token("IGNORED").is_none(),
        "update does not touch credentials"
    );
    let err = e.save_device(t, &draft, None).unwrap_err();
    assert!(matches!(err, EntityError::VersionConflict(_)), "{err}");
    draft.version = None;
    assert_eq!(e.save_device(t, &draft, None).unwrap().version, 3);
    // Unknown id / other tenant's id → not found.
    draft.id = Some(Uuid::new_v4());
    assert!(matches!(
        e.save_device(t, &draft, None),
        Err(EntityError::NotFound(_))
    ));
    let t2 = e.create_tenant("T2").unwrap().id;
    draft.id = Some(d.id);
    assert!(matches!(
        e.save_device(t2, &draft, None),
        Err(EntityError::NotFound(_))
    ));
    assert!(e.device(t2, d.id).unwrap().is_none());
    assert!(e.device(t, d.id).unwrap().is_some());
}

#[test]
fn delete_removes_credentials_and_notifies() {
    let (e, t) = setup();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    e.on_device_change(Box::new(move |c| sink.lock().unwrap().push(c)));
    let d = e
        .save_device(
            t,
            &DeviceDraft::named("d"),
            Some(&CredentialsDraft::access_token("T")),
        )
        .unwrap();
    let t2 = e.create_tenant("T2").unwrap().id;
    assert!(matches!(
        e.delete_device(t2, d.id),
        Err(EntityError::NotFound(_))
    ));
    e.delete_device(t, d.id).unwrap();
    assert!(e.device_by_id(d.id).unwrap().is_none());
    assert!(e.device_credentials(d.id).unwrap().is_none());
    assert!(e.device_by_access_token("T").is_none());
    assert!(e.device_auth(d.id).is_none());
    assert_eq!(*seen.lock().unwrap(), [DeviceChange::Deleted(d.id)]);
    // The token is free again.
    e.save_device(
        t,
        &DeviceDraft::named("d"),
        Some(&CredentialsDraft::access_token("T")),
    )
    .unwrap();
}

#[test]
fn credentials_update() {
    let (e, t) = setup();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    e.on_device_change(Box::new(move |c| sink.lock().unwrap().push(c)));
    let d = e
        .save_device(
            t,
            &DeviceDraft::named("d"),
            Some(&CredentialsDraft::access_token("OLD")),
        )
        .unwrap();
    e.save_device(
        t,
        &DeviceDraft::named("other"),
        Some(&CredentialsDraft::access_token("TAKEN")),
    )
    .unwrap();
    let c = e.device_credentials(d.id).unwrap().unwrap();
    let mut draft = CredentialsDraft {
        id: Some(c.id),
        version: Some(1),
        ..CredentialsDraft::access_token("NEW")
    };
    let c2 = e.update_device_credentials(t, d.id, &draft).unwrap();
    assert_eq!(
        (c2.id, c2.version, c2.credentials_id.as_str()),
        (c.id, 2, "NEW")
    );
    assert!(e.device_by_access_token("OLD").is_none());
    assert_eq!(e.device_by_access_token("NEW").unwrap().device_id, d.id);
    assert_eq!(
        *seen.lock().unwrap(),
        [DeviceChange::CredentialsChanged(d.id)]
    );
    // Stale version, taken token, foreign credentials id.
    assert!(matches!(
        e.update_device_credentials(t, d.id, &draft),
        Err(EntityError::VersionConflict(_))
    ));
    draft.version = None;
    draft.credentials_id = Some("TAKEN".into());
    assert!(matches!(
        e.update_device_credentials(t, d.id, &draft),
        Err(EntityError::AlreadyExists(_))
    ));
    draft.credentials_id = Some("NEW".into());
    draft.id = Some(Uuid::new_v4());
    assert!(matches!(
        e.update_device_credentials(t, d.id, &draft),
        Err(EntityError::Invalid(_))
    ));
    // Saving identical credentials bumps the version but does not close sessions.
    draft.id = None;
    assert_eq!(
        e.update_device_credentials(t, d.id, &draft)
            .unwrap()
            .version,
        3
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Switch to MQTT_BASIC: the token stops working.
    let basic = CredentialsDraft::mqtt_basic(Some("cid"), Some("user"), Some("pw"));
    let c3 = e.update_device_credentials(t, d.id, &basic).unwrap();
    assert_eq!(c3.credentials_type, CredentialsType::MqttBasic);
    assert!(e.device_by_access_token("NEW").is_none());
    let t2 = e.create_tenant("T2").unwrap().id;
    assert!(matches!(
        e.update_device_credentials(t2, d.id, &basic),
        Err(EntityError::NotFound(_))
    ));
}

#[test]
fn paging_search_sort_and_filters() {
    let (e, t) = setup();
    for (name, label, ty) in [
        ("meter-1", Some("Kitchen"), "meter"),
        ("meter-2", None, "meter"),
        ("tracker-1", Some("truck METER"), "tracker"),
        ("plc-1", None, "plc"),
    ] {
        let draft = DeviceDraft {
            label: label.map(str::to_string),
            type_name: Some(ty.into()),
            ..DeviceDraft::named(name)
        };
        e.save_device(t, &draft, None).unwrap();
    }
    let all = DeviceFilter::default();
    let page = e.devices(t, &all, &PageQuery::new(3, 0)).unwrap();
    assert_eq!(
        (page.total_elements, page.total_pages, page.has_next),
        (4, 2, true)
    );
    let names: Vec<_> = page.data.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["meter-1", "meter-2", "tracker-1"],
        "default order is creation order"
    );
    let page = e.devices(t, &all, &PageQuery::new(3, 1)).unwrap();
    assert_eq!(page.data.len(), 1);
    assert!(!page.has_next);
    // Text search matches name or label, case-insensitively.
    let page = e
        .devices(t, &all, &PageQuery::new(10, 0).with_text_search("meter"))
        .unwrap();
    assert_eq!(page.total_elements, 3);
    let page = e
        .devices(t, &all, &PageQuery::new(10, 0).with_text_search("KITCH"))
        .unwrap();
    assert_eq!(page.data[0].name, "meter-1");
    let q = PageQuery::new(10, 0).with_sort("name", SortOrder::Desc);
    let names: Vec<_> = e
        .devices(t, &all, &q)
        .unwrap()
        .data
        .into_iter()
        .map(|d| d.name)
        .collect();
    assert_eq!(names, ["tracker-1", "plc-1", "meter-2", "meter-1"]);
    let q = PageQuery::new(10, 0).with_sort("deviceProfileName", SortOrder::Asc);
    let types: Vec<_> = e
        .devices(t, &all, &q)
        .unwrap()
        .data
        .into_iter()
        .map(|d| d.profile_name)
        .collect();
    assert_eq!(types, ["meter", "meter", "plc", "tracker"]);
    let by_type = DeviceFilter {
        profile_name: Some("meter".into()),
        ..DeviceFilter::default()
    };
    assert_eq!(
        e.devices(t, &by_type, &PageQuery::new(10, 0))
            .unwrap()
            .total_elements,
        2
    );
    let plc = e.device_profile_by_name(t, "plc").unwrap().unwrap();
    let by_profile = DeviceFilter {
        profile_id: Some(plc.id),
        ..DeviceFilter::default()
    };
    assert_eq!(
        e.devices(t, &by_profile, &PageQuery::new(10, 0))
            .unwrap()
            .data[0]
            .name,
        "plc-1"
    );
    assert!(matches!(
        e.devices(
            t,
            &all,
            &PageQuery::new(10, 0).with_sort("color", SortOrder::Asc)
        ),
        Err(EntityError::Invalid(_))
    ));
    assert_eq!(e.device_types(t).unwrap(), ["meter", "plc", "tracker"]);
    // Other tenants see nothing.
    let t2 = e.create_tenant("T2").unwrap().id;
    assert_eq!(
        e.devices(t2, &all, &PageQuery::new(10, 0))
            .unwrap()
            .total_elements,
        0
    );
    let m1 = e.device_by_name(t, "meter-1").unwrap().unwrap();
    assert_eq!(
        e.devices_by_ids(t, &[m1.id, Uuid::new_v4()]).unwrap(),
        std::slice::from_ref(&m1)
    );
    assert!(e.devices_by_ids(t2, &[m1.id]).unwrap().is_empty());
}

#[test]
fn cache_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.sqlite3");
    let (device, tenant) = {
        let e = Entities::open(&path).unwrap();
        let t = e.create_tenant("T").unwrap().id;
        let d = e
            .save_device(
                t,
                &DeviceDraft::named("d"),
                Some(&CredentialsDraft::access_token("PERSIST")),
            )
            .unwrap();
        (d.id, t)
    };
    let e = Entities::open(&path).unwrap();
    let auth = e.device_by_access_token("PERSIST").unwrap();
    assert_eq!((auth.device_id, auth.tenant_id), (device, tenant));
}
