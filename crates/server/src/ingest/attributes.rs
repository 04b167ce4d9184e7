//! Device attributes (CLIENT, SERVER and SHARED scope): held in memory, persisted in batches.
//!
//! Attribute writes arrive through the ingest log like telemetry; the processors apply them here and the
//! checkpoint persists the changed ones in one SQLite transaction, so there is never a database write per
//! message. Writes are applied in log order, last write wins: one device's records are in one partition, so
//! replaying the log from a checkpoint after a crash re-applies them in the same order and ends in the same
//! state. (Comparing the `ts` stamped by the transport instead would drop acknowledged writes when the
//! clock steps back.)

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use fleetwire_model::record::AttributeScope;
use fleetwire_model::{Kv, Value};
use parking_lot::Mutex;
use rusqlite::{params, Connection};

#[derive(Debug, thiserror::Error)]
pub enum AttributeError {
    #[error("attribute database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("attribute database holds an unknown value type {0} for {1}")]
    Corrupt(i64, String),
}

/// One stored attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub key: String,
    pub last_update_ts: i64,
    pub value: Value,
}

type Key = (u128, AttributeScope);

/// One dirty key on its way to the database: its current value, or `None` when it was deleted.
type Change = (u128, AttributeScope, String, Option<(i64, Value)>);

/// Splits ThingsBoard's comma-separated key list (`"a, b,c"`), skipping empty names.
pub fn split_keys(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect()
}

#[derive(Default)]
struct State {
    values: HashMap<Key, BTreeMap<String, (i64, Value)>>,
    dirty: HashSet<(u128, AttributeScope, String)>,
}

pub struct AttributeStore {
    state: Mutex<State>,
    db: Mutex<Connection>,
}

fn scope_code(scope: AttributeScope) -> i64 {
    match scope {
        AttributeScope::Client => 0,
        AttributeScope::Server => 1,
        AttributeScope::Shared => 2,
    }
}

fn scope_from_code(code: i64) -> Option<AttributeScope> {
    match code {
        0 => Some(AttributeScope::Client),
        1 => Some(AttributeScope::Server),
        2 => Some(AttributeScope::Shared),
        _ => None,
    }
}

