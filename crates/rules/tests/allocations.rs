//! The hot path is allocation-free: the server calls `evaluate` for every telemetry record of every
//! device whose profile has alarms. Counts heap allocations per thread around single calls with
//! performance-tests' "battery low" profile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, TsRecord, Value};
use fleetwire_rules::{
    evaluate, ActiveAlarm, DeviceState, EntityField, Environment, Input, ProfileAlarms, Severity,
    Transition,
};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let result = f();
    (ALLOCATIONS.with(Cell::get) - before, result)
}

struct Env {
    alarm: Option<ActiveAlarm>,
}

impl Environment for Env {
    fn entity_field(&self, _: EntityField) -> Option<Value> {
        None
    }
    fn latest_telemetry(&self, _: &str) -> Option<Value> {
        None
    }
    fn device_attribute(&self, _: AttributeScope, _: &str) -> Option<Value> {
        None
    }
    fn customer_attribute(&self, _: &str) -> Option<Value> {
        None
    }
    fn tenant_attribute(&self, _: &str) -> Option<Value> {
        None
    }
    fn current_alarm(&self, _: &str) -> Option<ActiveAlarm> {
        self.alarm
    }
}

fn battery_low() -> ProfileAlarms {
    let text = include_str!("scenarios/battery_low.json");
    let scenario: serde_json::Value = serde_json::from_str(text).expect("scenario JSON");
    ProfileAlarms::parse(&scenario["alarms"]).expect("battery low parses")
}

fn record(ts: i64, kvs: &[(&str, Value)]) -> TsRecord {
    TsRecord {
        ts,
        kvs: kvs
            .iter()
            .map(|(k, v)| Kv {
                key: (*k).to_owned(),
                value: v.clone(),
            })
            .collect(),
    }
}

#[test]
fn battery_low_hot_path_does_not_allocate() {
    let rules = battery_low();
    let mut state = DeviceState::default();
    let mut env = Env { alarm: None };
    let smart_meter = |ts: i64, battery: i64| {
        [record(
            ts,
            &[
                ("pulseCounter", Value::Long(ts)),
                ("leakage", Value::Bool(false)),
                ("batteryLevel", Value::Long(battery)),
            ],
        )]
    };

    // The first relevant input seeds the state (allocates its vectors once).
    let first = smart_meter(1_000, 90);
    let out = evaluate(&rules, &mut state, &env, 1_000, Input::Telemetry(&first));
    assert!(out.is_empty());
    assert!(state.is_seeded());

    let unrelated = [record(
        2_000,
        &[
            ("pulseCounter", Value::Long(7)),
            ("leakage", Value::Bool(true)),
        ],
    )];
    let (count, out) = allocations_during(|| {
        evaluate(
            &rules,
            &mut state,
            &env,
            2_000,
            Input::Telemetry(&unrelated),
        )
    });
    assert!(out.is_empty());
    assert_eq!(count, 0, "telemetry without referenced keys");

    let healthy = smart_meter(3_000, 86);
    let (count, out) = allocations_during(|| {
        evaluate(&rules, &mut state, &env, 3_000, Input::Telemetry(&healthy))
    });
    assert!(out.is_empty());
    assert_eq!(count, 0, "battery above the threshold, no alarm");

    let kvs = [Kv {
        key: "firmware".into(),
        value: Value::Str("1.2".into()),
    }];
    let (count, out) = allocations_during(|| {
        evaluate(
            &rules,
            &mut state,
            &env,
            3_500,
            Input::Attributes {
                scope: AttributeScope::Client,
                kvs: &kvs,
            },
        )
    });
    assert!(out.is_empty());
    assert_eq!(count, 0, "attributes no rule reads");

    let (count, out) =
        allocations_during(|| evaluate(&rules, &mut state, &env, 3_600, Input::Tick));
    assert!(out.is_empty());
    assert_eq!(count, 0, "tick without DURATION rules");

    // With the alarm active, a low reading is an update: the returned vector is the only allocation
    // (the alarm type is shared, the rule has no details).
    env.alarm = Some(ActiveAlarm {
        severity: Severity::Critical,
        acknowledged: false,
    });
    let low = smart_meter(4_000, 12);
    let (count, out) =
        allocations_during(|| evaluate(&rules, &mut state, &env, 4_000, Input::Telemetry(&low)));
    assert!(matches!(
        &out[..],
        [Transition::Update {
            severity: Severity::Critical,
            severity_changed: false,
            details: None,
            end_ts: 4_000,
            ..
        }]
    ));
    assert_eq!(count, 1, "an update allocates only its output vector");

    // Clear rule evaluated (alarm active, battery high) and false: nothing allocated.
    let recovered = smart_meter(5_000, 60);
    let (count, out) = allocations_during(|| {
        evaluate(
            &rules,
            &mut state,
            &env,
            5_000,
            Input::Telemetry(&recovered),
        )
    });
    assert!(out.is_empty());
    assert_eq!(count, 0, "clear rule evaluated and false");
}
