//! Customers (reference 4.2): a tenant's end customers, to whom devices are assigned and whose users see only
//! those devices. Stored like customers: the title is understood (unique per tenant), every other field a
//! client sent (`email`, `country`, `additionalInfo`, …) comes back unchanged. Deleting a customer unassigns
//! its devices and alarms and deletes its users.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::sql::{self, now_ms};
use crate::{Entities, EntityError, PageData, PageQuery};

/// Fields the server owns; they are never taken from, nor stored in, the opaque body.
pub const SERVER_FIELDS: &[&str] = &["id", "createdTime", "tenantId", "version", "name", "title"];

/// A customer's id as ThingsBoard writes "no customer".
pub use crate::NULL_UUID as NO_CUSTOMER;

#[derive(Debug, Clone, PartialEq)]
pub struct Customer {
    pub id: Uuid,
    pub created_time: i64,
    pub tenant_id: Uuid,
    pub title: String,
    pub version: i64,
    /// Everything else the client sent, without [`SERVER_FIELDS`].
    pub body: Map<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CustomerDraft {
    pub id: Option<Uuid>,
    /// `None` overwrites whatever is stored; `Some(v)` must equal the stored version.
    pub version: Option<i64>,
    pub title: String,
    /// The client's JSON object; server-managed fields in it are ignored.
    pub body: Map<String, Value>,
}

const COLUMNS: &str = "id, created_time, tenant_id, title, body, version";

fn from_row(row: &Row) -> rusqlite::Result<Customer> {
    let body = match sql::json(row, 4)? {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    Ok(Customer {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        tenant_id: sql::uuid(row, 2)?,
        title: row.get(3)?,
        body,
        version: row.get(5)?,
    })
}

fn by_id(conn: &Connection, id: Uuid) -> Result<Option<Customer>, EntityError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM customer WHERE id = ?1"),
            [id.to_string()],
            from_row,
        )
        .optional()?)
}

fn of_tenant(conn: &Connection, tenant_id: Uuid, id: Uuid) -> Result<Customer, EntityError> {
    match by_id(conn, id)? {
        Some(d) if d.tenant_id == tenant_id => Ok(d),
        _ => Err(EntityError::not_found("Customer", id)),
    }
}

impl Entities {
    /// Assigns a device of the tenant to its customer `customer_id`, or back to the tenant with `None`.
    pub fn assign_device(
        &self,
        tenant_id: Uuid,
        device_id: Uuid,
        customer_id: Option<Uuid>,
    ) -> Result<crate::Device, EntityError> {
        self.with_conn_and_cache(|conn, cache| {
            let tx = conn.transaction()?;
            if let Some(customer) = customer_id {
                of_tenant(&tx, tenant_id, customer)?;
            }
            let updated = tx.execute(
                "UPDATE device SET customer_id = ?3, version = version + 1 WHERE id = ?1 AND tenant_id = ?2",
                params![
                    device_id.to_string(),
                    tenant_id.to_string(),
                    customer_id.unwrap_or(NO_CUSTOMER).to_string()
                ],
            )?;
            if updated == 0 {
                return Err(EntityError::not_found("Device", device_id));
            }
            let device = crate::device::by_id(&tx, device_id)?
                .ok_or_else(|| EntityError::not_found("Device", device_id))?;
            tx.commit()?;
            cache.write().put_device(crate::DeviceAuth::of(&device));
            Ok(device)
        })
    }

