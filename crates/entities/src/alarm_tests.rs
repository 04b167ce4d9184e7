//! Tests of the alarm entity and of the REST writes (`alarm_save`), and the fixture the other alarm
//! tests share (those of `alarm_transition`, `alarm_index` and `alarm_query`).

use serde_json::json;

use super::*;
use crate::alarm_query::AlarmQuery;
use crate::alarm_transition::{AlarmRaise, AlarmWrite};
use crate::{DeviceDraft, Entities, EntityError, NewUser, PageQuery, NULL_UUID};

pub(crate) const NOW: i64 = 1_700_000_000_000;

pub(crate) struct Fixture {
    pub(crate) e: Entities,
    pub(crate) tenant: Uuid,
    pub(crate) device: Uuid,
}

pub(crate) fn setup() -> Fixture {
    let e = Entities::open_in_memory().unwrap();
    let tenant = e.create_tenant("T").unwrap().id;
    let device = e
        .save_device(
            tenant,
            &DeviceDraft {
                label: Some("Boiler room".into()),
                ..DeviceDraft::named("meter-1")
            },
            None,
        )
        .unwrap()
        .id;
    Fixture { e, tenant, device }
}

impl Fixture {
    pub(crate) fn new_device(&self, name: &str) -> Uuid {
        self.e
            .save_device(self.tenant, &DeviceDraft::named(name), None)
            .unwrap()
            .id
    }

    pub(crate) fn save(&self, alarm_type: &str, severity: AlarmSeverity, now: i64) -> Alarm {
        self.e
            .save_alarm(
                self.tenant,
                &AlarmDraft::new(self.device, alarm_type, severity),
                now,
            )
            .unwrap()
    }

    pub(crate) fn raise(
        &self,
        device: Uuid,
        alarm_type: &str,
        severity: AlarmSeverity,
        now: i64,
    ) -> AlarmWrite {
        self.e
            .raise_alarm(
                &AlarmRaise {
                    device_id: device,
                    alarm_type,
                    severity,
                    details: Some(json!({"data": format!("{} at {now}", severity.as_str())})),
                    data_ts: now - 5,
                    propagation: &Propagation::default(),
                },
                now,
            )
            .unwrap()
    }

    pub(crate) fn page(&self, query: &AlarmQuery, page: &PageQuery) -> Vec<AlarmInfo> {
        self.e.alarms(self.tenant, query, page).unwrap().data
    }
}

pub(crate) fn types_of(page: &[AlarmInfo]) -> Vec<&str> {
    page.iter().map(|a| a.alarm.alarm_type.as_str()).collect()
}

pub(crate) fn all() -> PageQuery {
    PageQuery::new(100, 0)
}

#[test]
fn severity_order_and_names() {
    use AlarmSeverity::*;
    assert!(Critical.is_above(Major) && Major.is_above(Minor) && Minor.is_above(Warning));
    assert!(Warning.is_above(Indeterminate));
    assert!(!Major.is_above(Major) && !Minor.is_above(Critical));
    assert_eq!([Minor, Critical, Warning].into_iter().min(), Some(Critical));
    for s in AlarmSeverity::ALL {
        assert_eq!(AlarmSeverity::parse(s.as_str()), Some(s));
    }
    assert_eq!(AlarmSeverity::parse("critical"), None);
    assert_eq!(AlarmStatus::of(false, true).as_str(), "ACTIVE_ACK");
    assert_eq!(AlarmStatus::of(true, false).as_str(), "CLEARED_UNACK");
    for s in AlarmStatus::ALL {
        assert_eq!(AlarmStatus::parse(s.as_str()), Some(s));
        assert_eq!(AlarmStatus::of(s.is_cleared(), s.is_acknowledged()), s);
    }
}

