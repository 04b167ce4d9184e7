//! Tests of the alarm queries: every filter, sort property, paging, highest severity, types.

use super::*;
use crate::alarm::tests::{all, setup, types_of, Fixture, NOW};
use crate::alarm::{AlarmDraft, Propagation};
use crate::{NewUser, SortOrder};

/// Five alarms on two devices, one per status, severity and created time, plus a foreign tenant's:
///
/// | alarm | device | type | severity | created | status |
/// |---|---|---|---|---|---|
/// | 0 | A | battery low | CRITICAL | NOW | ACTIVE_UNACK |
/// | 1 | A | door open | MINOR | +10 | ACTIVE_ACK |
/// | 2 | A | overheat | MAJOR | +20 | CLEARED_UNACK |
/// | 3 | B | battery low | WARNING | +30 | CLEARED_ACK, assigned |
/// | 4 | B | pressure | INDETERMINATE | +40 | ACTIVE_UNACK, propagated to the tenant |
struct Data {
    f: Fixture,
    b: Uuid,
    ids: Vec<Uuid>,
    user: Uuid,
    other_tenant: Uuid,
}

fn data() -> Data {
    let f = setup();
    let b = f.new_device("meter-2");
    let user =
        f.e.create_user(&NewUser::tenant_admin(f.tenant, "u@example.com", "pw"))
            .unwrap()
            .id;
    let spec = [
        (f.device, "battery low", AlarmSeverity::Critical),
        (f.device, "door open", AlarmSeverity::Minor),
        (f.device, "overheat", AlarmSeverity::Major),
        (b, "battery low", AlarmSeverity::Warning),
        (b, "pressure", AlarmSeverity::Indeterminate),
    ];
    let mut ids = Vec::new();
    for (i, (device, alarm_type, severity)) in spec.into_iter().enumerate() {
        let mut draft = AlarmDraft::new(device, alarm_type, severity);
        draft.propagation = Propagation {
            to_tenant: i == 4,
            ..Propagation::default()
        };
        let now = NOW + 10 * i as i64;
        ids.push(f.e.save_alarm(f.tenant, &draft, now).unwrap().id);
    }
    f.e.ack_alarm(f.tenant, ids[1], NOW + 100).unwrap();
    f.e.clear_alarm(f.tenant, ids[2], None, NOW + 100).unwrap();
    f.e.ack_alarm(f.tenant, ids[3], NOW + 100).unwrap();
    f.e.clear_alarm(f.tenant, ids[3], None, NOW + 100).unwrap();
    f.e.assign_alarm(f.tenant, ids[3], user, NOW + 100).unwrap();
    let other_tenant = f.e.create_tenant("Other").unwrap().id;
    let foreign =
        f.e.save_device(other_tenant, &crate::DeviceDraft::named("meter-1"), None)
            .unwrap()
            .id;
    f.e.save_alarm(
        other_tenant,
        &AlarmDraft::new(foreign, "foreign type", AlarmSeverity::Critical),
        NOW,
    )
    .unwrap();
    Data {
        f,
        b,
        ids,
        user,
        other_tenant,
    }
}

impl Data {
    /// The indexes (0..5) of the alarms a query returns, in order.
    fn which(&self, query: &AlarmQuery, page: &PageQuery) -> Vec<usize> {
        self.f
            .page(query, page)
            .iter()
            .map(|info| self.ids.iter().position(|id| *id == info.alarm.id).unwrap())
            .collect()
    }

    fn with_status(&self, status: AlarmStatusFilter) -> Vec<usize> {
        self.which(
            &AlarmQuery {
                status,
                ..AlarmQuery::default()
            },
            &all(),
        )
    }

    fn sorted(&self, property: &str, order: SortOrder) -> Vec<usize> {
        self.which(&AlarmQuery::default(), &all().with_sort(property, order))
    }
}

#[test]
fn tenant_wide_and_by_originator() {
    let d = data();
    assert_eq!(d.which(&AlarmQuery::default(), &all()), [0, 1, 2, 3, 4]);
    let of = |id| AlarmQuery {
        originator: Some(Originator::device(id)),
        ..AlarmQuery::default()
    };
    assert_eq!(d.which(&of(d.f.device), &all()), [0, 1, 2]);
    assert_eq!(d.which(&of(d.b), &all()), [3, 4]);
    // A TENANT originator: the alarms propagated to the tenant.
    let tenant = AlarmQuery {
        originator: Some(Originator {
            entity_type: "TENANT".into(),
            id: d.f.tenant,
        }),
        ..AlarmQuery::default()
    };
    assert_eq!(d.which(&tenant, &all()), [4]);
    // The other tenant sees only its own alarm, and none of this tenant's device.
    let other =
        d.f.e
            .alarms(d.other_tenant, &AlarmQuery::default(), &all())
            .unwrap();
    assert_eq!(types_of(&other.data), ["foreign type"]);
    let other =
        d.f.e
            .alarms(d.other_tenant, &of(d.f.device), &all())
            .unwrap();
    assert_eq!(other.total_elements, 0);
}

