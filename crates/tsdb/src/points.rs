//! `Points`: the columnar, ts-sorted in-memory form of one series' points, shared by the head
//! (where points are written) and by decoded chunks (where queries read them).
//!
//! Numeric values live in a `u64` payload column next to the timestamp column, so writing a
//! LONG, DOUBLE or BOOLEAN point allocates nothing once the columns have grown. STRING and JSON
//! payloads are an index into a side table of `String`s.

use std::borrow::Cow;

use fleetwire_model::Value;

/// The type of one point, as stored in the `tags` column and in a chunk's type column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Tag {
    Bool = 0,
    Long = 1,
    Double = 2,
    Str = 3,
    Json = 4,
}

impl Tag {
    pub(crate) const COUNT: usize = 5;

    pub(crate) fn from_u8(b: u8) -> Option<Tag> {
        match b {
            0 => Some(Tag::Bool),
            1 => Some(Tag::Long),
            2 => Some(Tag::Double),
            3 => Some(Tag::Str),
            4 => Some(Tag::Json),
            _ => None,
        }
    }

    pub(crate) fn is_text(self) -> bool {
        matches!(self, Tag::Str | Tag::Json)
    }

    pub(crate) fn of(value: &Value) -> Tag {
        match value {
            Value::Bool(_) => Tag::Bool,
            Value::Long(_) => Tag::Long,
            Value::Double(_) => Tag::Double,
            Value::Str(_) => Tag::Str,
            Value::Json(_) => Tag::Json,
        }
    }
}

pub(crate) use fleetwire_model::ValueRef;

/// Points of one series sorted by strictly increasing timestamp.
#[derive(Debug, Clone, Default)]
pub(crate) struct Points {
    ts: Vec<i64>,
    tags: Vec<Tag>,
    /// LONG: the i64 bits; DOUBLE: the f64 bits; BOOLEAN: 0 or 1; STRING/JSON: index in `texts`.
    payload: Vec<u64>,
    /// Text payloads. A slot may become garbage when its point is replaced by a number; it is
    /// dropped when the head is sealed (chunks are encoded from the live points only).
    texts: Vec<String>,
}

impl Points {
    pub(crate) fn new() -> Points {
        Points::default()
    }

    pub(crate) fn len(&self) -> usize {
        self.ts.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ts.is_empty()
    }

    pub(crate) fn ts(&self) -> &[i64] {
        &self.ts
    }

    pub(crate) fn tag(&self, i: usize) -> Tag {
        self.tags[i]
    }

    pub(crate) fn first_ts(&self) -> Option<i64> {
        self.ts.first().copied()
    }

    pub(crate) fn last_ts(&self) -> Option<i64> {
        self.ts.last().copied()
    }

    pub(crate) fn get(&self, i: usize) -> ValueRef<'_> {
        let payload = self.payload[i];
        match self.tags[i] {
            Tag::Bool => ValueRef::Bool(payload != 0),
            Tag::Long => ValueRef::Long(payload as i64),
            Tag::Double => ValueRef::Double(f64::from_bits(payload)),
            Tag::Str => ValueRef::Str(&self.texts[payload as usize]),
            Tag::Json => ValueRef::Json(&self.texts[payload as usize]),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.ts.clear();
        self.tags.clear();
        self.payload.clear();
        self.texts.clear();
    }

    /// Index of the first point with `ts >= bound`.
    pub(crate) fn lower_bound(&self, bound: i64) -> usize {
        self.ts.partition_point(|&t| t < bound)
    }

    /// Asks the CPU to start loading the cache lines the next append writes (the end of each column).
    /// A processor applies records of devices in turn, so these lines are cold each time; a record
    /// writes several series of one device, and loading their lines together instead of one
    /// after the other is what this is for.
    pub(crate) fn prefetch_tail(&self) {
        let len = self.ts.len();
        fleetwire_model::hint::prefetch(self.ts.as_ptr().wrapping_add(len));
        fleetwire_model::hint::prefetch(self.tags.as_ptr().wrapping_add(len));
        fleetwire_model::hint::prefetch(self.payload.as_ptr().wrapping_add(len));
    }

    /// Appends a point whose ts is greater than every ts already held.
    pub(crate) fn push_ref(&mut self, ts: i64, value: ValueRef<'_>) {
        debug_assert!(self.ts.last().is_none_or(|&last| last < ts));
        let (tag, payload) = self.encode_ref(value, None);
        self.ts.push(ts);
        self.tags.push(tag);
        self.payload.push(payload);
    }

