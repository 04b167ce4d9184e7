//! The tables, and the migrations that build them.
//!
//! `PRAGMA user_version` holds the number of migrations applied. Opening applies the missing ones in one
//! transaction, and refuses a database whose version is newer than this binary knows (a downgrade would
//! silently ignore columns it does not understand).
//!
//! Ids are UUID strings, times epoch milliseconds, JSON documents text, booleans 0/1. Customers do not exist yet:
//! `customer_id` columns hold ThingsBoard's NULL_UUID.

use rusqlite::Connection;

use crate::EntityError;

/// Migration `i` brings the schema from version `i` to `i + 1`. Append only; never edit a released one.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    "CREATE TABLE tenant (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        title TEXT NOT NULL
    );
    CREATE TABLE tb_user (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        tenant_id TEXT NOT NULL,
        customer_id TEXT NOT NULL,
        email TEXT NOT NULL,
        authority TEXT NOT NULL,
        first_name TEXT,
        last_name TEXT,
        enabled INTEGER NOT NULL,
        password_hash TEXT NOT NULL,
        additional_info TEXT
    );
    CREATE UNIQUE INDEX tb_user_email ON tb_user (email COLLATE NOCASE);
    CREATE TABLE device_profile (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        tenant_id TEXT NOT NULL REFERENCES tenant (id),
        name TEXT NOT NULL,
        description TEXT,
        image TEXT,
        type TEXT NOT NULL,
        transport_type TEXT NOT NULL,
        provision_type TEXT NOT NULL,
        default_rule_chain_id TEXT,
        default_dashboard_id TEXT,
        default_queue_name TEXT,
        default_edge_rule_chain_id TEXT,
        profile_data TEXT NOT NULL,
        provision_device_key TEXT UNIQUE,
        firmware_id TEXT,
        software_id TEXT,
        external_id TEXT,
        is_default INTEGER NOT NULL,
        version INTEGER NOT NULL,
        UNIQUE (tenant_id, name)
    );
    CREATE TABLE device (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        tenant_id TEXT NOT NULL REFERENCES tenant (id),
        customer_id TEXT NOT NULL,
        name TEXT NOT NULL,
        label TEXT,
        device_profile_id TEXT NOT NULL REFERENCES device_profile (id),
        device_data TEXT NOT NULL,
        firmware_id TEXT,
        software_id TEXT,
        external_id TEXT,
        additional_info TEXT,
        version INTEGER NOT NULL,
        UNIQUE (tenant_id, name)
    );
    CREATE INDEX device_tenant_created ON device (tenant_id, created_time);
    CREATE INDEX device_profile_ref ON device (device_profile_id);
    CREATE TABLE device_credentials (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        device_id TEXT NOT NULL UNIQUE REFERENCES device (id) ON DELETE CASCADE,
        credentials_type TEXT NOT NULL,
        credentials_id TEXT NOT NULL UNIQUE,
        credentials_value TEXT,
        version INTEGER NOT NULL
    );
    CREATE TABLE dashboard (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        tenant_id TEXT NOT NULL REFERENCES tenant (id),
        title TEXT NOT NULL,
        body TEXT NOT NULL,
        version INTEGER NOT NULL
    );
    CREATE INDEX dashboard_tenant_created ON dashboard (tenant_id, created_time);",
    // 2: alarms. The partial unique index is ThingsBoard's rule in the database: at most one active
    // (uncleared) alarm per originator and type. Severity is stored by name; queries rank it.
    "CREATE TABLE alarm (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        tenant_id TEXT NOT NULL REFERENCES tenant (id),
        customer_id TEXT NOT NULL,
        type TEXT NOT NULL,
        originator_type TEXT NOT NULL,
        originator_id TEXT NOT NULL,
        severity TEXT NOT NULL,
        acknowledged INTEGER NOT NULL,
        cleared INTEGER NOT NULL,
        assignee_id TEXT,
        start_ts INTEGER NOT NULL,
        end_ts INTEGER NOT NULL,
        ack_ts INTEGER NOT NULL,
        clear_ts INTEGER NOT NULL,
        assign_ts INTEGER NOT NULL,
        details TEXT,
        propagate INTEGER NOT NULL,
        propagate_to_owner INTEGER NOT NULL,
        propagate_to_tenant INTEGER NOT NULL,
        propagate_relation_types TEXT NOT NULL
    );
    CREATE UNIQUE INDEX alarm_active ON alarm (originator_id, type) WHERE cleared = 0;
    CREATE INDEX alarm_originator_created ON alarm (originator_id, created_time);
    CREATE INDEX alarm_tenant_created ON alarm (tenant_id, created_time);",
    // 3: how far each ingest partition's alarm-rule transitions are written: the next log offset whose
    // record has not had its transitions committed. A replay after a crash evaluates records below it
    // without writing again what they caused (and what a user may have cleared since).
    "CREATE TABLE rule_watermark (
        partition INTEGER PRIMARY KEY,
        next_offset INTEGER NOT NULL
    );",
    // 4: persistent server-side RPC requests.
    "CREATE TABLE rpc (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        tenant_id TEXT NOT NULL,
        device_id TEXT NOT NULL,
        expiration_time INTEGER NOT NULL,
        oneway INTEGER NOT NULL,
        method TEXT NOT NULL,
        params TEXT NOT NULL,
        response TEXT,
        status TEXT NOT NULL,
        additional_info TEXT
    );
    CREATE INDEX rpc_device_created ON rpc (device_id, created_time);
    CREATE INDEX rpc_unfinished ON rpc (status) WHERE status IN ('QUEUED', 'SENT', 'DELIVERED');",
    // 5: customers. Devices, users and alarms already carry a customer_id (NULL_UUID: none).
    "CREATE TABLE customer (
        id TEXT PRIMARY KEY,
        created_time INTEGER NOT NULL,
        tenant_id TEXT NOT NULL REFERENCES tenant (id),
        title TEXT NOT NULL,
        body TEXT NOT NULL,
        version INTEGER NOT NULL,
        UNIQUE (tenant_id, title)
    );
    CREATE INDEX device_customer ON device (customer_id);",
    // 6: activation tokens of users created by an administrator, until they set their password.
    "CREATE TABLE user_activation (
        token TEXT PRIMARY KEY,
        user_id TEXT NOT NULL UNIQUE,
        created_time INTEGER NOT NULL
    );",
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Brings the database to [`SCHEMA_VERSION`]; returns the version it found.
pub(crate) fn migrate(conn: &mut Connection) -> Result<u32, EntityError> {
    let found: u32 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(EntityError::Open {
            path: conn.path().unwrap_or_default().into(),
            reason: format!("schema version {found} is newer than this binary's {SCHEMA_VERSION}"),
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(found);
    }
    let tx = conn.transaction()?;
    for migration in &MIGRATIONS[found as usize..] {
        tx.execute_batch(migration)?;
    }
    // PRAGMA takes no bound parameters; the value is our own constant.
    tx.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))?;
    tx.commit()?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_once_and_records_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), 0);
        assert_eq!(migrate(&mut conn).unwrap(), SCHEMA_VERSION);
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            tables,
            [
                "alarm",
                "customer",
                "dashboard",
                "device",
                "device_credentials",
                "device_profile",
                "rpc",
                "rule_watermark",
                "tb_user",
                "tenant",
                "user_activation"
            ]
        );
    }

    #[test]
    fn upgrades_a_version_1_database_keeping_its_rows() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch("PRAGMA user_version = 1").unwrap();
        conn.execute(
            "INSERT INTO tenant (id, created_time, title) VALUES ('t', 1, 'T')",
            [],
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), 1);
        let title: String = conn
            .query_row("SELECT title FROM tenant", [], |r| r.get(0))
            .unwrap();
        assert_eq!(title, "T");
        let alarms: i64 = conn
            .query_row("SELECT count(*) FROM alarm", [], |r| r.get(0))
            .unwrap();
        assert_eq!(alarms, 0);
    }

    #[test]
    fn refuses_newer_schema() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!("PRAGMA user_version = {}", SCHEMA_VERSION + 1))
            .unwrap();
        let err = migrate(&mut conn).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }
}
