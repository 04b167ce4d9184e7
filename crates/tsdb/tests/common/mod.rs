//! Helpers shared by the integration tests: a naive reference implementation of ThingsBoard's
//! query semantics over a `BTreeMap`, and value generators.

#![allow(dead_code)]

use std::collections::BTreeMap;

use fleetwire_model::Value;
use fleetwire_tsdb::{Agg, Order, Query};
use proptest::prelude::*;

/// The reference: filter the map, cut buckets one by one, compute each bucket from scratch.
pub fn naive(points: &BTreeMap<i64, Value>, q: &Query) -> Vec<(i64, Value)> {
    if q.agg == Agg::None {
        if q.start_ts >= q.end_ts {
            return Vec::new();
        }
        let in_range = points
            .range(q.start_ts..q.end_ts)
            .map(|(ts, v)| (*ts, v.clone()));
        return match q.order {
            Order::Asc => in_range.take(q.limit).collect(),
            Order::Desc => in_range.rev().take(q.limit).collect(),
        };
    }
    let start = i128::from(q.start_ts);
    let end = i128::from(q.end_ts).max(start + 1);
    let mut out = Vec::new();
    let mut bucket_start = start;
    while bucket_start < end {
        let bucket_end = (bucket_start + i128::from(q.interval_ms)).min(end);
        // Both bounds lie in [start, end], which fits i64 unless start is i64::MAX.
        let values: Vec<&Value> = if bucket_end > i128::from(i64::MAX) {
            points
                .range(bucket_start as i64..)
                .map(|(_, v)| v)
                .collect()
        } else {
            points
                .range(bucket_start as i64..bucket_end as i64)
                .map(|(_, v)| v)
                .collect()
        };
        if let Some(v) = aggregate(q.agg, &values) {
            out.push(((bucket_start + (bucket_end - bucket_start) / 2) as i64, v));
        }
        bucket_start = bucket_end;
    }
    out
}

fn aggregate(agg: Agg, values: &[&Value]) -> Option<Value> {
    let longs: Vec<i64> = values
        .iter()
        .filter_map(|v| {
            if let Value::Long(x) = v {
                Some(*x)
            } else {
                None
            }
        })
        .collect();
    let doubles: Vec<f64> = values
        .iter()
        .filter_map(|v| {
            if let Value::Double(x) = v {
                Some(*x)
            } else {
                None
            }
        })
        .collect();
    let strs: Vec<&str> = values
        .iter()
        .filter_map(|v| {
            if let Value::Str(s) = v {
                Some(s.as_str())
            } else {
                None
            }
        })
        .collect();
    let long_sum: i128 = longs.iter().map(|&x| i128::from(x)).sum();
    let double_sum: f64 = doubles.iter().sum();
    match agg {
        Agg::None => unreachable!(),
        Agg::Count => (!values.is_empty()).then_some(Value::Long(values.len() as i64)),
        Agg::Avg => {
            let n = longs.len() + doubles.len();
            (n > 0).then(|| Value::Double((long_sum as f64 + double_sum) / n as f64))
        }
        Agg::Sum => {
            if !doubles.is_empty() {
                Some(Value::Double(double_sum + long_sum as f64))
            } else if !longs.is_empty() {
                Some(Value::Long(long_sum as i64))
            } else {
                None
            }
        }
        Agg::Min | Agg::Max => {
            let max = agg == Agg::Max;
            let pick = |a: f64, b: f64| if max { a.max(b) } else { a.min(b) };
            if !doubles.is_empty() {
                let all = doubles
                    .iter()
                    .copied()
                    .chain(longs.iter().map(|&x| x as f64));
                all.reduce(pick).map(Value::Double)
            } else if !longs.is_empty() {
                let it = longs.iter().copied();
                if max { it.max() } else { it.min() }.map(Value::Long)
            } else {
                let it = strs.iter().copied();
                if max { it.max() } else { it.min() }.map(|s| Value::Str(s.to_owned()))
            }
        }
    }
}

/// Results are equal: same ts, same types, equal values (doubles within 1e-9 relative).
pub fn assert_same(actual: &[(i64, Value)], expected: &[(i64, Value)], context: &str) {
    assert_eq!(
        actual.len(),
        expected.len(),
        "{context}: lengths differ\nactual   {actual:?}\nexpected {expected:?}"
    );
    for (a, e) in actual.iter().zip(expected) {
        assert_eq!(
            a.0, e.0,
            "{context}: ts differ\nactual   {actual:?}\nexpected {expected:?}"
        );
        let same = match (&a.1, &e.1) {
            (Value::Double(x), Value::Double(y)) => {
                x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs())
            }
            (x, y) => x == y,
        };
        assert!(
            same,
            "{context}: values at {} differ: {:?} vs {:?}",
            a.0, a.1, e.1
        );
    }
}

/// Any value, with few distinct strings so string MIN/MAX has ties.
pub fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => (-1000i64..1000).prop_map(Value::Long),
        1 => any::<i64>().prop_map(Value::Long),
        3 => (-1e6f64..1e6).prop_map(Value::Double),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => prop::sample::select(vec!["", "a", "b", "ab", "zz", "é"]).prop_map(|s| Value::Str(s.to_owned())),
        1 => (0u8..5).prop_map(|n| Value::Json(format!("{{\"n\":{n}}}"))),
    ]
}

pub fn agg() -> impl Strategy<Value = Agg> {
    prop::sample::select(vec![
        Agg::None,
        Agg::Avg,
        Agg::Min,
        Agg::Max,
        Agg::Sum,
        Agg::Count,
    ])
}

pub fn order() -> impl Strategy<Value = Order> {
    prop::sample::select(vec![Order::Asc, Order::Desc])
}
