//! The head: the in-memory, not yet sealed points of one series, plus the ingest-log positions
//! ("sources") those points came from.
//!
//! Head data is NOT durable. The server replays its ingest log to rebuild heads after a crash,
//! so each head remembers, per log partition, the lowest log position written into it since it
//! was last sealed: the log may only be trimmed below the minimum over all heads (see
//! `Tsdb::min_unsealed_source`).

use fleetwire_model::Value;
use smallvec::SmallVec;

use crate::points::Points;

/// Where a write came from: the ingest-log partition and the position of its record there.
/// Opaque to the store; only compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source {
    pub partition: u16,
    pub pos: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Head {
    pub(crate) points: Points,
    /// (partition, lowest position) of every write since the last seal. Almost always one
    /// entry (a device's records all come from one partition), kept inline: every write looks it
    /// up, and a separate allocation was one more cache miss per point.
    pins: SmallVec<[(u16, u64); 1]>,
}

impl Head {
    /// Writes a point (an equal ts replaces the value) and pins its source.
    pub(crate) fn insert(&mut self, source: Source, ts: i64, value: &Value) {
        self.points.upsert(ts, value);
        self.pin(source);
    }

    fn pin(&mut self, source: Source) {
        match self.pins.iter_mut().find(|(p, _)| *p == source.partition) {
            Some((_, pos)) => *pos = (*pos).min(source.pos),
            None => self.pins.push((source.partition, source.pos)),
        }
    }

    /// The newest timestamp held.
    pub(crate) fn last_ts(&self) -> Option<i64> {
        self.points.ts().last().copied()
    }

    /// Makes room for `points` points in all if, at the pace of the points it holds, the head would
    /// reach `points` within `fill_ms` of data time (see `Tsdb::apply`). Only capacity changes.
    pub(crate) fn reserve_if_busy(&mut self, points: usize, fill_ms: i64) {
        let (Some(first), Some(last)) = (self.points.first_ts(), self.points.last_ts()) else {
            return;
        };
        let held = self.points.len();
        if held < 2 || points <= held {
            return;
        }
        // span / (held - 1) per point, times the points still to come, compared without dividing.
        let span = i128::from(last.saturating_sub(first));
        let to_come = (points - held) as i128;
        if span * to_come <= i128::from(fill_ms) * (held as i128 - 1) {
            self.points.reserve_exact(points - held);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.points.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The lowest log position of `partition` this head holds data from.
    pub(crate) fn min_source(&self, partition: u16) -> Option<u64> {
        self.pins
            .iter()
            .find(|(p, _)| *p == partition)
            .map(|&(_, pos)| pos)
    }

    pub(crate) fn pins(&self) -> &[(u16, u64)] {
        &self.pins
    }

    /// Deletes the points with `start <= ts < end`; returns how many. A head left with points keeps its
    /// log pins (the delete itself is in the log after them). A head left empty drops them: it will never
    /// be sealed, and nothing in the log before the delete is needed for this series any more (the store
    /// persists the chunk side of the delete before the checkpoint can pass it).
    pub(crate) fn delete_range(&mut self, start: i64, end: i64) -> usize {
        let before = self.points.len();
        let lo = self.points.lower_bound(start);
        let hi = self.points.lower_bound(end).max(lo);
        if lo < hi {
            self.points = self.points.without_range(start, end);
        }
        if self.points.is_empty() {
            self.pins.clear();
        }
        before - self.points.len()
    }

    /// Empties the head after its points were written to a chunk. A head sealed because it
    /// was full keeps its buffers (its series is busy and will refill them); one sealed early
    /// by a checkpoint gives them back, so idle series do not hold memory.
    pub(crate) fn clear(&mut self, keep_capacity: bool) {
        if keep_capacity {
            self.points.clear();
        } else {
            self.points = Points::new();
        }
        self.pins.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(points: i64, step_ms: i64) -> Head {
        let mut head = Head::default();
        for i in 0..points {
            let source = Source {
                partition: 0,
                pos: i as u64,
            };
            head.insert(source, i * step_ms, &Value::Long(i));
        }
        head
    }

    #[test]
    fn a_busy_head_gets_room_for_a_whole_chunk_a_slow_one_does_not() {
        // 32 points 50 ms apart: the other 968 come within 48.4 s, so room for all 1,000 at once.
        let mut busy = filled(32, 50);
        busy.reserve_if_busy(1_000, 60_000);
        assert!(busy.points.capacity() >= 1_000);
        assert_eq!(busy.len(), 32, "only capacity changes");
        // 32 points 200 ms apart (5 a second): the rest would take 194 s, so it keeps its doubling
        // growth rather than hold room it fills over minutes.
        for step in [200, 1_000, 60_000] {
            let mut slow = filled(32, step);
            let before = slow.points.capacity();
            slow.reserve_if_busy(1_000, 60_000);
            assert_eq!(slow.points.capacity(), before, "step {step} ms");
        }
        // Just inside and just outside the fill time.
        let mut edge = filled(32, 61);
        edge.reserve_if_busy(1_000, 60_000);
        assert!(edge.points.capacity() >= 1_000, "968 x 61 ms = 59.0 s");
        let mut edge = filled(32, 62);
        edge.reserve_if_busy(1_000, 60_000);
        assert!(edge.points.capacity() < 1_000, "968 x 62 ms = 60.02 s");
        // An empty head has no span to judge by.
        let mut empty = Head::default();
        empty.reserve_if_busy(1_000, 60_000);
        assert_eq!(empty.points.capacity(), 0);
    }

    #[test]
    fn pins_keep_the_lowest_position_per_partition() {
        let mut head = Head::default();
        head.insert(
            Source {
                partition: 1,
                pos: 50,
            },
            1,
            &Value::Long(1),
        );
        head.insert(
            Source {
                partition: 1,
                pos: 20,
            },
            2,
            &Value::Long(2),
        );
        head.insert(
            Source {
                partition: 1,
                pos: 70,
            },
            1,
            &Value::Long(3),
        );
        head.insert(
            Source {
                partition: 2,
                pos: 5,
            },
            3,
            &Value::Long(4),
        );
        assert_eq!(head.min_source(1), Some(20));
        assert_eq!(head.min_source(2), Some(5));
        assert_eq!(head.min_source(3), None);
        assert_eq!(head.len(), 3);
        head.clear(false);
        assert_eq!(head.min_source(1), None);
        assert!(head.is_empty());
    }
}
