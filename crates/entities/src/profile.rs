//! Device profiles. Each tenant has exactly one default profile (created with the tenant); devices
//! reference a profile, and a device's `type` is its profile's name.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde_json::{json, Value};
use uuid::Uuid;

use crate::sql::{self, id_text, now_ms};
use crate::{Entities, EntityError, PageData, PageQuery};

const PROFILE_TYPES: &[&str] = &["DEFAULT"];
const TRANSPORT_TYPES: &[&str] = &["DEFAULT", "MQTT", "COAP", "LWM2M", "SNMP"];
const PROVISION_TYPES: &[&str] = &[
    "DISABLED",
    "ALLOW_CREATE_NEW_DEVICES",
    "CHECK_PRE_PROVISIONED_DEVICES",
    "X509_CERTIFICATE_CHAIN",
];

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProfile {
    pub id: Uuid,
    pub created_time: i64,
    pub tenant_id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub image: Option<String>,
    /// `type`: always `DEFAULT` in ThingsBoard CE.
    pub profile_type: String,
    pub transport_type: String,
    pub provision_type: String,
    pub default_rule_chain_id: Option<Uuid>,
    pub default_dashboard_id: Option<Uuid>,
    pub default_queue_name: Option<String>,
    pub default_edge_rule_chain_id: Option<Uuid>,
    /// Stored and returned exactly as given (alarm rules included).
    pub profile_data: Value,
    pub provision_device_key: Option<String>,
    pub firmware_id: Option<Uuid>,
    pub software_id: Option<Uuid>,
    pub external_id: Option<Uuid>,
    pub version: i64,
    pub is_default: bool,
}

/// A profile to create (`id` = None) or update. Absent enums take ThingsBoard's defaults; an absent
/// `profile_data` becomes the default profile data for the transport type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProfileDraft {
    pub id: Option<Uuid>,
    /// `None` overwrites whatever is stored; `Some(v)` must equal the stored version.
    pub version: Option<i64>,
    pub name: String,
    pub description: Option<String>,
    pub image: Option<String>,
    pub profile_type: Option<String>,
    pub transport_type: Option<String>,
    pub provision_type: Option<String>,
    pub default_rule_chain_id: Option<Uuid>,
    pub default_dashboard_id: Option<Uuid>,
    pub default_queue_name: Option<String>,
    pub default_edge_rule_chain_id: Option<Uuid>,
    pub profile_data: Option<Value>,
    pub provision_device_key: Option<String>,
    pub firmware_id: Option<Uuid>,
    pub software_id: Option<Uuid>,
    pub external_id: Option<Uuid>,
    /// Only honoured on create when the tenant has no default yet; use
    /// [`Entities::set_default_device_profile`] to switch.
    pub is_default: bool,
}

impl ProfileDraft {
    pub fn named(name: &str) -> ProfileDraft {
        ProfileDraft {
            name: name.to_string(),
            ..ProfileDraft::default()
        }
    }
}

/// The profile data ThingsBoard gives a new profile of this transport type.
pub fn default_profile_data(transport_type: &str) -> Value {
    json!({
        "configuration": {"type": "DEFAULT"},
        "transportConfiguration": {"type": transport_type},
        "provisionConfiguration": {"type": "DISABLED", "provisionDeviceSecret": null},
        "alarms": null
    })
}

const COLUMNS: &str = "id, created_time, tenant_id, name, description, image, type, transport_type, \
    provision_type, default_rule_chain_id, default_dashboard_id, default_queue_name, \
    default_edge_rule_chain_id, profile_data, provision_device_key, firmware_id, software_id, external_id, \
    version, is_default";