    /// Inserts or replaces the point at `ts` (an equal ts replaces: last write wins). Returns
    /// whether the number of points grew.
    pub(crate) fn upsert(&mut self, ts: i64, value: &Value) -> bool {
        let value = value_ref(value);
        if self.ts.last().is_none_or(|&last| last < ts) {
            self.push_ref(ts, value);
            return true;
        }
        match self.ts.binary_search(&ts) {
            Ok(i) => {
                let reuse = if self.tags[i].is_text() {
                    Some(self.payload[i])
                } else {
                    None
                };
                let (tag, payload) = self.encode_ref(value, reuse);
                self.tags[i] = tag;
                self.payload[i] = payload;
                false
            }
            Err(i) => {
                let (tag, payload) = self.encode_ref(value, None);
                self.ts.insert(i, ts);
                self.tags.insert(i, tag);
                self.payload.insert(i, payload);
                true
            }
        }
    }

    /// Tag and payload of a value; a text reuses the slot `reuse` when the point it replaces
    /// held a text, so rewriting a string key in place does not grow the side table.
    fn encode_ref(&mut self, value: ValueRef<'_>, reuse: Option<u64>) -> (Tag, u64) {
        match value {
            ValueRef::Bool(b) => (Tag::Bool, u64::from(b)),
            ValueRef::Long(v) => (Tag::Long, v as u64),
            ValueRef::Double(v) => (Tag::Double, v.to_bits()),
            ValueRef::Str(s) => (Tag::Str, self.store_text(s, reuse)),
            ValueRef::Json(s) => (Tag::Json, self.store_text(s, reuse)),
        }
    }

    fn store_text(&mut self, s: &str, reuse: Option<u64>) -> u64 {
        if let Some(slot) = reuse {
            let text = &mut self.texts[slot as usize];
            text.clear();
            text.push_str(s);
            slot
        } else {
            self.texts.push(s.to_owned());
            (self.texts.len() - 1) as u64
        }
    }

    /// The points outside `start <= ts < end`.
    pub(crate) fn without_range(&self, start: i64, end: i64) -> Points {
        let lo = self.lower_bound(start);
        let hi = self.lower_bound(end).max(lo);
        Points::merge(&self.slice(0, lo), &self.slice(hi, self.len()))
    }

    /// Copies the points with `start <= ts < end`.
    pub(crate) fn slice_range(&self, start: i64, end: i64) -> Points {
        let lo = self.lower_bound(start);
        let hi = self.lower_bound(end).max(lo);
        self.slice(lo, hi)
    }

    /// Copies points `lo..hi` (indices). Without texts the columns are copied whole; with them each
    /// point is copied, so that the copy holds only its own texts.
    pub(crate) fn slice(&self, lo: usize, hi: usize) -> Points {
        if self.texts.is_empty() {
            return Points {
                ts: self.ts[lo..hi].to_vec(),
                tags: self.tags[lo..hi].to_vec(),
                payload: self.payload[lo..hi].to_vec(),
                texts: Vec::new(),
            };
        }
        let mut out = Points::new();
        out.reserve(hi - lo);
        for i in lo..hi {
            out.push_ref(self.ts[i], self.get(i));
        }
        out
    }

    /// Points `lo..hi` (indices): borrowed when that is all of them (a sealed head, most often),
    /// else a copy.
    pub(crate) fn part(&self, lo: usize, hi: usize) -> Cow<'_, Points> {
        if lo == 0 && hi == self.len() {
            Cow::Borrowed(self)
        } else {
            Cow::Owned(self.slice(lo, hi))
        }
    }

    pub(crate) fn reserve_exact(&mut self, additional: usize) {
        self.ts.reserve_exact(additional);
        self.tags.reserve_exact(additional);
        self.payload.reserve_exact(additional);
    }

    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.ts.capacity()
    }

    pub(crate) fn reserve(&mut self, additional: usize) {
        self.ts.reserve(additional);
        self.tags.reserve(additional);
        self.payload.reserve(additional);
    }

    /// Union of `older` and `newer` by ts; on an equal ts the point of `newer` wins.
    pub(crate) fn merge(older: &Points, newer: &Points) -> Points {
        let mut out = Points::new();
        out.reserve(older.len() + newer.len());
        let (mut i, mut j) = (0, 0);
        while i < older.len() || j < newer.len() {
            let take_newer = match (older.ts.get(i), newer.ts.get(j)) {
                (Some(&a), Some(&b)) => {
                    if a == b {
                        i += 1;
                    }
                    b <= a
                }
                (None, Some(_)) => true,
                _ => false,
            };
            if take_newer {
                out.push_ref(newer.ts[j], newer.get(j));
                j += 1;
            } else {
                out.push_ref(older.ts[i], older.get(i));
                i += 1;
            }
        }
        out
    }

    /// Builds points from already-decoded columns (the chunk decoder); the caller guarantees
    /// the columns have equal length and the ts are strictly increasing.
    pub(crate) fn from_columns(
        ts: Vec<i64>,
        tags: Vec<Tag>,
        payload: Vec<u64>,
        texts: Vec<String>,
    ) -> Points {
        debug_assert!(ts.len() == tags.len() && ts.len() == payload.len());
        Points {
            ts,
            tags,
            payload,
            texts,
        }
    }

    /// Rough heap bytes held, for memory accounting.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.ts.capacity() * 8
            + self.tags.capacity()
            + self.payload.capacity() * 8
            + self.texts.iter().map(|t| t.capacity() + 24).sum::<usize>()
    }
}

