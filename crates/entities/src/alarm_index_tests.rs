//! Tests of the in-memory index of active alarms: it survives a restart, and it equals the database's
//! active alarms under random writes.

use rand::{Rng, SeedableRng};

use super::*;
use crate::alarm::tests::{all, Fixture, NOW};
use crate::alarm_query::{AlarmQuery, AlarmSearchStatus, AlarmStatusFilter};
use crate::alarm_transition::AlarmOutcome;
use crate::{AlarmDraft, DeviceDraft, PageQuery};

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
