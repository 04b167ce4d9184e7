//! Tests of the alarm store: REST writes, the evaluator's transitions, the in-memory index, queries.

use rand::{Rng, SeedableRng};
use serde_json::json;

use super::*;
use crate::alarm_query::{AlarmQuery, AlarmSearchStatus, AlarmStatusFilter};
use crate::alarm_transition::{AlarmOutcome, AlarmRaise, RuleWrite};
use crate::{DeviceDraft, NewUser, PageQuery, NULL_UUID};

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

use crate::alarm_transition::AlarmWrite;

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

#[test]
fn evaluator_transitions() {
    let f = setup();
    let created = f.raise(f.device, "battery low", AlarmSeverity::Major, NOW);
    assert_eq!(created.outcome, AlarmOutcome::Created);
    let a = created.alarm;
    assert_eq!(
        (a.start_ts, a.end_ts, a.created_time),
        (NOW - 5, NOW - 5, NOW)
    );
    assert_eq!(a.details, json!({"data": format!("MAJOR at {NOW}")}));

    let same = f.raise(f.device, "battery low", AlarmSeverity::Major, NOW + 10);
    assert_eq!(same.outcome, AlarmOutcome::Updated);
    assert_eq!(
        (same.alarm.id, same.alarm.start_ts, same.alarm.end_ts),
        (a.id, NOW - 5, NOW + 10)
    );
    assert_eq!(
        same.alarm.details,
        json!({"data": format!("MAJOR at {}", NOW + 10)})
    );

    let up = f.raise(f.device, "battery low", AlarmSeverity::Critical, NOW + 20);
    assert_eq!(up.outcome, AlarmOutcome::SeverityUpdated);
    assert_eq!(
        (up.alarm.id, up.alarm.severity),
        (a.id, AlarmSeverity::Critical)
    );

    // Never downgraded: nothing is written.
    let down = f.raise(f.device, "battery low", AlarmSeverity::Warning, NOW + 30);
    assert_eq!(down.outcome, AlarmOutcome::Unchanged);
    assert_eq!(down.alarm, up.alarm);
    assert_eq!(f.e.alarm(a.id).unwrap().unwrap(), up.alarm);

    let cleared =
        f.e.clear_active_alarm(
            f.device,
            "battery low",
            Some(json!({"data": "ok"})),
            NOW + 40,
        )
        .unwrap()
        .unwrap();
    assert_eq!(cleared.outcome, AlarmOutcome::Cleared);
    assert_eq!((cleared.alarm.id, cleared.alarm.clear_ts), (a.id, NOW + 40));
    assert_eq!(cleared.alarm.details, json!({"data": "ok"}));
    assert_eq!(
        f.e.clear_active_alarm(f.device, "battery low", None, NOW + 50)
            .unwrap(),
        None
    );

    let again = f.raise(f.device, "battery low", AlarmSeverity::Minor, NOW + 60);
    assert_eq!(again.outcome, AlarmOutcome::Created);
    assert_ne!(again.alarm.id, a.id);

    // A data timestamp of 0 or in the future means now.
    let raise = AlarmRaise {
        device_id: f.device,
        alarm_type: "future",
        severity: AlarmSeverity::Minor,
        details: Some(json!({})),
        data_ts: NOW + 1_000_000,
        propagation: &Propagation {
            to_tenant: true,
            ..Propagation::default()
        },
    };
    let future = f.e.raise_alarm(&raise, NOW).unwrap().alarm;
    assert_eq!((future.start_ts, future.end_ts), (NOW, NOW));
    assert!(future.propagation.to_tenant);
    let missing = AlarmRaise {
        device_id: Uuid::new_v4(),
        ..raise
    };
    assert!(matches!(
        f.e.raise_alarm(&missing, NOW),
        Err(EntityError::NotFound(_))
    ));
}

