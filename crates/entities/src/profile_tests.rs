//! Tests of device profiles.

use super::*;
use crate::{DeviceDraft, SortOrder};

fn setup() -> (Entities, Uuid) {
    let e = Entities::open_in_memory().unwrap();
    let t = e.create_tenant("T").unwrap();
    (e, t.id)
}

#[test]
fn create_update_and_version() {
    let (e, t) = setup();
    let alarms =
        json!({"configuration":{"type":"DEFAULT"},"alarms":[{"id":"x","alarmType":"battery low"}]});
    let p = e
        .save_device_profile(
            t,
            &ProfileDraft {
                transport_type: Some("MQTT".into()),
                profile_data: Some(alarms.clone()),
                ..ProfileDraft::named("SMART_METER")
            },
        )
        .unwrap();
    assert_eq!(
        (p.version, p.is_default, p.transport_type.as_str()),
        (1, false, "MQTT")
    );
    assert_eq!(p.profile_data, alarms, "profile data is stored as given");
    let mut draft = ProfileDraft {
        id: Some(p.id),
        version: Some(1),
        description: Some("meters".into()),
        ..ProfileDraft::named("SMART_METER")
    };
    let p2 = e.save_device_profile(t, &draft).unwrap();
    assert_eq!((p2.version, p2.created_time), (2, p.created_time));
    assert_eq!(p2.profile_data, default_profile_data("DEFAULT"));
    // Stale version → conflict; no version → overwrite.
    let err = e.save_device_profile(t, &draft).unwrap_err();
    assert!(matches!(err, EntityError::VersionConflict(_)), "{err}");
    draft.version = None;
    assert_eq!(e.save_device_profile(t, &draft).unwrap().version, 3);
    // Names are unique per tenant.
    let err = e
        .save_device_profile(t, &ProfileDraft::named("default"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Device profile with such name already exists!"
    );
    let err = e
        .save_device_profile(
            t,
            &ProfileDraft {
                transport_type: Some("FTP".into()),
                ..ProfileDraft::named("x")
            },
        )
        .unwrap_err();
    assert!(matches!(err, EntityError::Invalid(_)));
}

#[test]
fn default_switching_and_delete_rules() {
    let (e, t) = setup();
    let first = e.default_device_profile(t).unwrap().unwrap();
    let other = e
        .save_device_profile(t, &ProfileDraft::named("other"))
        .unwrap();
    let err = e
        .save_device_profile(
            t,
            &ProfileDraft {
                is_default: true,
                ..ProfileDraft::named("third")
            },
        )
        .unwrap_err();
    assert!(err.to_string().starts_with("Another default"), "{err}");
    let now_default = e.set_default_device_profile(t, other.id).unwrap();
    assert!(now_default.is_default);
    assert_eq!(now_default.version, 2);
    let old = e.device_profile(first.id).unwrap().unwrap();
    assert!(!old.is_default);
    assert_eq!(old.version, 2);
    assert_eq!(e.default_device_profile(t).unwrap().unwrap().id, other.id);

    let err = e.delete_device_profile(t, other.id).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Deletion of Default Device Profile is prohibited!"
    );
    e.save_device(
        t,
        &DeviceDraft {
            profile_id: Some(first.id),
            ..DeviceDraft::named("d")
        },
        None,
    )
    .unwrap();
    let err = e.delete_device_profile(t, first.id).unwrap_err();
    assert_eq!(
        err.to_string(),
        "The device profile referenced by the devices cannot be deleted!"
    );
    let spare = e
        .save_device_profile(t, &ProfileDraft::named("spare"))
        .unwrap();
    e.delete_device_profile(t, spare.id).unwrap();
    assert!(e.device_profile(spare.id).unwrap().is_none());
    assert!(matches!(
        e.delete_device_profile(t, spare.id),
        Err(EntityError::NotFound(_))
    ));
    // Another tenant's profile is "not found" to this tenant.
    let t2 = e.create_tenant("T2").unwrap();
    assert!(matches!(
        e.set_default_device_profile(t2.id, first.id),
        Err(EntityError::NotFound(_))
    ));
}

#[test]
fn update_keeps_devices_attached() {
    let (e, t) = setup();
    let p = e.default_device_profile(t).unwrap().unwrap();
    let d = e.save_device(t, &DeviceDraft::named("d"), None).unwrap();
    let renamed = ProfileDraft {
        id: Some(p.id),
        is_default: true,
        ..ProfileDraft::named("renamed")
    };
    e.save_device_profile(t, &renamed).unwrap();
    let d = e.device(t, d.id).unwrap().unwrap();
    assert_eq!(
        d.profile_name, "renamed",
        "a device's type follows its profile's name"
    );
}

#[test]
fn paging_search_and_filter() {
    let (e, t) = setup();
    for name in ["alpha", "beta", "Gamma", "delta"] {
        e.save_device_profile(
            t,
            &ProfileDraft {
                transport_type: Some("MQTT".into()),
                ..ProfileDraft::named(name)
            },
        )
        .unwrap();
    }
    let page = e
        .device_profiles(
            t,
            None,
            &PageQuery::new(2, 0).with_sort("name", SortOrder::Asc),
        )
        .unwrap();
    assert_eq!(page.total_elements, 5);
    assert_eq!(page.total_pages, 3);
    assert!(page.has_next);
    let names: Vec<_> = page.data.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["Gamma", "alpha"]);
    let page = e
        .device_profiles(t, None, &PageQuery::new(10, 0).with_text_search("GAM"))
        .unwrap();
    assert_eq!(page.data.len(), 1);
    let page = e
        .device_profiles(t, Some("MQTT"), &PageQuery::new(10, 0))
        .unwrap();
    assert_eq!(page.total_elements, 4);
}