    /// Creates or updates a customer of `tenant_id`.
    pub fn save_customer(
        &self,
        tenant_id: Uuid,
        draft: &CustomerDraft,
    ) -> Result<Customer, EntityError> {
        if draft.title.trim().is_empty() {
            return Err(EntityError::invalid("Customer title should be specified!"));
        }
        let mut body = draft.body.clone();
        for field in SERVER_FIELDS {
            body.remove(*field);
        }
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let old = draft
                .id
                .map(|id| of_tenant(&tx, tenant_id, id))
                .transpose()?;
            if let (Some(old), Some(version)) = (&old, draft.version) {
                if old.version != version {
                    return Err(EntityError::VersionConflict(
                        "Customer was already changed by someone else".into(),
                    ));
                }
            }
            let customer = Customer {
                id: draft.id.unwrap_or_else(Uuid::new_v4),
                created_time: old.as_ref().map_or_else(now_ms, |o| o.created_time),
                tenant_id,
                title: draft.title.clone(),
                version: old.as_ref().map_or(1, |o| o.version + 1),
                body,
            };
            let written = tx.execute(
                &sql::upsert("customer", COLUMNS),
                params![
                    customer.id.to_string(),
                    customer.created_time,
                    customer.tenant_id.to_string(),
                    customer.title,
                    Value::Object(customer.body.clone()).to_string(),
                    customer.version
                ],
            );
            match written {
                Err(e) if sql::is_unique_violation(&e) => {
                    return Err(EntityError::AlreadyExists(
                        "Customer with such title already exists!".into(),
                    ))
                }
                other => other?,
            };
            tx.commit()?;
            Ok(customer)
        })
    }

    /// The customer with this id, of any tenant (the caller checks ownership).
    pub fn customer(&self, id: Uuid) -> Result<Option<Customer>, EntityError> {
        self.with_conn(|conn| by_id(conn, id))
    }

    /// Deletes a customer of the tenant: its devices and alarms go back to the tenant, its users are
    /// deleted. One transaction.
    pub fn delete_customer(&self, tenant_id: Uuid, id: Uuid) -> Result<(), EntityError> {
        self.with_conn_and_cache(|conn, cache| {
            let tx = conn.transaction()?;
            of_tenant(&tx, tenant_id, id)?;
            let (customer, none) = (id.to_string(), NO_CUSTOMER.to_string());
            let devices: Vec<Uuid> = {
                let mut stmt = tx.prepare("SELECT id FROM device WHERE customer_id = ?1")?;
                let rows = stmt.query_map([&customer], |r| sql::uuid(r, 0))?;
                rows.collect::<Result<_, _>>()?
            };
            tx.execute(
                "UPDATE device SET customer_id = ?2, version = version + 1 WHERE customer_id = ?1",
                [&customer, &none],
            )?;
            tx.execute(
                "UPDATE alarm SET customer_id = ?2 WHERE customer_id = ?1",
                [&customer, &none],
            )?;
            tx.execute(
                "DELETE FROM user_activation WHERE user_id IN (SELECT id FROM tb_user WHERE customer_id = ?1)",
                [&customer],
            )?;
            tx.execute("DELETE FROM tb_user WHERE customer_id = ?1", [&customer])?;
            tx.execute("DELETE FROM customer WHERE id = ?1", [&customer])?;
            let unassigned = devices
                .into_iter()
                .filter_map(|d| crate::device::by_id(&tx, d).transpose())
                .collect::<Result<Vec<_>, _>>()?;
            tx.commit()?;
            let mut cache = cache.write();
            for device in &unassigned {
                cache.put_device(crate::DeviceAuth::of(device));
            }
            Ok(())
        })
    }

    /// The titles of the tenant's customers, by id (what DeviceInfo's `customerTitle` shows).
    pub fn customer_titles(
        &self,
        tenant_id: Uuid,
    ) -> Result<std::collections::HashMap<Uuid, String>, EntityError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare("SELECT id, title FROM customer WHERE tenant_id = ?1")?;
            let rows = stmt.query_map([tenant_id.to_string()], |r| {
                Ok((sql::uuid(r, 0)?, r.get(1)?))
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// The tenant's customer titled `title`.
    pub fn customer_by_title(
        &self,
        tenant_id: Uuid,
        title: &str,
    ) -> Result<Option<Customer>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    &format!("SELECT {COLUMNS} FROM customer WHERE tenant_id = ?1 AND title = ?2"),
                    params![tenant_id.to_string(), title],
                    from_row,
                )
                .optional()?)
        })
    }

    /// A page of the tenant's customers; text search on the title.
    pub fn customers(
        &self,
        tenant_id: Uuid,
        query: &PageQuery,
    ) -> Result<PageData<Customer>, EntityError> {
        let order = query.order_limit(
            &[
                ("createdTime", "created_time"),
                ("title", "title"),
                ("name", "title"),
            ],
            "created_time",
            "rowid",
        )?;
        let filter = "tenant_id = ?1 AND (?2 IS NULL OR instr(lower(title), lower(?2)) > 0)";
        let args = params![tenant_id.to_string(), query.search()];
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!("SELECT count(*) FROM customer WHERE {filter}"),
                args,
                |r| r.get(0),
            )?;
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM customer WHERE {filter} {order}"
            ))?;
            let rows = stmt
                .query_map(args, from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(query.page_of(rows, total))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(title: &str, body: Value) -> CustomerDraft {
        CustomerDraft {
            title: title.into(),
            body: body.as_object().cloned().unwrap_or_default(),
            ..CustomerDraft::default()
        }
    }

    #[test]
    fn round_trip_keeps_opaque_body() {
        let e = Entities::open_in_memory().unwrap();
        let t = e.create_tenant("T").unwrap().id;
        let config = json!({"widgets": {"w1": {"type": "latest", "sizeX": 8}}, "states": {}});
        let body = json!({"title": "ignored", "configuration": config, "mobileHide": true, "id": {"id": "x"}});
        let d = e.save_customer(t, &draft("Fleet", body)).unwrap();
        assert_eq!(d.version, 1);
        let got = e.customer(d.id).unwrap().unwrap();
        assert_eq!(got, d);
        assert_eq!(got.body["configuration"], config);
        assert_eq!(got.body["mobileHide"], json!(true));
        assert!(
            !got.body.contains_key("id"),
            "server fields are not stored in the body"
        );

        let mut update = draft("Fleet 2", json!({"configuration": {}}));
        update.id = Some(d.id);
        update.version = Some(1);
        let d2 = e.save_customer(t, &update).unwrap();
        assert_eq!(
            (d2.version, d2.title.as_str(), d2.created_time),
            (2, "Fleet 2", d.created_time)
        );
        let err = e.save_customer(t, &update).unwrap_err();
        assert!(matches!(err, EntityError::VersionConflict(_)), "{err}");

        let other = e.create_tenant("Other").unwrap().id;
        assert!(matches!(
            e.delete_customer(other, d.id),
            Err(EntityError::NotFound(_))
        ));
        e.delete_customer(t, d.id).unwrap();
        assert!(e.customer(d.id).unwrap().is_none());
        assert!(matches!(
            e.delete_customer(t, d.id),
            Err(EntityError::NotFound(_))
        ));
        assert!(e.save_customer(t, &draft(" ", json!({}))).is_err());
    }

    #[test]
    fn titles_are_unique_and_a_delete_returns_devices_to_the_tenant() {
        let e = Entities::open_in_memory().unwrap();
        let t = e.create_tenant("T").unwrap().id;
        let c = e
            .save_customer(t, &draft("Customer A", json!({"email": "a@x"})))
            .unwrap();
        assert!(matches!(
            e.save_customer(t, &draft("Customer A", json!({}))),
            Err(EntityError::AlreadyExists(_))
        ));
        assert_eq!(
            e.customer_by_title(t, "Customer A").unwrap().unwrap().id,
            c.id
        );
        let device = e
            .save_device(t, &crate::DeviceDraft::named("d"), None)
            .unwrap();
        let assigned = e.assign_device(t, device.id, Some(c.id)).unwrap();
        assert_eq!(
            (assigned.customer_id, assigned.version),
            (c.id, device.version + 1)
        );
        let other = e.create_tenant("Other").unwrap().id;
        assert!(matches!(
            e.assign_device(other, device.id, None),
            Err(EntityError::NotFound(_))
        ));
        assert!(matches!(
            e.assign_device(t, device.id, Some(Uuid::new_v4())),
            Err(EntityError::NotFound(_))
        ));
        e.delete_customer(t, c.id).unwrap();
        assert_eq!(
            e.device_by_id(device.id).unwrap().unwrap().customer_id,
            NO_CUSTOMER
        );
    }

    #[test]
    fn page_and_search() {
        let e = Entities::open_in_memory().unwrap();
        let t = e.create_tenant("T").unwrap().id;
        for title in ["Meters", "Trackers", "PLC meters"] {
            e.save_customer(t, &draft(title, json!({}))).unwrap();
        }
        let page = e
            .customers(t, &PageQuery::new(10, 0).with_text_search("METER"))
            .unwrap();
        let titles: Vec<_> = page.data.iter().map(|d| d.title.as_str()).collect();
        assert_eq!(titles, ["Meters", "PLC meters"]);
        let page = e.customers(t, &PageQuery::new(1, 1)).unwrap();
        assert_eq!(
            (page.total_elements, page.total_pages, page.has_next),
            (3, 3, true)
        );
        assert_eq!(page.data[0].title, "Trackers");
    }
}
