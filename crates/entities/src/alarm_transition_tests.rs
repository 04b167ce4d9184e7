//! Tests of the evaluator's writes: raise and clear, rule batches and their watermark, and how REST
//! writes change what the evaluator finds.

use serde_json::json;

use super::*;
use crate::alarm::tests::{setup, NOW};

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
