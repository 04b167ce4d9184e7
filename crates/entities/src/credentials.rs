//! Device credentials: one row per device, `credentials_id` unique across all tenants (it is what a
//! device presents). Formatting and validation follow ThingsBoard's DeviceCredentialsService.

use rusqlite::{params, Connection, OptionalExtension, Row};
use serde::{Deserialize, Serialize};
use sha3::{Digest, Sha3_256};
use uuid::Uuid;

use crate::sql::{self, now_ms};
use crate::{device, DeviceChange, Entities, EntityError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialsType {
    AccessToken,
    MqttBasic,
    X509Certificate,
    Lwm2mCredentials,
}

impl CredentialsType {
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialsType::AccessToken => "ACCESS_TOKEN",
            CredentialsType::MqttBasic => "MQTT_BASIC",
            CredentialsType::X509Certificate => "X509_CERTIFICATE",
            CredentialsType::Lwm2mCredentials => "LWM2M_CREDENTIALS",
        }
    }

    pub fn parse(text: &str) -> Option<CredentialsType> {
        match text {
            "ACCESS_TOKEN" => Some(CredentialsType::AccessToken),
            "MQTT_BASIC" => Some(CredentialsType::MqttBasic),
            "X509_CERTIFICATE" => Some(CredentialsType::X509Certificate),
            "LWM2M_CREDENTIALS" => Some(CredentialsType::Lwm2mCredentials),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeviceCredentials {
    pub id: Uuid,
    pub created_time: i64,
    pub device_id: Uuid,
    pub credentials_type: CredentialsType,
    /// ACCESS_TOKEN: the token. MQTT_BASIC: computed (see [`mqtt_basic_credentials_id`]).
    pub credentials_id: String,
    /// MQTT_BASIC: a JSON string `{"clientId":…,"userName":…,"password":…}`; ACCESS_TOKEN: none.
    pub credentials_value: Option<String>,
    pub version: i64,
}

/// Credentials as a client sends them; the server computes `credentials_id` for MQTT_BASIC.
#[derive(Debug, Clone, PartialEq)]
pub struct CredentialsDraft {
    /// When given on update, must be the id of the device's credentials.
    pub id: Option<Uuid>,
    /// `None` overwrites whatever is stored; `Some(v)` must equal the stored version.
    pub version: Option<i64>,
    pub credentials_type: CredentialsType,
    pub credentials_id: Option<String>,
    pub credentials_value: Option<String>,
}

impl CredentialsDraft {
    pub fn access_token(token: &str) -> CredentialsDraft {
        CredentialsDraft {
            id: None,
            version: None,
            credentials_type: CredentialsType::AccessToken,
            credentials_id: Some(token.to_string()),
            credentials_value: None,
        }
    }

    pub fn mqtt_basic(
        client_id: Option<&str>,
        user_name: Option<&str>,
        password: Option<&str>,
    ) -> CredentialsDraft {
        let value = BasicMqtt {
            client_id: client_id.map(str::to_string),
            user_name: user_name.map(str::to_string),
            password: password.map(str::to_string),
        };
        CredentialsDraft {
            id: None,
            version: None,
            credentials_type: CredentialsType::MqttBasic,
            credentials_id: None,
            credentials_value: serde_json::to_string(&value).ok(),
        }
    }
}

/// The JSON inside an MQTT_BASIC `credentialsValue`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BasicMqtt {
    pub client_id: Option<String>,
    pub user_name: Option<String>,
    pub password: Option<String>,
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

impl BasicMqtt {
    pub fn client_id(&self) -> Option<&str> {
        non_empty(&self.client_id)
    }
    pub fn user_name(&self) -> Option<&str> {
        non_empty(&self.user_name)
    }
    pub fn password(&self) -> Option<&str> {
        non_empty(&self.password)
    }
}

/// SHA3-256, lower-case hex: ThingsBoard's `EncryptionUtil.getSha3Hash`.
pub(crate) fn sha3_hex(text: &str) -> String {
    Sha3_256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// ThingsBoard's credentials id of MQTT_BASIC credentials: the user name alone when there is no client id,
/// else the SHA3 of the client id, or of `clientId|userName` when both are given.
pub fn mqtt_basic_credentials_id(
    client_id: Option<&str>,
    user_name: Option<&str>,
) -> Option<String> {
    match (client_id, user_name) {
        (None, None) => None,
        (None, Some(user)) => Some(user.to_string()),
        (Some(client), None) => Some(sha3_hex(client)),
        (Some(client), Some(user)) => Some(sha3_hex(&format!("{client}|{user}"))),
    }
}

/// Validates a draft and computes `(credentials_id, credentials_value)`.
fn format(draft: &CredentialsDraft) -> Result<(String, Option<String>), EntityError> {
    match draft.credentials_type {
        CredentialsType::AccessToken => {
            let token = non_empty(&draft.credentials_id).ok_or_else(|| {
                EntityError::invalid("Device credentials id should be specified!")
            })?;
            Ok((token.to_string(), None))
        }
        CredentialsType::MqttBasic => {
            let basic: BasicMqtt = draft
                .credentials_value
                .as_deref()
                .and_then(|v| serde_json::from_str(v).ok())
                .ok_or_else(|| {
                    EntityError::invalid("Invalid credentials body for simple mqtt credentials!")
                })?;
            if basic.client_id().is_some()
                && basic.password().is_some()
                && basic.user_name().is_none()
            {
                return Err(EntityError::invalid(
                    "Password cannot be specified along with client id",
                ));
            }
            let id = mqtt_basic_credentials_id(basic.client_id(), basic.user_name()).ok_or_else(
                || EntityError::invalid("Both mqtt client id and user name are empty!"),
            )?;
            let value =
                serde_json::to_string(&basic).map_err(|e| EntityError::Invalid(e.to_string()))?;
            Ok((id, Some(value)))
        }
        CredentialsType::X509Certificate | CredentialsType::Lwm2mCredentials => {
            Err(EntityError::Invalid(format!(
                "{} credentials are not supported",
                draft.credentials_type.as_str()
            )))
        }
    }
}

const COLUMNS: &str =
    "id, created_time, device_id, credentials_type, credentials_id, credentials_value, version";

fn from_row(row: &Row) -> rusqlite::Result<DeviceCredentials> {
    let kind: String = row.get(3)?;
    Ok(DeviceCredentials {
        id: sql::uuid(row, 0)?,
        created_time: row.get(1)?,
        device_id: sql::uuid(row, 2)?,
        credentials_type: CredentialsType::parse(&kind).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                3,
                rusqlite::types::Type::Text,
                format!("unknown credentials type {kind}").into(),
            )
        })?,
        credentials_id: row.get(4)?,
        credentials_value: row.get(5)?,
        version: row.get(6)?,
    })
}