#[test]
fn rule_batch_writes_in_order_skips_what_is_gone_and_keeps_a_watermark() {
    let f = setup();
    let other = f.new_device("meter-2");
    assert_eq!(f.e.rule_watermark(3).unwrap(), 0);
    let raise = |device, severity, now| RuleWrite::Raise {
        device_id: device,
        alarm_type: "battery low".into(),
        severity,
        details: None,
        data_ts: now - 5,
        propagation: Propagation::default(),
        now_ms: now,
    };
    let update = |device, severity, end_ts| RuleWrite::Update {
        device_id: device,
        alarm_type: "battery low".into(),
        severity,
        details: Some(json!({"data": end_ts})),
        end_ts,
    };
    // Create then update in one batch: the update sees the create.
    let done =
        f.e.write_rule_batch(
            3,
            100,
            &[
                raise(f.device, AlarmSeverity::Major, NOW),
                update(f.device, AlarmSeverity::Critical, NOW + 10),
                update(other, AlarmSeverity::Major, NOW + 10),
                raise(Uuid::new_v4(), AlarmSeverity::Major, NOW),
            ],
        )
        .unwrap();
    let outcomes: Vec<_> = done.iter().map(|w| w.outcome).collect();
    assert_eq!(
        outcomes,
        [AlarmOutcome::Created, AlarmOutcome::SeverityUpdated],
        "the update of a device without an alarm and the raise of a missing device write nothing"
    );
    let active = f.e.active_alarm(f.device, "battery low").unwrap();
    assert_eq!(active.severity, AlarmSeverity::Critical);
    let stored = f.e.alarm(active.id).unwrap().unwrap();
    assert_eq!((stored.start_ts, stored.end_ts), (NOW - 5, NOW + 10));
    assert_eq!(stored.details, json!({"data": NOW + 10}));
    assert!(f.e.active_alarm(other, "battery low").is_none());
    assert_eq!(f.e.rule_watermark(3).unwrap(), 100);

    // A user clears the alarm; a pending update written afterwards must not bring it back.
    f.e.clear_alarm(f.tenant, active.id, None, NOW + 20)
        .unwrap();
    let done =
        f.e.write_rule_batch(
            3,
            90,
            &[update(f.device, AlarmSeverity::Critical, NOW + 30)],
        )
        .unwrap();
    assert!(done.is_empty());
    assert!(f.e.active_alarm(f.device, "battery low").is_none());
    assert_eq!(
        f.e.rule_watermark(3).unwrap(),
        100,
        "the watermark never moves back"
    );

    // Raise and clear in one batch leave no active alarm; other partitions have their own mark.
    let clear = RuleWrite::Clear {
        device_id: f.device,
        alarm_type: "battery low".into(),
        details: None,
        clear_ts: NOW + 50,
    };
    let done =
        f.e.write_rule_batch(
            4,
            7,
            &[raise(f.device, AlarmSeverity::Minor, NOW + 40), clear],
        )
        .unwrap();
    assert_eq!(done.len(), 2);
    assert_eq!(done[1].outcome, AlarmOutcome::Cleared);
    assert_eq!(done[0].alarm.id, done[1].alarm.id);
    assert!(f.e.active_alarm(f.device, "battery low").is_none());
    assert_eq!(
        f.e.alarm(done[1].alarm.id).unwrap().unwrap().clear_ts,
        NOW + 50
    );
    assert_eq!(
        (
            f.e.rule_watermark(3).unwrap(),
            f.e.rule_watermark(4).unwrap()
        ),
        (100, 7)
    );
}

#[test]
fn rest_writes_steer_the_evaluator() {
    let f = setup();
    let a = f
        .raise(f.device, "battery low", AlarmSeverity::Critical, NOW)
        .alarm;
    // An ack via REST only changes the cached flag; the next raise updates the same alarm.
    f.e.ack_alarm(f.tenant, a.id, NOW + 1).unwrap();
    assert!(
        f.e.active_alarm(f.device, "battery low")
            .unwrap()
            .acknowledged
    );
    let w = f.raise(f.device, "battery low", AlarmSeverity::Critical, NOW + 2);
    assert_eq!(
        (w.outcome, w.alarm.id, w.alarm.acknowledged),
        (AlarmOutcome::Updated, a.id, true)
    );
    // A clear via REST makes the next raise create a new alarm.
    f.e.clear_alarm(f.tenant, a.id, None, NOW + 3).unwrap();
    let w = f.raise(f.device, "battery low", AlarmSeverity::Critical, NOW + 4);
    assert_eq!(w.outcome, AlarmOutcome::Created);
    assert_ne!(w.alarm.id, a.id);
    // A delete via REST, too.
    f.e.delete_alarm(f.tenant, w.alarm.id).unwrap();
    assert_eq!(
        f.raise(f.device, "battery low", AlarmSeverity::Minor, NOW + 5)
            .outcome,
        AlarmOutcome::Created
    );
}