#[test]
fn create_defaults_times_and_owner() {
    let f = setup();
    let a = f.save("battery low", AlarmSeverity::Critical, NOW);
    assert_eq!(
        (
            a.created_time,
            a.start_ts,
            a.end_ts,
            a.ack_ts,
            a.clear_ts,
            a.assign_ts
        ),
        (NOW, NOW, NOW, 0, 0, 0)
    );
    assert_eq!((a.tenant_id, a.customer_id), (f.tenant, NULL_UUID));
    assert_eq!(a.originator, Originator::device(f.device));
    assert_eq!(a.status(), AlarmStatus::ActiveUnack);
    assert_eq!(a.details, Value::Null);
    assert_eq!(f.e.alarm(a.id).unwrap(), Some(a.clone()));
    assert_eq!(
        f.e.active_alarm(f.device, "battery low"),
        Some(ActiveAlarm {
            id: a.id,
            severity: AlarmSeverity::Critical,
            acknowledged: false
        })
    );
    // endTs 0 → startTs; a given start and end are kept.
    let mut draft = AlarmDraft::new(f.device, "door open", AlarmSeverity::Minor);
    draft.start_ts = NOW - 100;
    let b = f.e.save_alarm(f.tenant, &draft, NOW).unwrap();
    assert_eq!((b.start_ts, b.end_ts), (NOW - 100, NOW - 100));
    draft.id = Some(b.id);
    draft.end_ts = NOW - 50;
    let b = f.e.save_alarm(f.tenant, &draft, NOW).unwrap();
    assert_eq!((b.start_ts, b.end_ts), (NOW - 100, NOW - 50));
}

#[test]
fn validation_errors() {
    let f = setup();
    let check = |draft: &AlarmDraft, message: &str| {
        let err = f.e.save_alarm(f.tenant, draft, NOW).unwrap_err();
        assert_eq!(err.to_string(), message);
    };
    let good = AlarmDraft::new(f.device, "t", AlarmSeverity::Major);
    check(
        &AlarmDraft {
            alarm_type: " ".into(),
            ..good.clone()
        },
        "Alarm type should be specified!",
    );
    check(
        &AlarmDraft {
            severity: None,
            ..good.clone()
        },
        "Alarm severity should be specified!",
    );
    check(
        &AlarmDraft {
            start_ts: 10,
            end_ts: 5,
            ..good.clone()
        },
        "Alarm start ts can't be greater then alarm end ts!",
    );
    let missing = Uuid::new_v4();
    check(
        &AlarmDraft::new(missing, "t", AlarmSeverity::Major),
        &format!("Device with id [{missing}] is not found"),
    );
    let err =
        f.e.save_alarm(
            f.tenant,
            &AlarmDraft {
                originator: Originator {
                    entity_type: "ASSET".into(),
                    id: Uuid::new_v4(),
                },
                ..good.clone()
            },
            NOW,
        )
        .unwrap_err();
    assert!(matches!(err, EntityError::Invalid(_)), "{err}");
    // Another tenant's device is not found from this tenant.
    let other = f.e.create_tenant("Other").unwrap().id;
    let err = f.e.save_alarm(other, &good, NOW).unwrap_err();
    assert!(matches!(err, EntityError::NotFound(_)), "{err}");
    assert_eq!(f.e.active_alarm_count(), 0, "nothing was written");
}

#[test]
fn create_when_active_exists_updates_it() {
    let f = setup();
    let a = f.save("battery low", AlarmSeverity::Critical, NOW);
    let mut draft = AlarmDraft::new(f.device, "battery low", AlarmSeverity::Warning);
    draft.details = json!({"data": "battery = 15"});
    let b = f.e.save_alarm(f.tenant, &draft, NOW + 1000).unwrap();
    assert_eq!(b.id, a.id, "the active alarm is updated, not duplicated");
    assert_eq!(
        (b.severity, b.start_ts, b.end_ts, b.created_time),
        (AlarmSeverity::Warning, NOW, NOW + 1000, NOW)
    );
    assert_eq!(b.details, json!({"data": "battery = 15"}));
    assert_eq!(
        f.e.active_alarm(f.device, "battery low").unwrap().severity,
        AlarmSeverity::Warning
    );
    assert_eq!(
        f.e.alarms(f.tenant, &AlarmQuery::default(), &all())
            .unwrap()
            .total_elements,
        1
    );
    // Another type is another alarm.
    let c = f.save("door open", AlarmSeverity::Minor, NOW);
    assert_ne!(c.id, a.id);
    assert_eq!(f.e.active_alarm_count(), 2);
}