/// Equal when they hold the same points, whatever the layout of the text side table.
impl PartialEq for Points {
    fn eq(&self, other: &Points) -> bool {
        self.ts == other.ts && (0..self.len()).all(|i| self.get(i) == other.get(i))
    }
}

pub(crate) fn value_ref(value: &Value) -> ValueRef<'_> {
    ValueRef::from(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(p: &Points) -> Vec<(i64, Value)> {
        (0..p.len())
            .map(|i| (p.ts()[i], p.get(i).to_value()))
            .collect()
    }

    proptest::proptest! {
        /// Any sequence of upserts of any types reads back as a map from ts to the last value written.
        #[test]
        fn upserts_read_back_as_a_map(writes in proptest::collection::vec((0i64..40, 0u8..5, 0i64..3), 0..60)) {
            let mut p = Points::new();
            let mut model = std::collections::BTreeMap::new();
            for (ts, kind, n) in writes {
                let value = match kind {
                    0 => Value::Bool(n == 1),
                    1 => Value::Long(n),
                    2 => Value::Double(n as f64 / 2.0),
                    3 => Value::Str(format!("s{n}")),
                    _ => Value::Json(format!("{{\"n\":{n}}}")),
                };
                p.upsert(ts, &value);
                model.insert(ts, value);
            }
            let expected: Vec<(i64, Value)> = model.into_iter().collect();
            proptest::prop_assert_eq!(collect(&p), expected.clone());
            proptest::prop_assert_eq!(collect(&p.slice(0, p.len())), expected.clone());
            let half = p.len() / 2;
            proptest::prop_assert_eq!(collect(&p.slice(half, p.len())), expected[half..].to_vec());
        }
    }

    #[test]
    fn upsert_sorts_out_of_order_and_replaces_equal_ts() {
        let mut p = Points::new();
        assert!(p.upsert(10, &Value::Long(1)));
        assert!(p.upsert(30, &Value::Str("a".into())));
        assert!(p.upsert(20, &Value::Double(2.5)));
        assert!(!p.upsert(30, &Value::Str("b".into())));
        assert!(!p.upsert(10, &Value::Json("{}".into())));
        assert!(!p.upsert(20, &Value::Bool(true)));
        assert_eq!(
            collect(&p),
            vec![
                (10, Value::Json("{}".into())),
                (20, Value::Bool(true)),
                (30, Value::Str("b".into())),
            ]
        );
        // The replaced text reused its slot.
        assert_eq!(p.texts.len(), 2);
    }

    #[test]
    fn merge_prefers_newer_on_equal_ts() {
        let mut a = Points::new();
        let mut b = Points::new();
        for ts in [1, 3, 5] {
            a.upsert(ts, &Value::Long(ts));
        }
        for ts in [3, 4, 6] {
            b.upsert(ts, &Value::Long(ts * 100));
        }
        let m = Points::merge(&a, &b);
        assert_eq!(
            collect(&m),
            vec![
                (1, Value::Long(1)),
                (3, Value::Long(300)),
                (4, Value::Long(400)),
                (5, Value::Long(5)),
                (6, Value::Long(600)),
            ]
        );
    }

    #[test]
    fn slice_range_is_half_open() {
        let mut p = Points::new();
        for ts in 0..10 {
            p.upsert(ts, &Value::Long(ts));
        }
        let s = p.slice_range(3, 7);
        assert_eq!(s.ts(), &[3, 4, 5, 6]);
        assert!(p.slice_range(7, 3).is_empty());
    }
}
