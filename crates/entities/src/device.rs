//! Devices. Names are unique per tenant; every device has exactly one credentials row, created with it.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::credentials::{self, CredentialsDraft};
use crate::device_auth::DeviceAuth;
use crate::password::random_alphanumeric;
use crate::profile::{self, DeviceProfile};
use crate::sql::{self, id_text, json_text, now_ms};
use crate::{DeviceChange, Entities, EntityError, PageData, PageQuery, NULL_UUID};

#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub id: Uuid,
    pub created_time: i64,
    pub tenant_id: Uuid,
    pub customer_id: Uuid,
    pub name: String,
    pub label: Option<String>,
    pub profile_id: Uuid,
    /// The device's `type`: its profile's name, always (as ThingsBoard overwrites it on save).
    pub profile_name: String,
    pub device_data: Value,
    pub firmware_id: Option<Uuid>,
    pub software_id: Option<Uuid>,
    pub external_id: Option<Uuid>,
    pub additional_info: Option<Value>,
    pub version: i64,
}

impl Device {
    /// A gateway is a device whose `additionalInfo.gateway` is `true`.
    pub fn is_gateway(&self) -> bool {
        self.additional_info
            .as_ref()
            .and_then(|info| info.get("gateway"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// A device to create (`id` = None) or update.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceDraft {
    pub id: Option<Uuid>,
    /// `None` overwrites whatever is stored; `Some(v)` must equal the stored version.
    pub version: Option<i64>,
    pub name: String,
    pub label: Option<String>,
    /// Wins over `type_name` when both are given.
    pub profile_id: Option<Uuid>,
    /// The profile to use by name, created if missing; when neither this nor `profile_id` is given, the
    /// tenant's default profile.
    pub type_name: Option<String>,
    pub device_data: Option<Value>,
    pub firmware_id: Option<Uuid>,
    pub software_id: Option<Uuid>,
    pub external_id: Option<Uuid>,
    pub additional_info: Option<Value>,
}

impl DeviceDraft {
    pub fn named(name: &str) -> DeviceDraft {
        DeviceDraft {
            name: name.to_string(),
            ..DeviceDraft::default()
        }
    }
}

/// Optional filters of a device page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceFilter {
    /// `type`: the profile name.
    pub profile_name: Option<String>,
    pub profile_id: Option<Uuid>,
    /// Only the devices assigned to this customer.
    pub customer_id: Option<Uuid>,
}

const SELECT: &str = "SELECT d.id, d.created_time, d.tenant_id, d.customer_id, d.name, d.label, \
    d.device_profile_id, p.name, d.device_data, d.firmware_id, d.software_id, d.external_id, \
    d.additional_info, d.version FROM device d JOIN device_profile p ON p.id = d.device_profile_id";

const WRITE_COLUMNS: &str =
    "id, created_time, tenant_id, customer_id, name, label, device_profile_id, \
    device_data, firmware_id, software_id, external_id, additional_info, version";

fn from_row(row: &Row) -> rusqlite::Result<Device> {
    Ok(Device {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        tenant_id: sql::uuid(row, 2)?,
        customer_id: sql::uuid(row, 3)?,
        name: row.get(4)?,
        label: row.get(5)?,
        profile_id: sql::uuid(row, 6)?,
        profile_name: row.get(7)?,
        device_data: sql::json(row, 8)?,
        firmware_id: sql::opt_uuid(row, 9)?,
        software_id: sql::opt_uuid(row, 10)?,
        external_id: sql::opt_uuid(row, 11)?,
        additional_info: sql::opt_json(row, 12)?,
        version: row.get(13)?,
    })
}

pub(crate) fn by_id(conn: &Connection, id: Uuid) -> Result<Option<Device>, EntityError> {
    Ok(conn
        .query_row(
            &format!("{SELECT} WHERE d.id = ?1"),
            [id.to_string()],
            from_row,
        )
        .optional()?)
}

/// The device of `tenant_id` with this id, or NotFound.
pub(crate) fn of_tenant(
    conn: &Connection,
    tenant_id: Uuid,
    id: Uuid,
) -> Result<Device, EntityError> {
    match by_id(conn, id)? {
        Some(device) if device.tenant_id == tenant_id => Ok(device),
        _ => Err(EntityError::not_found("Device", id)),
    }
}

/// Every device, for loading the credentials cache.
pub(crate) fn all(conn: &Connection) -> Result<Vec<Device>, EntityError> {
    let mut stmt = conn.prepare(SELECT)?;
    let rows = stmt.query_map([], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// ThingsBoard keeps a device's `deviceData` in step with its profile: DEFAULT configuration and a
/// transport configuration of the profile's transport type. Given data that fits is kept as is.
fn synced_device_data(given: Option<&Value>, profile: &DeviceProfile) -> Value {
    let fits = given.is_some_and(|data| {
        data.pointer("/configuration/type").and_then(Value::as_str) == Some("DEFAULT")
            && data
                .pointer("/transportConfiguration/type")
                .and_then(Value::as_str)
                == Some(profile.transport_type.as_str())
    });
    match given {
        Some(data) if fits => data.clone(),
        _ => json!({
            "configuration": {"type": "DEFAULT"},
            "transportConfiguration": {"type": profile.transport_type},
        }),
    }
}

fn resolve_profile(
    conn: &Connection,
    tenant_id: Uuid,
    draft: &DeviceDraft,
) -> Result<DeviceProfile, EntityError> {
    if let Some(id) = draft.profile_id {
        return match profile::by_id(conn, id)? {
            Some(p) if p.tenant_id == tenant_id => Ok(p),
            _ => Err(EntityError::invalid(
                "Device is referencing non existing device profile!",
            )),
        };
    }
    match draft.type_name.as_deref().filter(|t| !t.trim().is_empty()) {
        Some(name) => profile::find_or_create(conn, tenant_id, name),
        None => profile::default_of(conn, tenant_id)?.ok_or_else(|| {
            EntityError::invalid("Default device profile is not found for the tenant!")
        }),
    }
}

/// Validates and writes a draft inside the caller's transaction; returns the device and, when created,
/// its new credentials.
fn save(
    conn: &Connection,
    tenant_id: Uuid,
    draft: &DeviceDraft,
    credentials: Option<&CredentialsDraft>,
) -> Result<(Device, Option<credentials::DeviceCredentials>), EntityError> {
    if draft.name.trim().is_empty() {
        return Err(EntityError::invalid("Device name should be specified!"));
    }
    let old = draft
        .id
        .map(|id| of_tenant(conn, tenant_id, id))
        .transpose()?;
    if let (Some(old), Some(version)) = (&old, draft.version) {
        if old.version != version {
            return Err(EntityError::VersionConflict(
                "Device was already changed by someone else".into(),
            ));
        }
    }
    let profile = resolve_profile(conn, tenant_id, draft)?;
    let id = draft.id.unwrap_or_else(Uuid::new_v4);
    let taken: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM device WHERE tenant_id = ?1 AND name = ?2 AND id != ?3)",
        params![tenant_id.to_string(), draft.name, id.to_string()],
        |r| r.get(0),
    )?;
    if taken {
        return Err(EntityError::AlreadyExists(
            "Device with such name already exists!".into(),
        ));
    }
    let device = Device {
        id,
        created_time: old.as_ref().map_or_else(now_ms, |o| o.created_time),
        tenant_id,
        customer_id: old.as_ref().map_or(NULL_UUID, |o| o.customer_id),
        name: draft.name.clone(),
        label: draft.label.clone(),
        profile_id: profile.id,
        device_data: synced_device_data(draft.device_data.as_ref(), &profile),
        profile_name: profile.name,
        firmware_id: draft.firmware_id,
        software_id: draft.software_id,
        external_id: draft.external_id,
        additional_info: draft.additional_info.clone(),
        version: old.as_ref().map_or(1, |o| o.version + 1),
    };
    conn.execute(
        &sql::upsert("device", WRITE_COLUMNS),
        params![
            device.id.to_string(),
            device.created_time,
            device.tenant_id.to_string(),
            device.customer_id.to_string(),
            device.name,
            device.label,
            device.profile_id.to_string(),
            device.device_data.to_string(),
            id_text(device.firmware_id),
            id_text(device.software_id),
            id_text(device.external_id),
            json_text(&device.additional_info),
            device.version,
        ],
    )?;
    if old.is_some() {
        return Ok((device, None));
    }
    let generated;
    let credentials = match credentials {
        Some(c) => c,
        None => {
            generated = CredentialsDraft::access_token(&random_alphanumeric(20));
            &generated
        }
    };
    let created = credentials::insert(conn, device.id, credentials)?;
    Ok((device, Some(created)))
}

impl Entities {
    /// Creates or updates a device of `tenant_id`. On create, `credentials` (or, when `None`, a random
    /// 20-character access token) are created in the same transaction; on update they are ignored.
    pub fn save_device(
        &self,
        tenant_id: Uuid,
        draft: &DeviceDraft,
        credentials: Option<&CredentialsDraft>,
    ) -> Result<Device, EntityError> {
        self.with_conn_and_cache(|conn, cache| {
            let tx = conn.transaction()?;
            let (device, created) = save(&tx, tenant_id, draft, credentials)?;
            tx.commit()?;
            let mut cache = cache.write();
            cache.put_device(DeviceAuth::of(&device));
            if let Some(created) = &created {
                cache.put_credentials(created);
            }
            Ok(device)
        })
    }

    /// The device with this id if it belongs to `tenant_id`.
    pub fn device(&self, tenant_id: Uuid, device_id: Uuid) -> Result<Option<Device>, EntityError> {
        Ok(self
            .device_by_id(device_id)?
            .filter(|device| device.tenant_id == tenant_id))
    }

    /// The device with this id, of any tenant (the caller checks ownership).
    pub fn device_by_id(&self, device_id: Uuid) -> Result<Option<Device>, EntityError> {
        self.with_conn(|conn| by_id(conn, device_id))
    }

    pub fn device_by_name(
        &self,
        tenant_id: Uuid,
        name: &str,
    ) -> Result<Option<Device>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    &format!("{SELECT} WHERE d.tenant_id = ?1 AND d.name = ?2"),
                    params![tenant_id.to_string(), name],
                    from_row,
                )
                .optional()?)
        })
    }

    /// The tenant's devices among `ids`, in the order given; unknown ids are skipped.
    pub fn devices_by_ids(
        &self,
        tenant_id: Uuid,
        ids: &[Uuid],
    ) -> Result<Vec<Device>, EntityError> {
        self.with_conn(|conn| {
            let mut found = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(device) = by_id(conn, *id)?.filter(|d| d.tenant_id == tenant_id) {
                    found.push(device);
                }
            }
            Ok(found)
        })
    }

    /// Deletes a device, its credentials, alarms and persistent RPC requests, then tells the change
    /// listeners.
    pub fn delete_device(&self, tenant_id: Uuid, device_id: Uuid) -> Result<(), EntityError> {
        self.with_conn_and_cache(|conn, cache| {
            let tx = conn.transaction()?;
            of_tenant(&tx, tenant_id, device_id)?;
            // Credentials go with the device (ON DELETE CASCADE); alarms, as in ThingsBoard, too. The
            // alarm table has no foreign key because an originator need not be a device.
            tx.execute(
                "DELETE FROM alarm WHERE originator_type = 'DEVICE' AND originator_id = ?1",
                [device_id.to_string()],
            )?;
            tx.execute(
                "DELETE FROM rpc WHERE device_id = ?1",
                [device_id.to_string()],
            )?;
            tx.execute("DELETE FROM device WHERE id = ?1", [device_id.to_string()])?;
            tx.commit()?;
            cache.write().remove_device(device_id);
            self.alarm_index().write().remove_originator(device_id);
            Ok(())
        })?;
        self.notify(DeviceChange::Deleted(device_id));
        Ok(())
    }

    /// A page of the tenant's devices. Text search: name or label, case-insensitive substring.
    /// Sort properties: createdTime, name, deviceProfileName (or type), label, customerTitle.
    pub fn devices(
        &self,
        tenant_id: Uuid,
        filter: &DeviceFilter,
        query: &PageQuery,
    ) -> Result<PageData<Device>, EntityError> {
        let order = query.order_limit(
            &[
                ("createdTime", "d.created_time"),
                ("name", "d.name"),
                ("deviceProfileName", "p.name"),
                ("type", "p.name"),
                ("label", "d.label"),
                // No customers yet: every device has the same (empty) customer title.
                ("customerTitle", "d.customer_id"),
            ],
            "d.created_time",
            "d.rowid",
        )?;
        let conditions = "d.tenant_id = ?1 AND (?2 IS NULL OR p.name = ?2) AND (?3 IS NULL OR d.device_profile_id = ?3)
            AND (?4 IS NULL OR instr(lower(d.name), lower(?4)) > 0 OR instr(lower(coalesce(d.label, '')), lower(?4)) > 0)
            AND (?5 IS NULL OR d.customer_id = ?5)";
        let args = params![
            tenant_id.to_string(),
            filter.profile_name,
            id_text(filter.profile_id),
            query.search(),
            id_text(filter.customer_id)
        ];
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!(
                    "SELECT count(*) FROM device d JOIN device_profile p ON p.id = d.device_profile_id \
                     WHERE {conditions}"
                ),
                args,
                |r| r.get(0),
            )?;
            let mut stmt = conn.prepare(&format!("{SELECT} WHERE {conditions} {order}"))?;
            let rows = stmt.query_map(args, from_row)?.collect::<Result<Vec<_>, _>>()?;
            Ok(query.page_of(rows, total))
        })
    }

    /// The distinct device types (profile names) in use by the tenant's devices, sorted.
    pub fn device_types(&self, tenant_id: Uuid) -> Result<Vec<String>, EntityError> {
        self.with_conn(|conn| {
            let mut stmt = conn.prepare(
                "SELECT DISTINCT p.name FROM device d JOIN device_profile p ON p.id = d.device_profile_id
                 WHERE d.tenant_id = ?1 ORDER BY p.name",
            )?;
            let rows = stmt.query_map([tenant_id.to_string()], |r| r.get(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }
}

#[cfg(test)]
#[path = "device_tests.rs"]
mod tests;
