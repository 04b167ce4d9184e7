//! The series index: (entity, key) interned into a stable `SeriesId`, and the in-memory state
//! of each series (head, latest value).
//!
//! The mapping is persisted in the `series` keyspace when a series is first written, so ids
//! survive restarts: key = id (u64 big-endian), value = entity (u128 big-endian) + key (UTF-8).
//! fjall's journal is one ordered log for all keyspaces, so a chunk can never be durable while
//! the mapping naming its series is not.

use std::collections::HashMap;

use compact_str::CompactString;
use fleetwire_model::Value;

use crate::head::Head;

/// A stable, store-wide id of one (entity, key) series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeriesId(pub u64);

impl SeriesId {
    pub(crate) fn to_key(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }
}

/// Everything the store keeps in memory for one series.
#[derive(Debug)]
pub(crate) struct SeriesState {
    pub(crate) id: SeriesId,
    pub(crate) head: Head,
    /// The point with the greatest ts ever written (last write wins on an equal ts).
    pub(crate) latest: Option<(i64, Value)>,
    /// `latest` changed since it was last written to the `latest` keyspace.
    pub(crate) latest_dirty: bool,
}

impl SeriesState {
    pub(crate) fn new(id: SeriesId) -> SeriesState {
        SeriesState {
            id,
            head: Head::default(),
            latest: None,
            latest_dirty: false,
        }
    }

    /// Whether the latest value is the newest point of the head, so that replaying the ingest log
    /// after a crash restores it without it being stored.
    pub(crate) fn latest_in_head(&self) -> bool {
        match (&self.latest, self.head.last_ts()) {
            (Some((latest_ts, _)), Some(head_ts)) => *latest_ts == head_ts,
            _ => false,
        }
    }

    /// Updates the latest value with a written point.
    pub(crate) fn observe(&mut self, ts: i64, value: &Value) {
        let newer = match &self.latest {
            Some((latest_ts, latest)) => ts > *latest_ts || (ts == *latest_ts && latest != value),
            None => true,
        };
        if newer {
            match &mut self.latest {
                // Reuse the slot so a numeric latest is updated without allocating.
                Some(slot) => {
                    slot.0 = ts;
                    slot.1.clone_from(value);
                }
                None => self.latest = Some((ts, value.clone())),
            }
            self.latest_dirty = true;
        }
    }
}

/// The series of one entity, in key order (`keys()` returns them in this order): one sorted vector
/// of (key, state).
///
/// Every record a processor applies looks its series up here, and they are cold by then (a processor
/// goes round the devices). A `BTreeMap` leaf allocated room for 11 (key, state) pairs (2.2 KB for a
/// device with 3 keys), kept its keys apart from their states and its length at the node's far end, so
/// a lookup began with a miss on the length before it could read a key. Here the length sits in the
/// entity map's slot and each key is on the line its state starts on. Lookups scan a short vector and
/// binary-search a long one; inserting shifts the entries after it, which only a new series does.
#[derive(Debug, Default)]
pub(crate) struct EntitySeries {
    entries: Vec<(CompactString, SeriesState)>,
}

/// Up to this many keys a lookup compares them in turn (a length compare rejects most at once);
/// above it, it binary-searches.
const LINEAR_MAX: usize = 8;

