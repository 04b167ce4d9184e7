//! Tenants: the owners of devices, profiles and dashboards.

use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

use crate::sql::{self, now_ms};
use crate::{profile, Entities, EntityError};

#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    pub id: Uuid,
    pub created_time: i64,
    pub title: String,
}

fn from_row(row: &Row) -> rusqlite::Result<Tenant> {
    Ok(Tenant {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        title: row.get(2)?,
    })
}

impl Entities {
    /// Creates a tenant together with its default device profile `default`, as ThingsBoard does.
    pub fn create_tenant(&self, title: &str) -> Result<Tenant, EntityError> {
        if title.trim().is_empty() {
            return Err(EntityError::invalid("Tenant title should be specified!"));
        }
        let tenant = Tenant {
            id: Uuid::new_v4(),
            created_time: now_ms(),
            title: title.to_string(),
        };
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            tx.execute(
                "INSERT INTO tenant (id, created_time, title) VALUES (?1, ?2, ?3)",
                params![tenant.id.to_string(), tenant.created_time, tenant.title],
            )?;
            profile::insert_default(&tx, tenant.id)?;
            tx.commit()?;
            Ok(())
        })?;
        Ok(tenant)
    }

    pub fn tenant(&self, id: Uuid) -> Result<Option<Tenant>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    "SELECT id, created_time, title FROM tenant WHERE id = ?1",
                    [id.to_string()],
                    from_row,
                )
                .optional()?)
        })
    }

    /// Every tenant, oldest first.
    pub fn tenants(&self) -> Result<Vec<Tenant>, EntityError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare(
                "SELECT id, created_time, title FROM tenant ORDER BY created_time, rowid",
            )?;
            let rows = stmt.query_map([], from_row)?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_tenant_makes_default_profile() {
        let e = Entities::open_in_memory().unwrap();
        let t = e.create_tenant("Tenant").unwrap();
        assert_eq!(e.tenant(t.id).unwrap(), Some(t.clone()));
        let p = e.default_device_profile(t.id).unwrap().unwrap();
        assert_eq!(p.name, "default");
        assert!(p.is_default);
        assert!(e.create_tenant("  ").is_err());
        assert_eq!(e.tenant(Uuid::new_v4()).unwrap(), None);
    }
}