fn from_row(row: &Row) -> rusqlite::Result<DeviceProfile> {
    Ok(DeviceProfile {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        tenant_id: sql::uuid(row, 2)?,
        name: row.get(3)?,
        description: row.get(4)?,
        image: row.get(5)?,
        profile_type: row.get(6)?,
        transport_type: row.get(7)?,
        provision_type: row.get(8)?,
        default_rule_chain_id: sql::opt_uuid(row, 9)?,
        default_dashboard_id: sql::opt_uuid(row, 10)?,
        default_queue_name: row.get(11)?,
        default_edge_rule_chain_id: sql::opt_uuid(row, 12)?,
        profile_data: sql::json(row, 13)?,
        provision_device_key: row.get(14)?,
        firmware_id: sql::opt_uuid(row, 15)?,
        software_id: sql::opt_uuid(row, 16)?,
        external_id: sql::opt_uuid(row, 17)?,
        version: row.get(18)?,
        is_default: row.get(19)?,
    })
}

pub(crate) fn by_id(conn: &Connection, id: Uuid) -> Result<Option<DeviceProfile>, EntityError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM device_profile WHERE id = ?1"),
            [id.to_string()],
            from_row,
        )
        .optional()?)
}

pub(crate) fn by_name(
    conn: &Connection,
    tenant_id: Uuid,
    name: &str,
) -> Result<Option<DeviceProfile>, EntityError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM device_profile WHERE tenant_id = ?1 AND name = ?2"),
            params![tenant_id.to_string(), name],
            from_row,
        )
        .optional()?)
}

pub(crate) fn default_of(
    conn: &Connection,
    tenant_id: Uuid,
) -> Result<Option<DeviceProfile>, EntityError> {
    Ok(conn
        .query_row(
            &format!(
                "SELECT {COLUMNS} FROM device_profile WHERE tenant_id = ?1 AND is_default = 1"
            ),
            [tenant_id.to_string()],
            from_row,
        )
        .optional()?)
}

/// Inserts the tenant's `default` profile.
pub(crate) fn insert_default(
    conn: &Connection,
    tenant_id: Uuid,
) -> Result<DeviceProfile, EntityError> {
    let draft = ProfileDraft {
        description: Some("Default device profile".into()),
        is_default: true,
        ..ProfileDraft::named("default")
    };
    save(conn, tenant_id, &draft)
}

/// The profile named `name`, created with default settings if absent (a device saved with only a `type`).
pub(crate) fn find_or_create(
    conn: &Connection,
    tenant_id: Uuid,
    name: &str,
) -> Result<DeviceProfile, EntityError> {
    match by_name(conn, tenant_id, name)? {
        Some(profile) => Ok(profile),
        None => save(conn, tenant_id, &ProfileDraft::named(name)),
    }
}

fn checked_enum(
    value: &Option<String>,
    allowed: &[&str],
    default: &str,
    what: &str,
) -> Result<String, EntityError> {
    let value = value.as_deref().unwrap_or(default);
    if allowed.contains(&value) {
        Ok(value.to_string())
    } else {
        Err(EntityError::Invalid(format!(
            "Invalid device profile {what}: {value}"
        )))
    }
}