impl AttributeStore {
    pub fn open(path: &Path) -> Result<AttributeStore, AttributeError> {
        let db = Connection::open(path)?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        db.pragma_update(None, "synchronous", "FULL")?;
        // The table is read once at open and then only written in batches: a small page cache is enough,
        // and SQLite's default (2 MB) would be held for the life of the process.
        db.pragma_update(None, "cache_size", -256)?;
        db.execute_batch(
            "CREATE TABLE IF NOT EXISTS attribute (
                entity BLOB NOT NULL, scope INTEGER NOT NULL, key TEXT NOT NULL,
                ts INTEGER NOT NULL, type INTEGER NOT NULL, value,
                PRIMARY KEY (entity, scope, key)) WITHOUT ROWID;",
        )?;
        let mut state = State::default();
        {
            let mut stmt =
                db.prepare("SELECT entity, scope, key, ts, type, value FROM attribute")?;
            let mut rows = stmt.query([])?;
            while let Some(row) = rows.next()? {
                let entity: Vec<u8> = row.get(0)?;
                let key: String = row.get(2)?;
                let Some(scope) = scope_from_code(row.get(1)?) else {
                    continue;
                };
                let Ok(entity) = <[u8; 16]>::try_from(entity.as_slice()) else {
                    continue;
                };
                // Device activity is held by the activity tracker, which reads its rows itself.
                if scope == AttributeScope::Server && crate::activity::is_activity_key(&key) {
                    continue;
                }
                let ts: i64 = row.get(3)?;
                let value = row_value(row, 4, &key)?;
                state
                    .values
                    .entry((u128::from_be_bytes(entity), scope))
                    .or_default()
                    .insert(key, (ts, value));
            }
        }
        Ok(AttributeStore {
            state: Mutex::new(state),
            db: Mutex::new(db),
        })
    }

    /// Applies attribute writes saved at `ts`, in log order: the last write wins.
    pub fn apply(&self, entity: u128, scope: AttributeScope, ts: i64, kvs: &[Kv]) {
        let mut state = self.state.lock();
        let State { values, dirty } = &mut *state;
        let map = values.entry((entity, scope)).or_default();
        for kv in kvs {
            map.insert(kv.key.clone(), (ts, kv.value.clone()));
            dirty.insert((entity, scope, kv.key.clone()));
        }
    }

    /// Deletes attribute keys of an entity in one scope. Every key asked is deleted from the database at
    /// the next persist, also one only the database holds (rows written by [`AttributeStore::write_rows`]);
    /// returns the keys that were in memory.
    pub fn delete(&self, entity: u128, scope: AttributeScope, keys: &[String]) -> Vec<String> {
        let mut state = self.state.lock();
        let State { values, dirty } = &mut *state;
        let mut removed = Vec::new();
        let map = values.get_mut(&(entity, scope));
        let emptied = match map {
            Some(map) => {
                for key in keys {
                    if map.remove(key).is_some() {
                        removed.push(key.clone());
                    }
                }
                map.is_empty()
            }
            None => false,
        };
        if emptied {
            values.remove(&(entity, scope));
        }
        for key in keys {
            // A dirty key with no value is deleted from the database at the next persist.
            dirty.insert((entity, scope, key.clone()));
        }
        removed
    }

    /// The attributes of an entity in one scope, all of them when `keys` is empty, sorted by key.
    pub fn get(&self, entity: u128, scope: AttributeScope, keys: &[&str]) -> Vec<Attribute> {
        let state = self.state.lock();
        let Some(map) = state.values.get(&(entity, scope)) else {
            return Vec::new();
        };
        let pick = |(key, (ts, value)): (&String, &(i64, Value))| Attribute {
            key: key.clone(),
            last_update_ts: *ts,
            value: value.clone(),
        };
        if keys.is_empty() {
            map.iter().map(pick).collect()
        } else {
            map.iter()
                .filter(|(k, _)| keys.contains(&k.as_str()))
                .map(pick)
                .collect()
        }
    }

    /// The answer to a device's attribute request (reference 1.7 and 3): `{"client":{..},"shared":{..}}`
    /// with typed values, a section omitted when nothing is found; neither key list given → all client
    /// and all shared attributes.
    pub fn device_request_json(
        &self,
        entity: u128,
        client_keys: Option<&[&str]>,
        shared_keys: Option<&[&str]>,
    ) -> serde_json::Value {
        let all = client_keys.is_none() && shared_keys.is_none();
        let mut body = serde_json::Map::new();
        for (name, scope, wanted) in [
            ("client", AttributeScope::Client, client_keys),
            ("shared", AttributeScope::Shared, shared_keys),
        ] {
            if wanted.is_none() && !all {
                continue;
            }
            let found = self.get(entity, scope, wanted.unwrap_or(&[]));
            if !found.is_empty() {
                let section = found
                    .into_iter()
                    .map(|a| (a.key, a.value.to_json()))
                    .collect();
                body.insert(name.to_string(), serde_json::Value::Object(section));
            }
        }
        serde_json::Value::Object(body)
    }

    /// Reads from the database the rows of `keys` in `scope` (for state kept outside this store: device
    /// activity).
    pub fn load_rows(
        &self,
        scope: AttributeScope,
        keys: &[&str],
    ) -> Result<Vec<(u128, String, Value)>, AttributeError> {
        let db = self.db.lock();
        let mut stmt =
            db.prepare("SELECT entity, key, type, value FROM attribute WHERE scope = ?1")?;
        let mut rows = stmt.query(params![scope_code(scope)])?;
        let mut found = Vec::new();
        while let Some(row) = rows.next()? {
            let key: String = row.get(1)?;
            if !keys.contains(&key.as_str()) {
                continue;
            }
            let entity: Vec<u8> = row.get(0)?;
            let Ok(entity) = <[u8; 16]>::try_from(entity.as_slice()) else {
                continue;
            };
            let value = row_value(row, 2, &key)?;
            found.push((u128::from_be_bytes(entity), key, value));
        }
        Ok(found)
    }

    /// Writes rows of `scope` straight to the database in one transaction (for state kept outside this
    /// store: device activity). With `sync` the transaction is durable when this returns (synchronous=FULL);
    /// without it the commit is not fsynced (synchronous=NORMAL: it survives a crash of the process, and
    /// the next synced commit or WAL checkpoint makes it durable), so that a writer of many batches can
    /// sync only its last one.
    pub fn write_rows(
        &self,
        scope: AttributeScope,
        rows: &[(u128, &str, i64, Value)],
        sync: bool,
    ) -> Result<(), AttributeError> {
        let mut batch: Vec<Change> = rows
            .iter()
            .map(|(entity, key, ts, value)| {
                (
                    *entity,
                    scope,
                    (*key).to_owned(),
                    Some((*ts, value.clone())),
                )
            })
            .collect();
        let mut db = self.db.lock();
        if sync {
            return write_batch(&mut db, &mut batch);
        }
        db.pragma_update(None, "synchronous", "NORMAL")?;
        let written = write_batch(&mut db, &mut batch);
        // Whatever happened, the connection goes back to durable commits for everyone else.
        let restored = db.pragma_update(None, "synchronous", "FULL");
        written?;
        restored.map_err(AttributeError::from)
    }

    /// Writes every changed attribute in one transaction (synchronous=FULL: durable when it returns).
    ///
    /// The store is shared by all partitions' processors, and each checkpoints its log partition right
    /// after this returns. So the database lock is taken *before* the dirty set: a concurrent caller waits
    /// for the transaction in flight instead of finding the dirty set empty and checkpointing past writes
    /// that are not yet committed. Lock order: `db`, then `state`.
    pub fn persist(&self) -> Result<(), AttributeError> {
        let mut db = self.db.lock();
        let mut batch: Vec<Change> = {
            let mut state = self.state.lock();
            if state.dirty.is_empty() {
                return Ok(());
            }
            let dirty = std::mem::take(&mut state.dirty);
            dirty
                .into_iter()
                .map(|(entity, scope, key)| {
                    // No value any more: the key was deleted.
                    let current = state
                        .values
                        .get(&(entity, scope))
                        .and_then(|map| map.get(&key))
                        .cloned();
                    (entity, scope, key, current)
                })
                .collect()
        };
        let result = write_batch(&mut db, &mut batch);
        if result.is_err() {
            // Put the keys back so the next checkpoint retries; the log still holds the records.
            let mut state = self.state.lock();
            for (entity, scope, key, _) in batch {
                state.dirty.insert((entity, scope, key));
            }
        }
        result
    }
}