pub(crate) fn all(conn: &Connection) -> Result<Vec<DeviceCredentials>, EntityError> {
    let mut stmt = conn.prepare(&format!("SELECT {COLUMNS} FROM device_credentials"))?;
    let rows = stmt.query_map([], from_row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn of_device(conn: &Connection, device_id: Uuid) -> Result<Option<DeviceCredentials>, EntityError> {
    Ok(conn
        .query_row(
            &format!("SELECT {COLUMNS} FROM device_credentials WHERE device_id = ?1"),
            [device_id.to_string()],
            from_row,
        )
        .optional()?)
}

fn check_unique(conn: &Connection, credentials_id: &str, own_id: Uuid) -> Result<(), EntityError> {
    let taken: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM device_credentials WHERE credentials_id = ?1 AND id != ?2)",
        params![credentials_id, own_id.to_string()],
        |r| r.get(0),
    )?;
    if taken {
        return Err(EntityError::AlreadyExists(
            "Device credentials are already assigned to another device!".into(),
        ));
    }
    Ok(())
}

fn write(conn: &Connection, c: &DeviceCredentials) -> Result<(), EntityError> {
    conn.execute(
        &sql::upsert("device_credentials", COLUMNS),
        params![
            c.id.to_string(),
            c.created_time,
            c.device_id.to_string(),
            c.credentials_type.as_str(),
            c.credentials_id,
            c.credentials_value,
            c.version
        ],
    )?;
    Ok(())
}

/// Creates the credentials of a new device, inside the caller's transaction.
pub(crate) fn insert(
    conn: &Connection,
    device_id: Uuid,
    draft: &CredentialsDraft,
) -> Result<DeviceCredentials, EntityError> {
    let (credentials_id, credentials_value) = format(draft)?;
    let credentials = DeviceCredentials {
        id: Uuid::new_v4(),
        created_time: now_ms(),
        device_id,
        credentials_type: draft.credentials_type,
        credentials_id,
        credentials_value,
        version: 1,
    };
    check_unique(conn, &credentials.credentials_id, credentials.id)?;
    write(conn, &credentials)?;
    Ok(credentials)
}