/// Validates and writes a draft inside the caller's transaction.
fn save(
    conn: &Connection,
    tenant_id: Uuid,
    draft: &ProfileDraft,
) -> Result<DeviceProfile, EntityError> {
    if draft.name.trim().is_empty() {
        return Err(EntityError::invalid(
            "Device profile name should be specified!",
        ));
    }
    let profile_type = checked_enum(&draft.profile_type, PROFILE_TYPES, "DEFAULT", "type")?;
    let transport_type = checked_enum(
        &draft.transport_type,
        TRANSPORT_TYPES,
        "DEFAULT",
        "transport type",
    )?;
    let provision_type = checked_enum(
        &draft.provision_type,
        PROVISION_TYPES,
        "DISABLED",
        "provision type",
    )?;
    let old = match draft.id {
        None => None,
        Some(id) => match by_id(conn, id)? {
            Some(old) if old.tenant_id == tenant_id => Some(old),
            _ => return Err(EntityError::not_found("Device profile", id)),
        },
    };
    if let (Some(old), Some(version)) = (&old, draft.version) {
        if old.version != version {
            return Err(EntityError::VersionConflict(
                "Device profile was already changed by someone else".into(),
            ));
        }
    }
    let id = draft.id.unwrap_or_else(Uuid::new_v4);
    if let Some(other) = by_name(conn, tenant_id, &draft.name)? {
        if other.id != id {
            return Err(EntityError::invalid(
                "Device profile with such name already exists!",
            ));
        }
    }
    let current_default = default_of(conn, tenant_id)?;
    let is_default = match &old {
        Some(old) => old.is_default,
        None => draft.is_default && current_default.is_none(),
    };
    if draft.is_default && !is_default {
        return Err(EntityError::invalid(
            "Another default device profile is present in scope of current tenant!",
        ));
    }
    let profile = DeviceProfile {
        id,
        created_time: old.as_ref().map_or_else(now_ms, |o| o.created_time),
        tenant_id,
        name: draft.name.clone(),
        description: draft.description.clone(),
        image: draft.image.clone(),
        profile_data: draft
            .profile_data
            .clone()
            .unwrap_or_else(|| default_profile_data(&transport_type)),
        profile_type,
        transport_type,
        provision_type,
        default_rule_chain_id: draft.default_rule_chain_id,
        default_dashboard_id: draft.default_dashboard_id,
        default_queue_name: draft.default_queue_name.clone(),
        default_edge_rule_chain_id: draft.default_edge_rule_chain_id,
        provision_device_key: draft.provision_device_key.clone().filter(|k| !k.is_empty()),
        firmware_id: draft.firmware_id,
        software_id: draft.software_id,
        external_id: draft.external_id,
        version: old.as_ref().map_or(1, |o| o.version + 1),
        is_default,
    };
    let written = conn.execute(
        &sql::upsert("device_profile", COLUMNS),
        params![
            profile.id.to_string(),
            profile.created_time,
            profile.tenant_id.to_string(),
            profile.name,
            profile.description,
            profile.image,
            profile.profile_type,
            profile.transport_type,
            profile.provision_type,
            id_text(profile.default_rule_chain_id),
            id_text(profile.default_dashboard_id),
            profile.default_queue_name,
            id_text(profile.default_edge_rule_chain_id),
            profile.profile_data.to_string(),
            profile.provision_device_key,
            id_text(profile.firmware_id),
            id_text(profile.software_id),
            id_text(profile.external_id),
            profile.version,
            profile.is_default,
        ],
    );
    match written {
        // Name uniqueness was checked above, so the remaining unique key is the provision key.
        Err(e) if sql::is_unique_violation(&e) => Err(EntityError::invalid(
            "Device profile with such provision device key already exists!",
        )),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(profile),
    }
}

