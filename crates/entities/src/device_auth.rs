//! Device authentication for the transports, answered from memory.
//!
//! Every credentials row and the few device fields a session needs are loaded at open and kept in step
//! by every write (under the connection lock, after the commit), so a CONNECT or an HTTP device request
//! never touches SQLite. The MQTT decision follows the ThingsBoard reference, section 1.2.

use std::collections::HashMap;

use rusqlite::Connection;
use uuid::Uuid;

use crate::credentials::{self, sha3_hex, BasicMqtt, CredentialsType, DeviceCredentials};
use crate::{device, Device, Entities, EntityError};

/// What a transport session needs to know about its device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAuth {
    pub device_id: Uuid,
    pub tenant_id: Uuid,
    pub name: String,
    pub profile_id: Uuid,
    /// `additionalInfo.gateway == true`: the device may use the gateway API.
    pub gateway: bool,
    /// The customer the device is assigned to (NULL_UUID: none).
    pub customer_id: Uuid,
}

impl DeviceAuth {
    pub(crate) fn of(device: &Device) -> DeviceAuth {
        DeviceAuth {
            device_id: device.id,
            tenant_id: device.tenant_id,
            name: device.name.clone(),
            profile_id: device.profile_id,
            gateway: device.is_gateway(),
            customer_id: device.customer_id,
        }
    }
}

/// The outcome of an MQTT CONNECT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MqttAuth {
    /// Authenticated as this device.
    Device(DeviceAuth),
    /// Username or client id `provision`: a provisioning-only session.
    Provision,
    Refused(AuthRefusal),
}

/// Why a CONNECT was refused; picks the CONNACK code ThingsBoard sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthRefusal {
    /// Unknown credentials, and username and password both present, or exactly one of them.
    BadUserNameOrPassword,
    /// Unknown credentials, no username and no password, non-blank client id.
    ClientIdNotValid,
    /// Any other refusal.
    NotAuthorized,
}

impl AuthRefusal {
    /// CONNACK reason code for MQTT 5.
    pub fn reason_code_v5(self) -> u8 {
        match self {
            AuthRefusal::BadUserNameOrPassword => 0x86,
            AuthRefusal::ClientIdNotValid => 0x85,
            AuthRefusal::NotAuthorized => 0x87,
        }
    }

    /// CONNACK return code for MQTT 3.1 and 3.1.1 (ThingsBoard maps both password cases to 5).
    pub fn return_code_v3(self) -> u8 {
        match self {
            AuthRefusal::BadUserNameOrPassword | AuthRefusal::NotAuthorized => 0x05,
            AuthRefusal::ClientIdNotValid => 0x02,
        }
    }
}

#[derive(Debug, Clone)]
enum Kind {
    AccessToken,
    MqttBasic(BasicMqtt),
    /// Types no transport here accepts (X.509 needs TLS, LwM2M a CoAP transport).
    Other,
}

#[derive(Debug, Clone)]
struct Cached {
    device_id: Uuid,
    kind: Kind,
}

/// The in-memory mirror of `device_credentials` (by credentials id) and of the devices' session fields.
#[derive(Debug, Default)]
pub(crate) struct AuthCache {
    devices: HashMap<Uuid, DeviceAuth>,
    credentials: HashMap<String, Cached>,
    credentials_of_device: HashMap<Uuid, String>,
}

impl AuthCache {
    pub(crate) fn load(conn: &Connection) -> Result<AuthCache, EntityError> {
        let mut cache = AuthCache::default();
        for d in device::all(conn)? {
            cache.put_device(DeviceAuth::of(&d));
        }
        for c in credentials::all(conn)? {
            cache.put_credentials(&c);
        }
        Ok(cache)
    }

    pub(crate) fn put_device(&mut self, auth: DeviceAuth) {
        self.devices.insert(auth.device_id, auth);
    }

    pub(crate) fn put_credentials(&mut self, c: &DeviceCredentials) {
        if let Some(old) = self.credentials_of_device.remove(&c.device_id) {
            self.credentials.remove(&old);
        }
        let kind = match c.credentials_type {
            CredentialsType::AccessToken => Kind::AccessToken,
            CredentialsType::MqttBasic => c
                .credentials_value
                .as_deref()
                .and_then(|v| serde_json::from_str(v).ok())
                .map_or(Kind::Other, Kind::MqttBasic),
            _ => Kind::Other,
        };
        self.credentials.insert(
            c.credentials_id.clone(),
            Cached {
                device_id: c.device_id,
                kind,
            },
        );
        self.credentials_of_device
            .insert(c.device_id, c.credentials_id.clone());
    }

