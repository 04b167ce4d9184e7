//! Tenants: the owners of devices, profiles and dashboards.

use rusqlite::{params, OptionalExtension, Row};
use uuid::Uuid;

use crate::page::{PageData, PageQuery};
use crate::sql::{self, now_ms};
use crate::{profile, DeviceChange, Entities, EntityError};

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

    /// Renames a tenant; NotFound if there is none with this id.
    pub fn rename_tenant(&self, id: Uuid, title: &str) -> Result<Tenant, EntityError> {
        if title.trim().is_empty() {
            return Err(EntityError::invalid("Tenant title should be specified!"));
        }
        self.with_conn(|conn| {
            let changed = conn.execute(
                "UPDATE tenant SET title = ?2 WHERE id = ?1",
                params![id.to_string(), title],
            )?;
            if changed == 0 {
                return Err(EntityError::NotFound(format!(
                    "Tenant with id [{id}] is not found"
                )));
            }
            Ok(conn.query_row(
                "SELECT id, created_time, title FROM tenant WHERE id = ?1",
                [id.to_string()],
                from_row,
            )?)
        })
    }

    /// A page of tenants (the system administrator's list). Text search: title, case-insensitive
    /// substring. Sort properties: createdTime, title (or name).
    pub fn tenant_page(&self, query: &PageQuery) -> Result<PageData<Tenant>, EntityError> {
        let order = query.order_limit(
            &[
                ("createdTime", "created_time"),
                ("title", "title"),
                ("name", "title"),
            ],
            "created_time",
            "rowid",
        )?;
        let filter = "?1 IS NULL OR instr(lower(title), lower(?1)) > 0";
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!("SELECT count(*) FROM tenant WHERE {filter}"),
                [query.search()],
                |r| r.get(0),
            )?;
            let mut stmt = conn.prepare(&format!(
                "SELECT id, created_time, title FROM tenant WHERE {filter} {order}"
            ))?;
            let rows = stmt
                .query_map([query.search()], from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(query.page_of(rows, total))
        })
    }

    /// Deletes a tenant and everything it owns (devices and their credentials, profiles, customers, users,
    /// dashboards, alarms, persistent RPC requests) in one transaction, then tells the change listeners
    /// of each device. Returns the deleted devices: their telemetry and attributes live in the time-series
    /// store, which the caller purges.
    pub fn delete_tenant(&self, id: Uuid) -> Result<Vec<Uuid>, EntityError> {
        let devices = self.with_conn_and_cache(|conn, cache| {
            let tx = conn.transaction()?;
            let tenant = id.to_string();
            let exists: Option<String> = tx
                .query_row("SELECT id FROM tenant WHERE id = ?1", [&tenant], |r| {
                    r.get(0)
                })
                .optional()?;
            if exists.is_none() {
                return Err(EntityError::NotFound(format!(
                    "Tenant with id [{id}] is not found"
                )));
            }
            let devices: Vec<Uuid> = {
                let mut stmt = tx.prepare("SELECT id FROM device WHERE tenant_id = ?1")?;
                let rows = stmt.query_map([&tenant], |r| sql::uuid(r, 0))?;
                rows.collect::<Result<_, _>>()?
            };
            for statement in [
                "DELETE FROM alarm WHERE tenant_id = ?1",
                "DELETE FROM rpc WHERE tenant_id = ?1",
                // Credentials go with their devices (ON DELETE CASCADE).
                "DELETE FROM device WHERE tenant_id = ?1",
                "DELETE FROM device_profile WHERE tenant_id = ?1",
                "DELETE FROM dashboard WHERE tenant_id = ?1",
                "DELETE FROM user_activation WHERE user_id IN (SELECT id FROM tb_user WHERE tenant_id = ?1)",
                "DELETE FROM tb_user WHERE tenant_id = ?1",
                "DELETE FROM customer WHERE tenant_id = ?1",
                "DELETE FROM tenant WHERE id = ?1",
            ] {
                tx.execute(statement, [&tenant])?;
            }
            tx.commit()?;
            let mut cache = cache.write();
            for device in &devices {
                cache.remove_device(*device);
            }
            Ok(devices)
        })?;
        {
            let mut alarms = self.alarm_index().write();
            for device in &devices {
                alarms.remove_originator(*device);
            }
        }
        for device in &devices {
            self.notify(DeviceChange::Deleted(*device));
        }
        Ok(devices)
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

    #[test]
    fn tenants_are_paged_renamed_and_deleted_with_what_they_own() {
        use crate::user::NewUser;
        use crate::DeviceDraft;

        let e = Entities::open_in_memory().unwrap();
        let kept = e.create_tenant("Kept").unwrap();
        let doomed = e.create_tenant("Doomed").unwrap();
        let page = e
            .tenant_page(&PageQuery::new(10, 0).with_text_search("doom"))
            .unwrap();
        assert_eq!(page.data, vec![doomed.clone()]);
        assert_eq!(
            e.tenant_page(&PageQuery::new(1, 0)).unwrap().total_elements,
            2
        );
        assert_eq!(e.rename_tenant(doomed.id, "Gone").unwrap().title, "Gone");
        assert!(matches!(
            e.rename_tenant(Uuid::new_v4(), "x"),
            Err(EntityError::NotFound(_))
        ));

        let mut devices = Vec::new();
        for tenant in [kept.id, doomed.id] {
            let device = e
                .save_device(tenant, &DeviceDraft::named("thermostat"), None)
                .unwrap();
            devices.push(device.id);
            e.create_user(&NewUser::tenant_admin(
                tenant,
                &format!("admin-{tenant}@example.com"),
                "pw",
            ))
            .unwrap();
        }
        let deleted = e.delete_tenant(doomed.id).unwrap();
        assert_eq!(deleted, vec![devices[1]]);
        assert_eq!(e.tenant(doomed.id).unwrap(), None);
        assert!(e.device_by_id(devices[1]).unwrap().is_none());
        assert!(e.device_by_id(devices[0]).unwrap().is_some());
        assert!(e
            .user_by_email(&format!("admin-{}@example.com", doomed.id))
            .unwrap()
            .is_none());
        assert!(e.default_device_profile(doomed.id).unwrap().is_none());
        assert!(matches!(
            e.delete_tenant(doomed.id),
            Err(EntityError::NotFound(_))
        ));
    }
}