#[test]
fn ack_clear_and_their_errors() {
    let f = setup();
    let a = f.save("battery low", AlarmSeverity::Critical, NOW);
    let acked = f.e.ack_alarm(f.tenant, a.id, NOW + 1).unwrap();
    assert_eq!((acked.acknowledged, acked.ack_ts), (true, NOW + 1));
    assert_eq!(acked.status(), AlarmStatus::ActiveAck);
    assert!(
        f.e.active_alarm(f.device, "battery low")
            .unwrap()
            .acknowledged
    );
    let err = f.e.ack_alarm(f.tenant, a.id, NOW + 2).unwrap_err();
    assert_eq!(err.to_string(), "Alarm was already acknowledged!");
    assert!(matches!(err, EntityError::Invalid(_)));

    let cleared = f.e.clear_alarm(f.tenant, a.id, None, NOW + 3).unwrap();
    assert_eq!((cleared.cleared, cleared.clear_ts), (true, NOW + 3));
    assert_eq!(cleared.status(), AlarmStatus::ClearedAck);
    assert_eq!(f.e.active_alarm(f.device, "battery low"), None);
    let err = f.e.clear_alarm(f.tenant, a.id, None, NOW + 4).unwrap_err();
    assert_eq!(err.to_string(), "Alarm was already cleared!");

    // After a clear, creating the same type makes a new alarm; the cleared one stays.
    let b = f.save("battery low", AlarmSeverity::Major, NOW + 5);
    assert_ne!(b.id, a.id);
    assert_eq!(f.e.active_alarm(f.device, "battery low").unwrap().id, b.id);
    assert!(f.e.alarm(a.id).unwrap().unwrap().cleared);
    // A cleared alarm may still be acknowledged (ThingsBoard allows it).
    let c = f.save("door", AlarmSeverity::Minor, NOW);
    f.e.clear_alarm(f.tenant, c.id, Some(json!({"by": "hand"})), NOW + 6)
        .unwrap();
    let c = f.e.ack_alarm(f.tenant, c.id, NOW + 7).unwrap();
    assert_eq!(c.status(), AlarmStatus::ClearedAck);
    assert_eq!(c.details, json!({"by": "hand"}));

    // Other tenants and unknown ids are not found.
    let other = f.e.create_tenant("Other").unwrap().id;
    for result in [
        f.e.ack_alarm(other, b.id, NOW),
        f.e.clear_alarm(other, b.id, None, NOW),
        f.e.ack_alarm(f.tenant, Uuid::new_v4(), NOW),
        f.e.delete_alarm(other, b.id),
    ] {
        assert!(
            matches!(result, Err(EntityError::NotFound(_))),
            "{result:?}"
        );
    }
    assert!(!f.e.alarm(b.id).unwrap().unwrap().acknowledged);
}

#[test]
fn assign_unassign_and_info() {
    let f = setup();
    let user =
        f.e.create_user(&NewUser {
            first_name: Some("Ada".into()),
            last_name: Some("Lovelace".into()),
            ..NewUser::tenant_admin(f.tenant, "ada@example.com", "pw")
        })
        .unwrap();
    let a = f.save("battery low", AlarmSeverity::Critical, NOW);
    let info = f.e.alarm_info(a.id).unwrap().unwrap();
    assert_eq!(info.assignee, None);
    assert_eq!(
        (
            info.originator_name.as_deref(),
            info.originator_label.as_deref()
        ),
        (Some("meter-1"), Some("Boiler room"))
    );
    assert_eq!(info.originator_display_name(), Some("Boiler room"));

    let assigned = f.e.assign_alarm(f.tenant, a.id, user.id, NOW + 1).unwrap();
    assert_eq!(
        (assigned.assignee_id, assigned.assign_ts),
        (Some(user.id), NOW + 1)
    );
    let err =
        f.e.assign_alarm(f.tenant, a.id, user.id, NOW + 2)
            .unwrap_err();
    assert_eq!(err.to_string(), "Alarm was already assigned to this user!");
    let info = f.e.alarm_info(a.id).unwrap().unwrap();
    assert_eq!(
        info.assignee,
        Some(AlarmAssignee {
            id: user.id,
            first_name: Some("Ada".into()),
            last_name: Some("Lovelace".into()),
            email: "ada@example.com".into()
        })
    );
    let unassigned = f.e.unassign_alarm(f.tenant, a.id, NOW + 3).unwrap();
    assert_eq!(
        (unassigned.assignee_id, unassigned.assign_ts),
        (None, NOW + 3)
    );
    let err = f.e.unassign_alarm(f.tenant, a.id, NOW + 4).unwrap_err();
    assert_eq!(err.to_string(), "Alarm was already unassigned!");

    // Saving with an assignee assigns; saving without one unassigns (ThingsBoard's save).
    let mut draft = AlarmDraft::new(f.device, "battery low", AlarmSeverity::Critical);
    draft.assignee_id = Some(user.id);
    assert_eq!(
        f.e.save_alarm(f.tenant, &draft, NOW + 5).unwrap().assign_ts,
        NOW + 5
    );
    draft.assignee_id = None;
    let saved = f.e.save_alarm(f.tenant, &draft, NOW + 6).unwrap();
    assert_eq!((saved.assignee_id, saved.assign_ts), (None, NOW + 6));
    // A device without a label shows its name.
    let plain = f.new_device("plain");
    let b =
        f.e.save_alarm(
            f.tenant,
            &AlarmDraft::new(plain, "x", AlarmSeverity::Minor),
            NOW,
        )
        .unwrap();
    assert_eq!(
        f.e.alarm_info(b.id)
            .unwrap()
            .unwrap()
            .originator_display_name(),
        Some("plain")
    );
}