    pub(crate) fn remove_device(&mut self, device_id: Uuid) {
        self.devices.remove(&device_id);
        if let Some(old) = self.credentials_of_device.remove(&device_id) {
            self.credentials.remove(&old);
        }
    }

    fn device(&self, cached: &Cached) -> Option<DeviceAuth> {
        self.devices.get(&cached.device_id).cloned()
    }

    /// MQTT_BASIC credentials stored under `credentials_id`, if the presented values satisfy them.
    fn basic(
        &self,
        credentials_id: &str,
        client_id: &str,
        user: Option<&str>,
        password: Option<&[u8]>,
    ) -> Option<DeviceAuth> {
        let cached = self.credentials.get(credentials_id)?;
        match &cached.kind {
            Kind::MqttBasic(basic) if basic_matches(basic, client_id, user, password) => {
                self.device(cached)
            }
            _ => None,
        }
    }
}

/// ThingsBoard's check of presented values against MQTT_BASIC credentials: each configured part must
/// match; no configured password means any password is accepted.
fn basic_matches(
    basic: &BasicMqtt,
    client_id: &str,
    user: Option<&str>,
    password: Option<&[u8]>,
) -> bool {
    if basic.client_id().is_some_and(|c| c != client_id) {
        return false;
    }
    if basic.user_name().is_some_and(|u| Some(u) != user) {
        return false;
    }
    match basic.password() {
        Some(expected) => password == Some(expected.as_bytes()),
        None => true,
    }
}

impl Entities {
    /// The device whose ACCESS_TOKEN credentials are `token` (HTTP device API, MQTT username).
    pub fn device_by_access_token(&self, token: &str) -> Option<DeviceAuth> {
        let cache = self.cache().read();
        let cached = cache.credentials.get(token)?;
        match cached.kind {
            Kind::AccessToken => cache.device(cached),
            _ => None,
        }
    }

    /// The session fields of a device, from memory (e.g. to check a device's tenant on a hot path).
    pub fn device_auth(&self, device_id: Uuid) -> Option<DeviceAuth> {
        self.cache().read().devices.get(&device_id).cloned()
    }

    /// How many devices exist, across tenants (from memory).
    pub fn device_count(&self) -> usize {
        self.cache().read().devices.len()
    }

    /// Decides an MQTT CONNECT (no TLS client certificates: X.509 is not offered).
    ///
    /// `username: Some("")` is looked up like no username but counts as present for the refusal code,
    /// as in ThingsBoard, which tests the CONNECT flags there.
    pub fn authenticate_mqtt(
        &self,
        client_id: &str,
        username: Option<&str>,
        password: Option<&[u8]>,
    ) -> MqttAuth {
        if username == Some("provision") || client_id == "provision" {
            return MqttAuth::Provision;
        }
        let user = username.filter(|u| !u.is_empty());
        // Hash before taking the lock.
        let (client_key, pair_key) = match user {
            None => ((!client_id.is_empty()).then(|| sha3_hex(client_id)), None),
            Some(u) => (
                None,
                (!client_id.is_empty()).then(|| sha3_hex(&format!("{client_id}|{u}"))),
            ),
        };
        let found = {
            let cache = self.cache().read();
            match user {
                None => client_key.and_then(|key| cache.basic(&key, client_id, None, password)),
                Some(u) => pair_key
                    .and_then(|key| cache.basic(&key, client_id, user, password))
                    .or_else(|| {
                        let cached = cache.credentials.get(u)?;
                        match &cached.kind {
                            Kind::AccessToken => cache.device(cached),
                            Kind::MqttBasic(_) => cache.basic(u, client_id, user, password),
                            Kind::Other => None,
                        }
                    }),
            }
        };
        match found {
            Some(device) => MqttAuth::Device(device),
            None => MqttAuth::Refused(refusal(client_id, username.is_some(), password.is_some())),
        }
    }
}

/// ThingsBoard's CONNACK choice for unknown credentials (MqttTransportHandler): username and password
/// both present or exactly one of them → bad user name or password; neither, with a client id → client
/// id not valid; otherwise not authorized.
fn refusal(client_id: &str, has_username: bool, has_password: bool) -> AuthRefusal {
    if has_username || has_password {
        AuthRefusal::BadUserNameOrPassword
    } else if !client_id.trim().is_empty() {
        AuthRefusal::ClientIdNotValid
    } else {
        AuthRefusal::NotAuthorized
    }
}

#[cfg(test)]
#[path = "device_auth_tests.rs"]
mod tests;