#[test]
fn search_status_and_status() {
    let d = data();
    let search = |s| d.with_status(AlarmStatusFilter::from_search_status(s));
    assert_eq!(search(AlarmSearchStatus::Any), [0, 1, 2, 3, 4]);
    assert_eq!(search(AlarmSearchStatus::Active), [0, 1, 4]);
    assert_eq!(search(AlarmSearchStatus::Cleared), [2, 3]);
    assert_eq!(search(AlarmSearchStatus::Ack), [1, 3]);
    assert_eq!(search(AlarmSearchStatus::Unack), [0, 2, 4]);
    let status = |s| d.with_status(AlarmStatusFilter::from_status(s));
    assert_eq!(status(AlarmStatus::ActiveUnack), [0, 4]);
    assert_eq!(status(AlarmStatus::ActiveAck), [1]);
    assert_eq!(status(AlarmStatus::ClearedUnack), [2]);
    assert_eq!(status(AlarmStatus::ClearedAck), [3]);
    for s in AlarmSearchStatus::ALL {
        assert_eq!(AlarmSearchStatus::parse(s.as_str()), Some(s));
    }

    let err = AlarmStatusFilter::from_params(
        Some(AlarmSearchStatus::Active),
        Some(AlarmStatus::ActiveAck),
    )
    .unwrap_err();
    assert!(matches!(err, EntityError::Invalid(_)));
    assert_eq!(
        err.to_string(),
        "Invalid alarms search query: Both parameters 'searchStatus' and 'status' can't be specified at the same time!"
    );
    assert_eq!(
        AlarmStatusFilter::from_params(None, None).unwrap(),
        AlarmStatusFilter::ANY
    );
    assert_eq!(
        AlarmStatusFilter::from_params(None, Some(AlarmStatus::ClearedAck)).unwrap(),
        AlarmStatusFilter {
            cleared: Some(true),
            acknowledged: Some(true)
        }
    );
}

#[test]
fn v2_status_severity_and_type_lists() {
    use AlarmSearchStatus::*;
    let d = data();
    let list = |l: &[AlarmSearchStatus]| d.with_status(AlarmStatusFilter::from_list(l));
    assert_eq!(list(&[Active, Unack]), [0, 4]);
    assert_eq!(list(&[Cleared, Ack]), [3]);
    assert_eq!(list(&[Active, Cleared]), [0, 1, 2, 3, 4], "cancel out");
    assert_eq!(list(&[Any, Ack]), [0, 1, 2, 3, 4], "ANY wins");
    assert_eq!(list(&[]), [0, 1, 2, 3, 4]);
    let q = AlarmQuery {
        severities: vec![AlarmSeverity::Critical, AlarmSeverity::Major],
        ..AlarmQuery::default()
    };
    assert_eq!(d.which(&q, &all()), [0, 2]);
    let q = AlarmQuery {
        types: vec!["battery low".into(), "nope".into()],
        ..AlarmQuery::default()
    };
    assert_eq!(d.which(&q, &all()), [0, 3]);
    let q = AlarmQuery {
        types: vec!["battery low".into()],
        status: AlarmStatusFilter::from_list(&[Active]),
        originator: Some(Originator::device(d.f.device)),
        ..AlarmQuery::default()
    };
    assert_eq!(d.which(&q, &all()), [0], "filters combine");
}

#[test]
fn assignee_text_and_time_range() {
    let d = data();
    let q = AlarmQuery {
        assignee_id: Some(d.user),
        ..AlarmQuery::default()
    };
    assert_eq!(d.which(&q, &all()), [3]);
    let text = |t: &str| d.which(&AlarmQuery::default(), &all().with_text_search(t));
    assert_eq!(text("BATTERY"), [0, 3], "type, case-insensitive");
    assert_eq!(text("minor"), [1], "severity");
    assert_eq!(text("cleared_a"), [3], "status");
    assert_eq!(text(""), [0, 1, 2, 3, 4]);
    let q = AlarmQuery {
        start_time: Some(NOW + 10),
        end_time: Some(NOW + 30),
        ..AlarmQuery::default()
    };
    assert_eq!(
        d.which(&q, &all()),
        [1, 2, 3],
        "inclusive bounds on createdTime"
    );
    let q = AlarmQuery {
        start_time: Some(NOW + 35),
        ..AlarmQuery::default()
    };
    assert_eq!(d.which(&q, &all()), [4]);
}

