//! Small conversions between Rust values and SQLite columns, shared by the entity modules.

use rusqlite::types::Type;
use rusqlite::Row;
use serde_json::Value;
use uuid::Uuid;

/// Milliseconds since the Unix epoch, ThingsBoard's time unit.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn conversion_error(
    idx: usize,
    err: impl std::error::Error + Send + Sync + 'static,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, Box::new(err))
}

pub(crate) fn uuid(row: &Row, idx: usize) -> rusqlite::Result<Uuid> {
    let text: String = row.get(idx)?;
    Uuid::parse_str(&text).map_err(|e| conversion_error(idx, e))
}

pub(crate) fn opt_uuid(row: &Row, idx: usize) -> rusqlite::Result<Option<Uuid>> {
    let text: Option<String> = row.get(idx)?;
    text.map(|t| Uuid::parse_str(&t).map_err(|e| conversion_error(idx, e)))
        .transpose()
}

pub(crate) fn json(row: &Row, idx: usize) -> rusqlite::Result<Value> {
    let text: String = row.get(idx)?;
    serde_json::from_str(&text).map_err(|e| conversion_error(idx, e))
}

pub(crate) fn opt_json(row: &Row, idx: usize) -> rusqlite::Result<Option<Value>> {
    let text: Option<String> = row.get(idx)?;
    text.map(|t| serde_json::from_str(&t).map_err(|e| conversion_error(idx, e)))
        .transpose()
}

pub(crate) fn id_text(id: Option<Uuid>) -> Option<String> {
    id.map(|u| u.to_string())
}

pub(crate) fn json_text(value: &Option<Value>) -> Option<String> {
    value.as_ref().map(Value::to_string)
}

/// True when a unique or primary-key constraint refused the statement.
pub(crate) fn is_unique_violation(err: &rusqlite::Error) -> bool {
    matches!(
        err,
        rusqlite::Error::SqliteFailure(e, _)
            if e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || e.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

/// `INSERT … ON CONFLICT (id) DO UPDATE SET …` for `columns` (comma-separated, `id` first). An upsert
/// updates the row in place: `INSERT OR REPLACE` would delete it first and cascade to rows that
/// reference it.
pub(crate) fn upsert(table: &str, columns: &str) -> String {
    let names: Vec<&str> = columns.split(',').map(str::trim).collect();
    let placeholders: Vec<String> = (1..=names.len()).map(|i| format!("?{i}")).collect();
    let updates: Vec<String> = names
        .iter()
        .filter(|n| **n != "id")
        .map(|n| format!("{n} = excluded.{n}"))
        .collect();
    format!(
        "INSERT INTO {table} ({}) VALUES ({}) ON CONFLICT (id) DO UPDATE SET {}",
        names.join(", "),
        placeholders.join(", "),
        updates.join(", ")
    )
}