impl Entities {
    /// The credentials of a device (the caller checks the device's tenant).
    pub fn device_credentials(
        &self,
        device_id: Uuid,
    ) -> Result<Option<DeviceCredentials>, EntityError> {
        self.with_conn(|conn| of_device(conn, device_id))
    }

    /// Replaces the credentials of a device of `tenant_id`. When they changed, the cache follows at once
    /// and the change listeners are told (sessions opened with the old credentials must close).
    pub fn update_device_credentials(
        &self,
        tenant_id: Uuid,
        device_id: Uuid,
        draft: &CredentialsDraft,
    ) -> Result<DeviceCredentials, EntityError> {
        let (updated, changed) = self.with_conn_and_cache(|conn, cache| {
            let tx = conn.transaction()?;
            device::of_tenant(&tx, tenant_id, device_id)?;
            let old = of_device(&tx, device_id)?.ok_or_else(|| {
                EntityError::invalid("Unable to update non-existent device credentials!")
            })?;
            if draft.id.is_some_and(|id| id != old.id) {
                return Err(EntityError::invalid(
                    "Unable to update non-existent device credentials!",
                ));
            }
            if draft.version.is_some_and(|v| v != old.version) {
                return Err(EntityError::VersionConflict(
                    "Device credentials were already changed by someone else".into(),
                ));
            }
            let (credentials_id, credentials_value) = format(draft)?;
            check_unique(&tx, &credentials_id, old.id)?;
            let updated = DeviceCredentials {
                credentials_type: draft.credentials_type,
                credentials_id,
                credentials_value,
                version: old.version + 1,
                ..old.clone()
            };
            write(&tx, &updated)?;
            tx.commit()?;
            cache.write().put_credentials(&updated);
            let changed = (
                old.credentials_type,
                &old.credentials_id,
                &old.credentials_value,
            ) != (
                updated.credentials_type,
                &updated.credentials_id,
                &updated.credentials_value,
            );
            Ok((updated, changed))
        })?;
        if changed {
            self.notify(DeviceChange::CredentialsChanged(device_id));
        }
        Ok(updated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha3_matches_reference_vector() {
        // SHA3-256("abc") from FIPS 202.
        assert_eq!(
            sha3_hex("abc"),
            "3a985da74fe225b2045c172d6bd390bd855f086e3e9d525b46bfe24511431532"
        );
    }

    #[test]
    fn mqtt_basic_formatting_rules() {
        let fmt = |c: Option<&str>, u: Option<&str>, p: Option<&str>| {
            format(&CredentialsDraft::mqtt_basic(c, u, p))
        };
        let (id, value) = fmt(None, Some("user"), Some("pw")).unwrap();
        assert_eq!(id, "user");
        assert_eq!(
            value.unwrap(),
            r#"{"clientId":null,"userName":"user","password":"pw"}"#
        );
        assert_eq!(fmt(Some("c"), None, None).unwrap().0, sha3_hex("c"));
        assert_eq!(
            fmt(Some("c"), Some("u"), Some("p")).unwrap().0,
            sha3_hex("c|u")
        );
        let err = fmt(None, None, Some("p")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Both mqtt client id and user name are empty!"
        );
        let err = fmt(Some("c"), None, Some("p")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Password cannot be specified along with client id"
        );
        // Empty strings count as absent.
        assert!(fmt(Some(""), Some(""), None).is_err());
        let bad = CredentialsDraft {
            credentials_value: Some("not json".into()),
            ..CredentialsDraft::mqtt_basic(None, Some("u"), None)
        };
        assert!(format(&bad).is_err());
    }

    #[test]
    fn access_token_needs_an_id() {
        let mut d = CredentialsDraft::access_token("");
        assert!(format(&d).is_err());
        d.credentials_id = Some("T1".into());
        assert_eq!(format(&d).unwrap(), ("T1".to_string(), None));
        d.credentials_type = CredentialsType::X509Certificate;
        assert!(format(&d).is_err());
    }

    #[test]
    fn type_names_round_trip() {
        for t in [
            CredentialsType::AccessToken,
            CredentialsType::MqttBasic,
            CredentialsType::X509Certificate,
            CredentialsType::Lwm2mCredentials,
        ] {
            assert_eq!(CredentialsType::parse(t.as_str()), Some(t));
        }
    }
}