/// The value of a row whose type code is in column `type_column` and its value in the next one.
fn row_value(
    row: &rusqlite::Row<'_>,
    type_column: usize,
    key: &str,
) -> Result<Value, AttributeError> {
    let value = type_column + 1;
    Ok(match row.get::<_, i64>(type_column)? {
        0 => Value::Bool(row.get::<_, i64>(value)? != 0),
        1 => Value::Long(row.get(value)?),
        2 => Value::Double(row.get(value)?),
        3 => Value::Str(row.get(value)?),
        4 => Value::Json(row.get(value)?),
        other => return Err(AttributeError::Corrupt(other, key.to_owned())),
    })
}

/// Writes `batch` in one transaction, sorted first in the table's key order (entity bytes, scope, key):
/// rows in a random order touch a random leaf page each, and with the small page cache the pages are read,
/// spilled to the WAL and written again; in key order each page is read and written once. The sort is
/// stable, so of two changes to one row the later still wins.
fn write_batch(db: &mut Connection, batch: &mut [Change]) -> Result<(), AttributeError> {
    batch.sort_by(|a, b| {
        (a.0, scope_code(a.1), a.2.as_str()).cmp(&(b.0, scope_code(b.1), b.2.as_str()))
    });
    let tx = db.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
                "INSERT OR REPLACE INTO attribute (entity, scope, key, ts, type, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
        let mut delete = tx.prepare_cached(
            "DELETE FROM attribute WHERE entity = ?1 AND scope = ?2 AND key = ?3",
        )?;
        for (entity, scope, key, current) in batch.iter() {
            let entity = entity.to_be_bytes();
            let scope = scope_code(*scope);
            let Some((ts, value)) = current else {
                delete.execute(params![&entity[..], scope, key])?;
                continue;
            };
            match value {
                Value::Bool(b) => {
                    stmt.execute(params![&entity[..], scope, key, ts, 0, i64::from(*b)])?
                }
                Value::Long(v) => stmt.execute(params![&entity[..], scope, key, ts, 1, v])?,
                Value::Double(v) => stmt.execute(params![&entity[..], scope, key, ts, 2, v])?,
                Value::Str(s) => stmt.execute(params![&entity[..], scope, key, ts, 3, s])?,
                Value::Json(s) => stmt.execute(params![&entity[..], scope, key, ts, 4, s])?,
            };
        }
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: Value) -> Kv {
        Kv {
            key: key.into(),
            value,
        }
    }

    #[test]
    fn persists_and_reloads_newest_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite3");
        {
            let store = AttributeStore::open(&path).unwrap();
            store.apply(
                7,
                AttributeScope::Client,
                10,
                &[kv("fw", Value::Str("1.0".into()))],
            );
            // Log order wins, not the timestamp: a clock stepping back must not drop an acknowledged write.
            store.apply(
                7,
                AttributeScope::Client,
                5,
                &[kv("fw", Value::Str("1.1".into()))],
            );
            store.apply(
                7,
                AttributeScope::Shared,
                5,
                &[kv("t", Value::Double(21.5)), kv("on", Value::Bool(true))],
            );
            store.persist().unwrap();
            store.apply(7, AttributeScope::Client, 30, &[kv("lost", Value::Long(1))]);
            // Not persisted: a crash loses it, and the log replays it.
        }
        let store = AttributeStore::open(&path).unwrap();
        let client = store.get(7, AttributeScope::Client, &[]);
        assert_eq!(client.len(), 1);
        assert_eq!(client[0].value, Value::Str("1.1".into()));
        assert_eq!(client[0].last_update_ts, 5);
        let shared = store.get(7, AttributeScope::Shared, &["t"]);
        assert_eq!(
            shared,
            vec![Attribute {
                key: "t".into(),
                last_update_ts: 5,
                value: Value::Double(21.5)
            }]
        );
        assert!(store.get(8, AttributeScope::Client, &[]).is_empty());
    }

    #[test]
    fn deletes_reach_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sqlite3");
        {
            let store = AttributeStore::open(&path).unwrap();
            store.apply(
                7,
                AttributeScope::Shared,
                1,
                &[kv("a", Value::Long(1)), kv("b", Value::Long(2))],
            );
            store.apply(7, AttributeScope::Server, 1, &[kv("s", Value::Long(3))]);
            store.apply(9, AttributeScope::Client, 1, &[kv("c", Value::Long(4))]);
            store.persist().unwrap();
            let removed = store.delete(7, AttributeScope::Shared, &["a".into(), "zz".into()]);
            assert_eq!(removed, vec!["a".to_string()]);
            // A key deleted before it was ever persisted leaves nothing behind either.
            store.apply(
                7,
                AttributeScope::Shared,
                2,
                &[kv("new", Value::Bool(true))],
            );
            store.delete(7, AttributeScope::Shared, &["new".into()]);
            store.delete(9, AttributeScope::Client, &["c".into()]);
            // A row only the database holds goes too.
            store
                .write_rows(
                    AttributeScope::Server,
                    &[(9, "active", 3, Value::Bool(true))],
                    true,
                )
                .unwrap();
            store.delete(9, AttributeScope::Server, &["active".into()]);
            store.persist().unwrap();
        }
        let store = AttributeStore::open(&path).unwrap();
        let shared = store.get(7, AttributeScope::Shared, &[]);
        assert_eq!(shared.len(), 1);
        assert_eq!(shared[0].key, "b");
        assert_eq!(store.get(7, AttributeScope::Server, &[]).len(), 1);
        assert!(store.get(9, AttributeScope::Client, &[]).is_empty());
        assert!(store.get(9, AttributeScope::Server, &[]).is_empty());
    }
}