impl EntitySeries {
    /// The index of `key`, or where it would be inserted.
    fn find(&self, key: &str) -> Result<usize, usize> {
        if self.entries.len() <= LINEAR_MAX {
            if let Some(i) = self.entries.iter().position(|(k, _)| k.as_str() == key) {
                return Ok(i);
            }
            return Err(self.entries.partition_point(|(k, _)| k.as_str() < key));
        }
        self.entries.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    pub(crate) fn get(&self, key: &str) -> Option<&SeriesState> {
        let i = self.find(key).ok()?;
        Some(&self.entries[i].1)
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut SeriesState> {
        let i = self.find(key).ok()?;
        Some(&mut self.entries[i].1)
    }

    pub(crate) fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets the state of `key` (replacing one already there) and returns it.
    pub(crate) fn insert(&mut self, key: &str, state: SeriesState) -> &mut SeriesState {
        let i = match self.find(key) {
            Ok(i) => {
                self.entries[i].1 = state;
                i
            }
            Err(i) => {
                self.entries.insert(i, (key.into(), state));
                i
            }
        };
        &mut self.entries[i].1
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// (key, state) in key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&CompactString, &SeriesState)> {
        self.entries.iter().map(|(k, s)| (k, s))
    }

    /// (key, state) in key order.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&CompactString, &mut SeriesState)> {
        self.entries.iter_mut().map(|(k, s)| (&*k, s))
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &CompactString> {
        self.entries.iter().map(|(k, _)| k)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &SeriesState> {
        self.entries.iter().map(|(_, s)| s)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut SeriesState> {
        self.entries.iter_mut().map(|(_, s)| s)
    }

    /// Asks the CPU to start loading every entry (keys and states), all at once.
    pub(crate) fn prefetch(&self) {
        for entry in &self.entries {
            fleetwire_model::hint::prefetch_object(entry);
        }
    }
}

/// One lock's worth of entities. Entity ids are server-made UUIDs, so the map hashes them with
/// foldhash instead of SipHash: the lookup runs for every record a processor applies.
#[derive(Debug, Default)]
pub(crate) struct Shard {
    pub(crate) entities: HashMap<u128, EntitySeries, foldhash::fast::RandomState>,
}

impl Shard {
    pub(crate) fn series(&self, entity: u128, key: &str) -> Option<&SeriesState> {
        self.entities.get(&entity)?.get(key)
    }

    pub(crate) fn series_mut(&mut self, entity: u128, key: &str) -> Option<&mut SeriesState> {
        self.entities.get_mut(&entity)?.get_mut(key)
    }

    pub(crate) fn all_series(&self) -> impl Iterator<Item = &SeriesState> {
        self.entities.values().flat_map(|keys| keys.values())
    }

    pub(crate) fn all_series_mut(&mut self) -> impl Iterator<Item = &mut SeriesState> {
        self.entities
            .values_mut()
            .flat_map(|keys| keys.values_mut())
    }
}

/// Encodes a `series` keyspace value.
pub(crate) fn encode_record(entity: u128, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + key.len());
    out.extend_from_slice(&entity.to_be_bytes());
    out.extend_from_slice(key.as_bytes());
    out
}

/// Decodes a `series` keyspace entry into (id, entity, key).
pub(crate) fn decode_record(key: &[u8], value: &[u8]) -> Result<(SeriesId, u128, String), String> {
    let id: [u8; 8] = key
        .try_into()
        .map_err(|_| format!("series key of {} bytes", key.len()))?;
    if value.len() < 16 {
        return Err(format!("series value of {} bytes", value.len()));
    }
    let (entity, name) = value.split_at(16);
    let mut e = [0u8; 16];
    e.copy_from_slice(entity);
    let name = std::str::from_utf8(name).map_err(|_| "series key is not UTF-8".to_owned())?;
    Ok((
        SeriesId(u64::from_be_bytes(id)),
        u128::from_be_bytes(e),
        name.to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip() {
        let entity = 0x0123_4567_89ab_cdef_0011_2233_4455_6677u128;
        let value = encode_record(entity, "batteryLevel");
        let decoded = decode_record(&SeriesId(9).to_key(), &value).unwrap();
        assert_eq!(decoded, (SeriesId(9), entity, "batteryLevel".to_owned()));
        assert!(decode_record(&[1, 2], &value).is_err());
        assert!(decode_record(&SeriesId(9).to_key(), &value[..10]).is_err());
    }

    #[test]
    fn entity_series_keep_key_order_short_and_long() {
        // Short (scanned) and long (binary-searched) alike: inserted in any order, found by key,
        // listed in byte order, and an insert of a present key replaces its state.
        for n in [3usize, LINEAR_MAX, LINEAR_MAX + 1, 40] {
            let mut keys: Vec<String> = (0..n).map(|i| format!("k{:02}", (i * 7) % n)).collect();
            let mut series = EntitySeries::default();
            for (i, key) in keys.iter().enumerate() {
                series.insert(key, SeriesState::new(SeriesId(i as u64)));
            }
            assert_eq!(series.len(), n);
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(
                    series.get(key).map(|s| s.id),
                    Some(SeriesId(i as u64)),
                    "{key} of {n}"
                );
                assert!(series.contains_key(key));
            }
            assert!(
                series.get("k").is_none() && series.get("zz").is_none() && series.get("").is_none()
            );
            keys.sort();
            let listed: Vec<&str> = series.keys().map(|k| k.as_str()).collect();
            assert_eq!(listed, keys, "{n} keys in byte order");
            series.insert(&keys[0], SeriesState::new(SeriesId(99)));
            assert_eq!(series.len(), n);
            assert_eq!(series.get_mut(&keys[0]).map(|s| s.id), Some(SeriesId(99)));
            assert_eq!(series.values().count(), n);
            assert_eq!(series.iter_mut().count(), n);
        }
    }

    #[test]
    fn latest_keeps_max_ts_and_last_write_on_equal_ts() {
        let mut s = SeriesState::new(SeriesId(1));
        s.observe(10, &Value::Long(1));
        s.observe(5, &Value::Long(2));
        assert_eq!(s.latest, Some((10, Value::Long(1))));
        s.latest_dirty = false;
        s.observe(10, &Value::Long(1));
        assert!(!s.latest_dirty, "rewriting the same point is not a change");
        s.observe(10, &Value::Str("x".into()));
        assert_eq!(s.latest, Some((10, Value::Str("x".into()))));
        assert!(s.latest_dirty);
    }
}