#[test]
fn restart_keeps_active_alarms_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.sqlite3");
    let (tenant, device, first) = {
        let e = Entities::open(&path).unwrap();
        let tenant = e.create_tenant("T").unwrap().id;
        let device = e
            .save_device(tenant, &DeviceDraft::named("d"), None)
            .unwrap()
            .id;
        let f = Fixture { e, tenant, device };
        let first = f
            .raise(device, "battery low", AlarmSeverity::Major, NOW)
            .alarm;
        f.e.ack_alarm(tenant, first.id, NOW + 1).unwrap();
        let old = f.raise(device, "door", AlarmSeverity::Minor, NOW).alarm;
        f.e.clear_alarm(tenant, old.id, None, NOW + 2).unwrap();
        (tenant, device, first)
    };
    let e = Entities::open(&path).unwrap();
    assert_eq!(
        e.active_alarm(device, "battery low"),
        Some(ActiveAlarm {
            id: first.id,
            severity: AlarmSeverity::Major,
            acknowledged: true
        })
    );
    assert_eq!(e.active_alarm(device, "door"), None);
    assert_eq!(e.active_alarm_count(), 1);
    let f = Fixture { e, tenant, device };
    let w = f.raise(device, "battery low", AlarmSeverity::Major, NOW + 10);
    assert_eq!((w.outcome, w.alarm.id), (AlarmOutcome::Updated, first.id));
    assert_eq!(
        f.e.alarms(tenant, &AlarmQuery::default(), &all())
            .unwrap()
            .total_elements,
        2
    );
}

/// Random raises, clears, acks, deletes and REST saves on a few devices and types: after every step
/// the in-memory index equals the database's active alarms, and after a reopen too.
#[test]
fn index_matches_database_under_random_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.sqlite3");
    let e = Entities::open(&path).unwrap();
    let tenant = e.create_tenant("T").unwrap().id;
    let devices: Vec<Uuid> = (0..3)
        .map(|i| {
            e.save_device(tenant, &DeviceDraft::named(&format!("d{i}")), None)
                .unwrap()
                .id
        })
        .collect();
    let types = ["a", "b"];
    let f = Fixture {
        e,
        tenant,
        device: devices[0],
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let db_active = |e: &Entities| -> Vec<(Uuid, String, ActiveAlarm)> {
        let page = e
            .alarms(
                tenant,
                &AlarmQuery {
                    status: AlarmStatusFilter::from_search_status(AlarmSearchStatus::Active),
                    ..AlarmQuery::default()
                },
                &PageQuery::new(1000, 0),
            )
            .unwrap();
        page.data
            .into_iter()
            .map(|i| {
                let a = i.alarm;
                (a.originator.id, a.alarm_type.clone(), a.active_entry())
            })
            .collect()
    };
    let check = |e: &Entities| {
        let active = db_active(e);
        assert_eq!(e.active_alarm_count(), active.len());
        for (device, alarm_type, entry) in active {
            assert_eq!(e.active_alarm(device, &alarm_type), Some(entry));
        }
    };
    for step in 0..400 {
        let device = devices[rng.random_range(0..devices.len())];
        let alarm_type = types[rng.random_range(0..types.len())];
        let severity = AlarmSeverity::ALL[rng.random_range(0..5)];
        let now = NOW + step;
        let current = f.e.active_alarm(device, alarm_type);
        match rng.random_range(0..6) {
            0 | 1 => {
                f.raise(device, alarm_type, severity, now);
            }
            2 => {
                f.e.clear_active_alarm(device, alarm_type, None, now)
                    .unwrap();
            }
            3 => {
                if let Some(a) = current {
                    let _ = f.e.ack_alarm(tenant, a.id, now);
                }
            }
            4 => {
                if let Some(a) = current {
                    f.e.delete_alarm(tenant, a.id).unwrap();
                }
            }
            _ => {
                f.e.save_alarm(tenant, &AlarmDraft::new(device, alarm_type, severity), now)
                    .unwrap();
            }
        }
        check(&f.e);
    }
    assert!(f.e.active_alarm_count() > 0);
    let before = db_active(&f.e).len();
    drop(f);
    let e = Entities::open(&path).unwrap();
    assert_eq!(e.active_alarm_count(), before);
    check(&e);
}