#[test]
fn save_flags_and_update_by_id() {
    let f = setup();
    let mut draft = AlarmDraft::new(f.device, "battery low", AlarmSeverity::Major);
    draft.acknowledged = true;
    draft.ack_ts = NOW - 7;
    let a = f.e.save_alarm(f.tenant, &draft, NOW).unwrap();
    assert_eq!((a.acknowledged, a.ack_ts), (true, NOW - 7));
    draft.cleared = true;
    let a = f.e.save_alarm(f.tenant, &draft, NOW + 1).unwrap();
    assert_eq!((a.cleared, a.clear_ts), (true, NOW + 1));
    assert_eq!(f.e.active_alarm(f.device, "battery low"), None);

    // Update by id: severity, times, details, propagation change; type and originator do not.
    let b = f.save("door", AlarmSeverity::Minor, NOW);
    let other_device = f.new_device("other");
    let update = AlarmDraft {
        id: Some(b.id),
        alarm_type: "renamed".into(),
        originator: Originator::device(other_device),
        details: json!({"k": 1}),
        propagation: Propagation {
            propagate: true,
            relation_types: vec!["Contains".into()],
            ..Propagation::default()
        },
        ..AlarmDraft::new(f.device, "door", AlarmSeverity::Critical)
    };
    let b2 = f.e.save_alarm(f.tenant, &update, NOW + 10).unwrap();
    assert_eq!((b2.id, b2.alarm_type.as_str()), (b.id, "door"));
    assert_eq!(b2.originator.id, f.device);
    assert_eq!(
        (b2.severity, b2.start_ts),
        (AlarmSeverity::Critical, NOW + 10)
    );
    assert_eq!(b2.propagation.relation_types, ["Contains"]);
    assert_eq!(f.e.alarm(b.id).unwrap().unwrap(), b2);
    assert_eq!(
        f.e.active_alarm(f.device, "door").unwrap().severity,
        AlarmSeverity::Critical
    );
    let other = f.e.create_tenant("Other").unwrap().id;
    assert!(matches!(
        f.e.save_alarm(other, &update, NOW),
        Err(EntityError::NotFound(_))
    ));
    let missing = AlarmDraft {
        id: Some(Uuid::new_v4()),
        ..update
    };
    assert!(matches!(
        f.e.save_alarm(f.tenant, &missing, NOW),
        Err(EntityError::NotFound(_))
    ));
}

#[test]
fn delete_alarm_and_device() {
    let f = setup();
    let a = f.save("battery low", AlarmSeverity::Critical, NOW);
    assert_eq!(f.e.delete_alarm(f.tenant, a.id).unwrap().id, a.id);
    assert_eq!(f.e.alarm(a.id).unwrap(), None);
    assert_eq!(f.e.active_alarm(f.device, "battery low"), None);
    assert!(matches!(
        f.e.delete_alarm(f.tenant, a.id),
        Err(EntityError::NotFound(_))
    ));

    let b = f.save("battery low", AlarmSeverity::Critical, NOW);
    let c = f.save("door", AlarmSeverity::Minor, NOW);
    f.e.clear_alarm(f.tenant, c.id, None, NOW).unwrap();
    let keep = f.new_device("keep");
    let kept = f
        .raise(keep, "battery low", AlarmSeverity::Major, NOW)
        .alarm;
    f.e.delete_device(f.tenant, f.device).unwrap();
    assert_eq!(f.e.alarm(b.id).unwrap(), None);
    assert_eq!(f.e.alarm(c.id).unwrap(), None, "cleared alarms go too");
    assert_eq!(f.e.active_alarm(f.device, "battery low"), None);
    assert_eq!(f.e.active_alarm(keep, "battery low").unwrap().id, kept.id);
    assert_eq!(f.e.active_alarm_count(), 1);
}
