//! Interval aggregation with ThingsBoard's semantics, folded point by point so a query never
//! holds more than one bucket's accumulator plus its result.
//!
//! Buckets (as `AbstractChunkedAggregationTimeseriesDao`): from `start` in steps of `interval`,
//! `[b, min(b + interval, end))` where `end = max(start + 1, end_ts)`; a bucket's ts is its
//! midpoint `b + (bucket_end - b) / 2`; empty buckets are omitted; buckets come in ascending
//! order whatever the query's order.
//!
//! Values per bucket (as TB's SQL DAO, `TsKvRepository` + `TsKvEntity`):
//! - AVG → DOUBLE: (sum of longs + sum of doubles) / (count of longs and doubles).
//! - SUM → LONG when the bucket has no double, else DOUBLE (sum of doubles + sum of longs).
//! - MIN/MAX → LONG when only longs, DOUBLE when any double (compared as doubles), else the
//!   lexicographic (byte order) MIN/MAX of the STRING values.
//! - COUNT → LONG.
//!   BOOLEAN and JSON values never enter AVG/SUM/MIN/MAX (they are separate columns in TB).
//!
//! Where TB's SQL behaviour is an accident that would mislead users we do the correct thing
//! (DESIGN §4 "Compatibility"):
//! - TB returns AVG 0.0 / SUM 0 for a bucket holding only strings or booleans (its SUM of
//!   COALESCE(long_v, 0) is not NULL); we omit such buckets.
//! - TB's COUNT returns the count of only the first non-empty type among boolean, string,
//!   JSON, numeric; we count every value.
//! - TB's numeric MAX uses `COALESCE(dbl_v, Double.MIN_VALUE)` (the smallest positive double),
//!   so the MAX of negative doubles mixed with other rows comes out as 4.9e-324; we return
//!   the true maximum.
//! - String MIN/MAX use byte order, not the database collation.
//!   Long sums are exact (i128) and wrap to i64 only at the end, like Java's
//!   `BigDecimal.longValue()` on PostgreSQL's numeric SUM.

use fleetwire_model::Value;

use crate::points::ValueRef;

/// The aggregation of a query, ThingsBoard's `agg` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agg {
    None,
    Avg,
    Min,
    Max,
    Sum,
    Count,
}

/// Accumulates one bucket.
#[derive(Debug)]
struct Acc {
    long_count: u64,
    long_sum: i128,
    long_min: i64,
    long_max: i64,
    double_count: u64,
    double_sum: f64,
    double_min: f64,
    double_max: f64,
    str_min: Option<String>,
    str_max: Option<String>,
    count: u64,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            long_count: 0,
            long_sum: 0,
            long_min: i64::MAX,
            long_max: i64::MIN,
            double_count: 0,
            double_sum: 0.0,
            double_min: f64::INFINITY,
            double_max: f64::NEG_INFINITY,
            str_min: None,
            str_max: None,
            count: 0,
        }
    }

    fn add(&mut self, agg: Agg, value: ValueRef<'_>) {
        self.count += 1;
        match value {
            ValueRef::Long(v) => {
                self.long_count += 1;
                self.long_sum += i128::from(v);
                self.long_min = self.long_min.min(v);
                self.long_max = self.long_max.max(v);
            }
            ValueRef::Double(v) => {
                self.double_count += 1;
                self.double_sum += v;
                self.double_min = self.double_min.min(v);
                self.double_max = self.double_max.max(v);
            }
            // Strings only matter to MIN/MAX; skip the copies otherwise.
            ValueRef::Str(s) if matches!(agg, Agg::Min | Agg::Max) => {
                if self.str_min.as_deref().is_none_or(|m| s < m) {
                    self.str_min = Some(s.to_owned());
                }
                if self.str_max.as_deref().is_none_or(|m| s > m) {
                    self.str_max = Some(s.to_owned());
                }
            }
            ValueRef::Str(_) | ValueRef::Bool(_) | ValueRef::Json(_) => {}
        }
    }

    fn result(self, agg: Agg) -> Option<Value> {
        let numeric = self.long_count + self.double_count;
        match agg {
            Agg::None => None,
            Agg::Count => (self.count > 0).then_some(Value::Long(self.count as i64)),
            Agg::Avg => (numeric > 0)
                .then(|| Value::Double((self.long_sum as f64 + self.double_sum) / numeric as f64)),
            Agg::Sum => {
                if self.double_count > 0 {
                    Some(Value::Double(self.double_sum + self.long_sum as f64))
                } else if self.long_count > 0 {
                    Some(Value::Long(self.long_sum as i64))
                } else {
                    None
                }
            }
            Agg::Min | Agg::Max => {
                let max = agg == Agg::Max;
                match (self.long_count > 0, self.double_count > 0) {
                    (true, true) => Some(Value::Double(if max {
                        self.double_max.max(self.long_max as f64)
                    } else {
                        self.double_min.min(self.long_min as f64)
                    })),
                    (false, true) => Some(Value::Double(if max {
                        self.double_max
                    } else {
                        self.double_min
                    })),
                    (true, false) => {
                        Some(Value::Long(if max { self.long_max } else { self.long_min }))
                    }
                    (false, false) => if max { self.str_max } else { self.str_min }.map(Value::Str),
                }
            }
        }
    }
}

/// Folds points, given in ascending ts order within `[start, end)`, into bucket results.
#[derive(Debug)]
pub(crate) struct Buckets {
    agg: Agg,
    start: i64,
    end: i64,
    interval: i64,
    current: Option<(i128, Acc)>,
    out: Vec<(i64, Value)>,
}

