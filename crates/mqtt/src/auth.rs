//! AUTH (MQTT 5.0 §3.15): extended authentication exchanges; MQTT 5 only.

use bytes::{Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, id, once, text, PropertySet, Sink, UserProperties, NOT_ALLOWED};
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Auth {
    /// 0x00 success, 0x18 continue authentication, 0x19 re-authenticate.
    pub reason: u8,
    pub properties: AuthProperties,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthProperties {
    pub authentication_method: Option<String>,
    pub authentication_data: Option<Bytes>,
    pub reason_string: Option<String>,
    pub user_properties: UserProperties,
}

pub(crate) fn read(mut bytes: Bytes) -> Result<Auth, DecodeError> {
    let (reason, properties) = properties::read_reason(&mut bytes)?;
    wire::expect_end(&bytes)?;
    Ok(Auth { reason, properties })
}

pub(crate) fn remaining_bytes(auth: &Auth) -> Result<usize, EncodeError> {
    properties::reason_bytes(auth.reason, &auth.properties)
}

pub(crate) fn write(auth: &Auth, out: &mut BytesMut) {
    properties::write_reason(auth.reason, &auth.properties, out);
}

impl PropertySet for AuthProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::AUTHENTICATION_METHOD => {
                once(&mut self.authentication_method, wire::read_string(bytes)?)
            }
            id::AUTHENTICATION_DATA => {
                once(&mut self.authentication_data, wire::read_binary(bytes)?)
            }
            id::REASON_STRING => once(&mut self.reason_string, wire::read_string(bytes)?),
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        sink.opt_field(id::AUTHENTICATION_METHOD, text(&self.authentication_method));
        sink.opt_field(id::AUTHENTICATION_DATA, self.authentication_data.as_deref());
        sink.opt_field(id::REASON_STRING, text(&self.reason_string));
        sink.users(&self.user_properties);
    }
}