#[test]
fn sort_properties_and_paging() {
    use SortOrder::*;
    let d = data();
    assert_eq!(d.sorted("createdTime", Desc), [4, 3, 2, 1, 0]);
    assert_eq!(d.sorted("startTs", Asc), [0, 1, 2, 3, 4]);
    assert_eq!(d.sorted("endTs", Desc), [4, 3, 2, 1, 0]);
    assert_eq!(d.sorted("severity", Asc), [0, 2, 1, 3, 4], "CRITICAL first");
    assert_eq!(d.sorted("severity", Desc), [4, 3, 1, 2, 0]);
    assert_eq!(d.sorted("type", Asc), [0, 3, 1, 2, 4]);
    assert_eq!(d.sorted("status", Asc), [1, 0, 4, 3, 2]);
    assert_eq!(d.sorted("ackTs", Desc)[..2], [3, 1]);
    assert_eq!(d.sorted("clearTs", Desc)[..2], [3, 2]);
    let err =
        d.f.e
            .alarms(
                d.f.tenant,
                &AlarmQuery::default(),
                &all().with_sort("name", Asc),
            )
            .unwrap_err();
    assert!(matches!(err, EntityError::Invalid(_)), "{err}");

    let page =
        d.f.e
            .alarms(d.f.tenant, &AlarmQuery::default(), &PageQuery::new(2, 1))
            .unwrap();
    assert_eq!(
        (page.total_elements, page.total_pages, page.has_next),
        (5, 3, true)
    );
    assert_eq!(
        d.which(&AlarmQuery::default(), &PageQuery::new(2, 1)),
        [2, 3]
    );
    assert_eq!(d.which(&AlarmQuery::default(), &PageQuery::new(2, 2)), [4]);
    assert!(d
        .which(&AlarmQuery::default(), &PageQuery::new(2, 3))
        .is_empty());
}

#[test]
fn infos_carry_originator_and_assignee() {
    let d = data();
    let page = d.f.page(&AlarmQuery::default(), &all());
    assert_eq!(page[0].originator_name.as_deref(), Some("meter-1"));
    assert_eq!(page[0].originator_display_name(), Some("Boiler room"));
    assert_eq!(page[3].originator_name.as_deref(), Some("meter-2"));
    assert_eq!(
        page[3].assignee.as_ref().map(|a| a.email.as_str()),
        Some("u@example.com")
    );
    assert_eq!(page[0].assignee, None);
    assert_eq!(page[0].alarm.details, serde_json::Value::Null);
}

#[test]
fn highest_severity() {
    let d = data();
    let highest = |device, status, assignee| {
        d.f.e
            .highest_alarm_severity(d.f.tenant, &Originator::device(device), status, assignee)
            .unwrap()
    };
    let search = AlarmStatusFilter::from_search_status;
    let a = d.f.device;
    assert_eq!(
        highest(a, AlarmStatusFilter::ANY, None),
        Some(AlarmSeverity::Critical)
    );
    assert_eq!(
        highest(a, search(AlarmSearchStatus::Cleared), None),
        Some(AlarmSeverity::Major)
    );
    assert_eq!(
        highest(
            a,
            AlarmStatusFilter::from_status(AlarmStatus::ActiveAck),
            None
        ),
        Some(AlarmSeverity::Minor)
    );
    assert_eq!(
        highest(d.b, search(AlarmSearchStatus::Active), None),
        Some(AlarmSeverity::Indeterminate)
    );
    assert_eq!(
        highest(d.b, AlarmStatusFilter::ANY, Some(d.user)),
        Some(AlarmSeverity::Warning)
    );
    assert_eq!(highest(a, AlarmStatusFilter::ANY, Some(d.user)), None);
    assert_eq!(
        highest(d.f.new_device("quiet"), AlarmStatusFilter::ANY, None),
        None
    );
    // Another tenant never sees this tenant's alarms.
    let foreign =
        d.f.e
            .highest_alarm_severity(
                d.other_tenant,
                &Originator::device(a),
                AlarmStatusFilter::ANY,
                None,
            )
            .unwrap();
    assert_eq!(foreign, None);
}

#[test]
fn alarm_types_paged_sorted_searched() {
    let d = data();
    let types = |page: &PageQuery| d.f.e.alarm_types(d.f.tenant, page).unwrap();
    assert_eq!(
        types(&all()).data,
        ["battery low", "door open", "overheat", "pressure"]
    );
    let p = types(&PageQuery::new(3, 1));
    assert_eq!(
        (
            p.data.as_slice(),
            p.total_elements,
            p.total_pages,
            p.has_next
        ),
        (&["pressure".to_string()][..], 4, 2, false)
    );
    assert_eq!(
        types(&all().with_sort("ignored", SortOrder::Desc)).data,
        ["pressure", "overheat", "door open", "battery low"]
    );
    assert_eq!(types(&all().with_text_search("PRE")).data, ["pressure"]);
    assert_eq!(
        d.f.e.alarm_types(d.other_tenant, &all()).unwrap().data,
        ["foreign type"]
    );
    // Deleting the last alarm of a type removes the type.
    d.f.e.delete_alarm(d.f.tenant, d.ids[4]).unwrap();
    assert_eq!(types(&all()).total_elements, 3);
}