impl Buckets {
    /// `end` is the already-adjusted exclusive end (`max(start + 1, end_ts)`); `interval >= 1`.
    pub(crate) fn new(agg: Agg, start: i64, end: i64, interval: i64) -> Buckets {
        assert!(interval >= 1, "bucket interval must be positive");
        Buckets {
            agg,
            start,
            end,
            interval,
            current: None,
            out: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, ts: i64, value: ValueRef<'_>) {
        debug_assert!(ts >= self.start && ts < self.end);
        let index = (i128::from(ts) - i128::from(self.start)) / i128::from(self.interval);
        match &mut self.current {
            Some((current, acc)) if *current == index => acc.add(self.agg, value),
            _ => {
                self.flush();
                let mut acc = Acc::new();
                acc.add(self.agg, value);
                self.current = Some((index, acc));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((index, acc)) = self.current.take() {
            if let Some(value) = acc.result(self.agg) {
                let bucket_start = i128::from(self.start) + index * i128::from(self.interval);
                let bucket_end =
                    (bucket_start + i128::from(self.interval)).min(i128::from(self.end));
                let ts = bucket_start + (bucket_end - bucket_start) / 2;
                // Between start and end, so it fits.
                self.out.push((ts as i64, value));
            }
        }
    }

    /// Buckets completed so far (the open one not counted).
    pub(crate) fn len(&self) -> usize {
        self.out.len()
    }

    pub(crate) fn finish(mut self) -> Vec<(i64, Value)> {
        self.flush();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        agg: Agg,
        start: i64,
        end: i64,
        interval: i64,
        points: &[(i64, Value)],
    ) -> Vec<(i64, Value)> {
        let mut b = Buckets::new(agg, start, end, interval);
        for (ts, v) in points {
            b.push(*ts, crate::points::value_ref(v));
        }
        b.finish()
    }

    #[test]
    fn midpoints_and_truncated_last_bucket() {
        let pts = [
            (0, Value::Long(1)),
            (5, Value::Long(3)),
            (10, Value::Long(5)),
            (24, Value::Long(7)),
        ];
        assert_eq!(
            run(Agg::Sum, 0, 25, 10, &pts),
            vec![
                (5, Value::Long(4)),
                (15, Value::Long(5)),
                (22, Value::Long(7))
            ]
        );
    }

    #[test]
    fn result_types_follow_thingsboard() {
        let mixed = [
            (1, Value::Long(2)),
            (2, Value::Double(0.5)),
            (3, Value::Str("z".into())),
        ];
        assert_eq!(
            run(Agg::Sum, 0, 10, 10, &mixed),
            vec![(5, Value::Double(2.5))]
        );
        assert_eq!(
            run(Agg::Max, 0, 10, 10, &mixed),
            vec![(5, Value::Double(2.0))]
        );
        assert_eq!(
            run(Agg::Min, 0, 10, 10, &mixed),
            vec![(5, Value::Double(0.5))]
        );
        assert_eq!(
            run(Agg::Avg, 0, 10, 10, &mixed),
            vec![(5, Value::Double(1.25))]
        );
        assert_eq!(
            run(Agg::Count, 0, 10, 10, &mixed),
            vec![(5, Value::Long(3))]
        );

        let longs = [
            (1, Value::Long(-2)),
            (2, Value::Long(9)),
            (3, Value::Bool(true)),
        ];
        assert_eq!(run(Agg::Sum, 0, 10, 10, &longs), vec![(5, Value::Long(7))]);
        assert_eq!(run(Agg::Min, 0, 10, 10, &longs), vec![(5, Value::Long(-2))]);
        assert_eq!(
            run(Agg::Avg, 0, 10, 10, &longs),
            vec![(5, Value::Double(3.5))]
        );

        let texts = [
            (1, Value::Str("b".into())),
            (2, Value::Str("a".into())),
            (3, Value::Bool(false)),
        ];
        assert_eq!(
            run(Agg::Min, 0, 10, 10, &texts),
            vec![(5, Value::Str("a".into()))]
        );
        assert_eq!(
            run(Agg::Max, 0, 10, 10, &texts),
            vec![(5, Value::Str("b".into()))]
        );
        assert_eq!(run(Agg::Avg, 0, 10, 10, &texts), vec![]);
        assert_eq!(run(Agg::Sum, 0, 10, 10, &texts), vec![]);
        assert_eq!(
            run(Agg::Count, 0, 10, 10, &texts),
            vec![(5, Value::Long(3))]
        );

        let bools = [(1, Value::Bool(true)), (2, Value::Json("{}".into()))];
        assert_eq!(run(Agg::Max, 0, 10, 10, &bools), vec![]);
    }

    #[test]
    fn max_of_negative_doubles_is_the_true_max() {
        let pts = [
            (1, Value::Double(-3.5)),
            (2, Value::Double(-1.25)),
            (3, Value::Long(-9)),
        ];
        assert_eq!(
            run(Agg::Max, 0, 10, 10, &pts),
            vec![(5, Value::Double(-1.25))]
        );
    }

    #[test]
    fn extreme_ranges_do_not_overflow() {
        let pts = [(i64::MIN, Value::Long(1)), (i64::MAX - 1, Value::Long(2))];
        let out = run(Agg::Count, i64::MIN, i64::MAX, i64::MAX, &pts);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1, Value::Long(1));
        assert_eq!(out[1].1, Value::Long(1));
    }
}
