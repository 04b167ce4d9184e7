//! Range queries over one series: sealed chunks and the head merged into one ts-ordered stream
//! that is folded into raw rows or buckets as it goes.
//!
//! Range semantics follow ThingsBoard's SQL DAO (`TsKvRepository`: `ts >= :startTs AND ts <
//! :endTs`): raw queries (agg NONE) read `[start_ts, end_ts)`, ordered by `order`, at most
//! `limit` points; aggregations read `[start_ts, max(start_ts + 1, end_ts))` in buckets (see
//! `aggregate.rs`) and ignore `order` and `limit`, as TB does.

use std::ops::ControlFlow;

use fleetwire_model::Value;

use crate::aggregate::{Agg, Buckets};
use crate::error::{Error, Result};
use crate::points::{Points, ValueRef};
use crate::series::SeriesId;
use crate::store::Store;

/// Sort order of raw query results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    Asc,
    Desc,
}

/// A time-series query on one key (ThingsBoard's `ReadTsKvQuery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub start_ts: i64,
    pub end_ts: i64,
    /// Bucket width for aggregations; must be >= 1 unless `agg` is `None`.
    pub interval_ms: i64,
    pub agg: Agg,
    /// Maximum number of raw points (agg `None` only).
    pub limit: usize,
    pub order: Order,
    /// Most buckets holding data an aggregation may return (agg other than `None`); more is an
    /// [`Error::InvalidQuery`], so one query cannot build an answer of unbounded size.
    pub buckets_max: usize,
}

impl Query {
    /// A raw query for `[start_ts, end_ts)`.
    pub fn raw(start_ts: i64, end_ts: i64, limit: usize, order: Order) -> Query {
        Query {
            start_ts,
            end_ts,
            interval_ms: 0,
            agg: Agg::None,
            limit,
            order,
            buckets_max: usize::MAX,
        }
    }

    /// An aggregation of `[start_ts, end_ts)` in buckets of `interval_ms`.
    pub fn aggregate(start_ts: i64, end_ts: i64, interval_ms: i64, agg: Agg) -> Query {
        Query {
            start_ts,
            end_ts,
            interval_ms,
            agg,
            limit: usize::MAX,
            order: Order::Asc,
            buckets_max: usize::MAX,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.agg != Agg::None && self.interval_ms < 1 {
            return Err(Error::InvalidQuery(format!(
                "'interval' must be greater than 0, but got {}",
                self.interval_ms
            )));
        }
        Ok(())
    }

    /// The half-open ts range the query reads.
    pub(crate) fn range(&self) -> (i64, i64) {
        match self.agg {
            Agg::None => (self.start_ts, self.end_ts),
            _ => (
                self.start_ts,
                self.end_ts.max(self.start_ts.saturating_add(1)),
            ),
        }
    }
}

/// Runs `query` on series `id`, whose head points inside the query range are `head`.
pub(crate) fn run(
    store: &Store,
    id: SeriesId,
    head: &Points,
    query: &Query,
) -> Result<Vec<(i64, Value)>> {
    let (start, end) = query.range();
    if start >= end {
        return Ok(Vec::new());
    }
    match query.agg {
        Agg::None => {
            let mut out = Vec::new();
            if query.limit == 0 {
                return Ok(out);
            }
            let limit = query.limit;
            merged(
                store,
                id,
                head,
                start,
                end,
                query.order,
                &mut |ts, value| {
                    out.push((ts, value.to_value()));
                    if out.len() >= limit {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                },
            )?;
            Ok(out)
        }
        agg => {
            let mut buckets = Buckets::new(agg, start, end, query.interval_ms);
            let buckets_max = query.buckets_max;
            merged(store, id, head, start, end, Order::Asc, &mut |ts, value| {
                buckets.push(ts, value);
                if buckets.len() > buckets_max {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })?;
            let out = buckets.finish();
            if out.len() > buckets_max {
                return Err(Error::InvalidQuery(format!(
                    "more than {buckets_max} intervals hold data; increase the interval or shorten the range"
                )));
            }
            Ok(out)
        }
    }
}

/// Streams the points of `[start, end)` in `order` to `sink`: stored chunks decoded one at a
/// time, merged with the head (which wins on an equal ts: it holds the newer write).
/// Relies on stored chunks of a series never overlapping, so each chunk is merged with the
/// head points up to its last ts and head points between chunks come out in order.
fn merged(
    store: &Store,
    id: SeriesId,
    head: &Points,
    start: i64,
    end: i64,
    order: Order,
    sink: &mut dyn FnMut(i64, ValueRef<'_>) -> ControlFlow<()>,
) -> Result<()> {
    let asc = order == Order::Asc;
    let head_len = head.len();
    let head_index = |k: usize| if asc { k } else { head_len - 1 - k };
    // `a` comes before `b` in the output order.
    let before = |a: i64, b: i64| if asc { a < b } else { a > b };
    let mut h = 0;

    let flow = store.scan(id, start, end, order, &mut |chunk: &Points| {
        let lo = chunk.lower_bound(start);
        let hi = chunk.lower_bound(end).max(lo);
        for k in 0..hi - lo {
            let c = if asc { lo + k } else { hi - 1 - k };
            let ts = chunk.ts()[c];
            while h < head_len && before(head.ts()[head_index(h)], ts) {
                let i = head_index(h);
                h += 1;
                sink(head.ts()[i], head.get(i))?;
            }
            if h < head_len && head.ts()[head_index(h)] == ts {
                let i = head_index(h);
                h += 1;
                sink(ts, head.get(i))?;
            } else {
                sink(ts, chunk.get(c))?;
            }
        }
        ControlFlow::Continue(())
    })?;
    if flow.is_continue() {
        while h < head_len {
            let i = head_index(h);
            h += 1;
            if sink(head.ts()[i], head.get(i)).is_break() {
                break;
            }
        }
    }
    Ok(())
}
