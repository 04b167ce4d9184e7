//! [`Entities`]: the shared handle over the SQLite database, the credentials cache, the active-alarm
//! index and the change listeners.
//!
//! One connection behind a mutex: entity writes are rare next to telemetry (device creation is the
//! busiest path, thousands per minute at most), each call is one short transaction, and a single writer
//! is what SQLite allows anyway. Lock order: the connection first, then the credentials cache, then the
//! active-alarm index, so the in-memory copies always change in the same order as the database; lookups
//! take only their read lock.

use std::path::Path;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use rusqlite::Connection;
use uuid::Uuid;

use crate::alarm_index::ActiveAlarms;
use crate::device_auth::AuthCache;
use crate::{schema, EntityError};

/// What happened to a device, for whoever holds its sessions (the transports close them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChange {
    /// The device was deleted.
    Deleted(Uuid),
    /// The device's credentials changed: sessions opened with the old ones must go.
    CredentialsChanged(Uuid),
}

type Listener = Box<dyn Fn(DeviceChange) + Send + Sync>;

/// Cheap to clone (one `Arc`). See the crate docs for the blocking behaviour.
#[derive(Clone)]
pub struct Entities(Arc<Inner>);

struct Inner {
    conn: Mutex<Connection>,
    auth: RwLock<AuthCache>,
    alarms: RwLock<ActiveAlarms>,
    listeners: RwLock<Vec<Listener>>,
}

impl Entities {
    /// Opens (creating if needed) the database at `path`, migrates it, and loads the credentials cache
    /// and the active-alarm index.
    pub fn open(path: &Path) -> Result<Entities, EntityError> {
        let conn = Connection::open(path).map_err(|e| EntityError::Open {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Entities::from_connection(conn)
    }

    /// A private database in memory, for tests.
    pub fn open_in_memory() -> Result<Entities, EntityError> {
        Entities::from_connection(Connection::open_in_memory()?)
    }

    fn from_connection(mut conn: Connection) -> Result<Entities, EntityError> {
        // WAL lets the (future) readers run beside the writer; FULL makes every committed REST write
        // survive power loss, which the durability contract promises for REST writes.
        let _mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let found = schema::migrate(&mut conn)?;
        if found != schema::SCHEMA_VERSION {
            tracing::info!(
                from = found,
                to = schema::SCHEMA_VERSION,
                "entity store schema migrated"
            );
        }
        let auth = AuthCache::load(&conn)?;
        let alarms = ActiveAlarms::load(&conn)?;
        Ok(Entities(Arc::new(Inner {
            conn: Mutex::new(conn),
            auth: RwLock::new(auth),
            alarms: RwLock::new(alarms),
            listeners: RwLock::new(Vec::new()),
        })))
    }

    /// Registers a callback run after a device is deleted or its credentials change (after the commit,
    /// on the thread that made the change; keep it short and non-blocking).
    pub fn on_device_change(&self, callback: Box<dyn Fn(DeviceChange) + Send + Sync>) {
        self.0.listeners.write().push(callback);
    }

    /// Runs `f` on the connection (under the lock). `f` opens its own transaction when it writes.
    pub(crate) fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, EntityError>,
    ) -> Result<T, EntityError> {
        let mut conn = self.0.conn.lock();
        f(&mut conn)
    }

    /// Runs `f` on the connection and the credentials cache together, so the cache is updated in commit
    /// order. `f` must only change the cache after its transaction committed.
    pub(crate) fn with_conn_and_cache<T>(
        &self,
        f: impl FnOnce(&mut Connection, &RwLock<AuthCache>) -> Result<T, EntityError>,
    ) -> Result<T, EntityError> {
        let mut conn = self.0.conn.lock();
        f(&mut conn, &self.0.auth)
    }

    /// Runs `f` on the connection and the active-alarm index together; as with the credentials cache,
    /// `f` changes the index only after its transaction committed.
    pub(crate) fn with_conn_and_alarms<T>(
        &self,
        f: impl FnOnce(&mut Connection, &RwLock<ActiveAlarms>) -> Result<T, EntityError>,
    ) -> Result<T, EntityError> {
        let mut conn = self.0.conn.lock();
        f(&mut conn, &self.0.alarms)
    }

    pub(crate) fn alarm_index(&self) -> &RwLock<ActiveAlarms> {
        &self.0.alarms
    }

    pub(crate) fn cache(&self) -> &RwLock<AuthCache> {
        &self.0.auth
    }

    pub(crate) fn notify(&self, change: DeviceChange) {
        for listener in self.0.listeners.read().iter() {
            listener(change);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_creates_file_in_wal_mode_and_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.sqlite3");
        {
            let e = Entities::open(&path).unwrap();
            let mode: String = e
                .with_conn(|c| Ok(c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?))
                .unwrap();
            assert_eq!(mode, "wal");
            e.create_tenant("T").unwrap();
        }
        let e = Entities::open(&path).unwrap();
        assert_eq!(e.tenants().unwrap().len(), 1);
    }
}