impl Entities {
    /// Creates or updates a device profile of `tenant_id`.
    pub fn save_device_profile(
        &self,
        tenant_id: Uuid,
        draft: &ProfileDraft,
    ) -> Result<DeviceProfile, EntityError> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let profile = save(&tx, tenant_id, draft)?;
            tx.commit()?;
            Ok(profile)
        })
    }

    /// The profile whose `provisionDeviceKey` is `key` (keys are unique across tenants).
    pub fn device_profile_by_provision_key(
        &self,
        key: &str,
    ) -> Result<Option<DeviceProfile>, EntityError> {
        self.with_conn(|conn| {
            Ok(conn
                .query_row(
                    &format!(
                        "SELECT {COLUMNS} FROM device_profile WHERE provision_device_key = ?1"
                    ),
                    [key],
                    from_row,
                )
                .optional()?)
        })
    }

    /// The profile with this id, of any tenant (the caller checks ownership).
    pub fn device_profile(&self, id: Uuid) -> Result<Option<DeviceProfile>, EntityError> {
        self.with_conn(|conn| by_id(conn, id))
    }

    pub fn device_profile_by_name(
        &self,
        tenant_id: Uuid,
        name: &str,
    ) -> Result<Option<DeviceProfile>, EntityError> {
        self.with_conn(|conn| by_name(conn, tenant_id, name))
    }

    pub fn default_device_profile(
        &self,
        tenant_id: Uuid,
    ) -> Result<Option<DeviceProfile>, EntityError> {
        self.with_conn(|conn| default_of(conn, tenant_id))
    }

    /// Makes `id` the tenant's default profile (both changed profiles get a new version).
    pub fn set_default_device_profile(
        &self,
        tenant_id: Uuid,
        id: Uuid,
    ) -> Result<DeviceProfile, EntityError> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            match by_id(&tx, id)? {
                Some(p) if p.tenant_id == tenant_id => {}
                _ => return Err(EntityError::not_found("Device profile", id)),
            }
            tx.execute(
                "UPDATE device_profile SET is_default = 0, version = version + 1
                 WHERE tenant_id = ?1 AND is_default = 1 AND id != ?2",
                params![tenant_id.to_string(), id.to_string()],
            )?;
            tx.execute(
                "UPDATE device_profile SET is_default = 1, version = version + 1 WHERE id = ?1 AND is_default = 0",
                [id.to_string()],
            )?;
            let profile = by_id(&tx, id)?.ok_or_else(|| EntityError::not_found("Device profile", id))?;
            tx.commit()?;
            Ok(profile)
        })
    }

    /// Deletes a profile; the default profile and profiles used by devices cannot be deleted.
    pub fn delete_device_profile(&self, tenant_id: Uuid, id: Uuid) -> Result<(), EntityError> {
        self.with_conn(|conn| {
            let tx = conn.transaction()?;
            let profile = match by_id(&tx, id)? {
                Some(p) if p.tenant_id == tenant_id => p,
                _ => return Err(EntityError::not_found("Device profile", id)),
            };
            if profile.is_default {
                return Err(EntityError::invalid(
                    "Deletion of Default Device Profile is prohibited!",
                ));
            }
            let used: bool = tx.query_row(
                "SELECT EXISTS (SELECT 1 FROM device WHERE device_profile_id = ?1)",
                [id.to_string()],
                |r| r.get(0),
            )?;
            if used {
                return Err(EntityError::invalid(
                    "The device profile referenced by the devices cannot be deleted!",
                ));
            }
            tx.execute("DELETE FROM device_profile WHERE id = ?1", [id.to_string()])?;
            tx.commit()?;
            Ok(())
        })
    }

    /// A page of the tenant's profiles; text search on the name; `transport_type` filters when given.
    pub fn device_profiles(
        &self,
        tenant_id: Uuid,
        transport_type: Option<&str>,
        query: &PageQuery,
    ) -> Result<PageData<DeviceProfile>, EntityError> {
        let order = query.order_limit(
            &[
                ("createdTime", "created_time"),
                ("name", "name"),
                ("type", "type"),
                ("transportType", "transport_type"),
                ("description", "description"),
                ("isDefault", "is_default"),
                ("default", "is_default"),
            ],
            "created_time",
            "rowid",
        )?;
        let filter = "tenant_id = ?1 AND (?2 IS NULL OR transport_type = ?2)
                      AND (?3 IS NULL OR instr(lower(name), lower(?3)) > 0)";
        let args = params![tenant_id.to_string(), transport_type, query.search()];
        self.with_conn(|conn| {
            let total: u64 = conn.query_row(
                &format!("SELECT count(*) FROM device_profile WHERE {filter}"),
                args,
                |r| r.get(0),
            )?;
            let mut stmt = conn.prepare(&format!(
                "SELECT {COLUMNS} FROM device_profile WHERE {filter} {order}"
            ))?;
            let rows = stmt
                .query_map(args, from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(query.page_of(rows, total))
        })
    }
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
