//! MQTT 5 properties (§2.2.2): the length-prefixed list of `identifier, value` pairs that
//! follows the variable header of every MQTT 5 packet.
//!
//! Each packet has a typed struct next to it (`ConnectProperties` in `connect.rs`, ...) that
//! implements [`PropertySet`]; this file holds the shared machinery and the properties of the
//! acknowledgements. One `emit` function per struct drives both the size computation and the
//! writing, so the two cannot disagree.
//!
//! Decoding follows §2.2.2.2: an identifier not allowed in the packet is a malformed packet, a
//! property other than a user property (or PUBLISH's subscription identifier) given twice is
//! a protocol error. An empty property list decodes without allocating.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::wire;

/// User properties in the order they were received; names may repeat (MQTT-3.3.2-18).
pub type UserProperties = Vec<(String, String)>;

/// Property identifiers (MQTT 5.0 table 2-4).
pub(crate) mod id {
    pub const PAYLOAD_FORMAT_INDICATOR: u8 = 0x01;
    pub const MESSAGE_EXPIRY_INTERVAL: u8 = 0x02;
    pub const CONTENT_TYPE: u8 = 0x03;
    pub const RESPONSE_TOPIC: u8 = 0x08;
    pub const CORRELATION_DATA: u8 = 0x09;
    pub const SUBSCRIPTION_IDENTIFIER: u8 = 0x0B;
    pub const SESSION_EXPIRY_INTERVAL: u8 = 0x11;
    pub const ASSIGNED_CLIENT_IDENTIFIER: u8 = 0x12;
    pub const SERVER_KEEP_ALIVE: u8 = 0x13;
    pub const AUTHENTICATION_METHOD: u8 = 0x15;
    pub const AUTHENTICATION_DATA: u8 = 0x16;
    pub const REQUEST_PROBLEM_INFORMATION: u8 = 0x17;
    pub const WILL_DELAY_INTERVAL: u8 = 0x18;
    pub const REQUEST_RESPONSE_INFORMATION: u8 = 0x19;
    pub const RESPONSE_INFORMATION: u8 = 0x1A;
    pub const SERVER_REFERENCE: u8 = 0x1C;
    pub const REASON_STRING: u8 = 0x1F;
    pub const RECEIVE_MAXIMUM: u8 = 0x21;
    pub const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
    pub const TOPIC_ALIAS: u8 = 0x23;
    pub const MAXIMUM_QOS: u8 = 0x24;
    pub const RETAIN_AVAILABLE: u8 = 0x25;
    pub const USER_PROPERTY: u8 = 0x26;
    pub const MAXIMUM_PACKET_SIZE: u8 = 0x27;
    pub const WILDCARD_SUBSCRIPTION_AVAILABLE: u8 = 0x28;
    pub const SUBSCRIPTION_IDENTIFIER_AVAILABLE: u8 = 0x29;
    pub const SHARED_SUBSCRIPTION_AVAILABLE: u8 = 0x2A;
}

pub(crate) const NOT_ALLOWED: DecodeError =
    DecodeError::MalformedPacket("property not allowed in this packet");

/// A packet's typed properties.
pub(crate) trait PropertySet: Default {
    /// Reads the value of property `id` from the front of `bytes` into `self`.
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError>;

    /// Feeds every present property to `sink`, in a fixed order.
    fn emit<S: Sink>(&self, sink: &mut S);
}

/// Reads a property length and the properties it covers.
pub(crate) fn read<P: PropertySet>(bytes: &mut Bytes) -> Result<P, DecodeError> {
    let len_bytes = wire::read_vbi(bytes)?;
    let mut props = P::default();
    if len_bytes == 0 {
        return Ok(props);
    }
    if len_bytes > bytes.len() {
        return Err(DecodeError::MalformedPacket(
            "property length exceeds the packet",
        ));
    }
    let mut raw = bytes.split_to(len_bytes);
    while !raw.is_empty() {
        // Identifiers are variable byte integers, but all defined ones fit in one byte.
        let id = u8::try_from(wire::read_vbi(&mut raw)?).map_err(|_| NOT_ALLOWED)?;
        props.read_one(id, &mut raw)?;
    }
    Ok(props)
}

/// Bytes the properties take on the wire, including their length prefix.
pub(crate) fn encoded_bytes<P: PropertySet>(props: &P) -> Result<usize, EncodeError> {
    let body_bytes = body_bytes(props)?;
    Ok(wire::vbi_bytes(body_bytes) + body_bytes)
}

/// Writes the property length and the properties; the caller has sized them with
/// [`encoded_bytes`].
pub(crate) fn write<P: PropertySet>(props: &P, out: &mut BytesMut) {
    let mut counter = Counter::default();
    props.emit(&mut counter);
    wire::write_vbi(out, counter.bytes);
    props.emit(&mut Writer(out));
}

fn body_bytes<P: PropertySet>(props: &P) -> Result<usize, EncodeError> {
    let mut counter = Counter::default();
    props.emit(&mut counter);
    if let Some(error) = counter.error {
        return Err(error);
    }
    if counter.bytes > wire::VBI_MAX {
        return Err(EncodeError::PacketTooLarge {
            remaining_bytes: counter.bytes,
        });
    }
    Ok(counter.bytes)
}

/// Reads the reason code and properties that end PUBACK, PUBREC, PUBREL, PUBCOMP, DISCONNECT
/// and AUTH in MQTT 5. Both are optional on the wire: a missing reason code means 0x00, missing
/// properties mean none (§3.4.2.1, §3.14.2.1, §3.15.2.1).
pub(crate) fn read_reason<P: PropertySet>(bytes: &mut Bytes) -> Result<(u8, P), DecodeError> {
    if bytes.is_empty() {
        return Ok((0, P::default()));
    }
    let reason = wire::read_u8(bytes)?;
    if bytes.is_empty() {
        return Ok((reason, P::default()));
    }
    Ok((reason, read(bytes)?))
}

/// Bytes of the shortest encoding of a trailing reason code and properties.
pub(crate) fn reason_bytes<P: PropertySet>(reason: u8, props: &P) -> Result<usize, EncodeError> {
    let body_bytes = body_bytes(props)?;
    Ok(match (reason, body_bytes) {
        (0, 0) => 0,
        (_, 0) => 1,
        (_, body_bytes) => 1 + wire::vbi_bytes(body_bytes) + body_bytes,
    })
}

/// Writes what [`reason_bytes`] sized.
pub(crate) fn write_reason<P: PropertySet>(reason: u8, props: &P, out: &mut BytesMut) {
    let mut counter = Counter::default();
    props.emit(&mut counter);
    if reason == 0 && counter.bytes == 0 {
        return;
    }
    out.put_u8(reason);
    if counter.bytes > 0 {
        write(props, out);
    }
}

/// An optional string property as the bytes [`Sink::opt_field`] takes.
pub(crate) fn text(value: &Option<String>) -> Option<&[u8]> {
    value.as_deref().map(str::as_bytes)
}

/// Stores a property that may appear at most once.
pub(crate) fn once<T>(slot: &mut Option<T>, value: T) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(DecodeError::ProtocolError("property appears twice"));
    }
    *slot = Some(value);
    Ok(())
}

/// Reads a one-byte property whose only valid values are 0 and 1.
pub(crate) fn read_flag(bytes: &mut Bytes) -> Result<bool, DecodeError> {
    match wire::read_u8(bytes)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::ProtocolError(
            "a 0/1 property has another value",
        )),
    }
}

/// Reads a two-byte property for which 0 is a protocol error (receive maximum, topic alias).
pub(crate) fn read_nonzero_u16(bytes: &mut Bytes) -> Result<u16, DecodeError> {
    match wire::read_u16(bytes)? {
        0 => Err(DecodeError::ProtocolError(
            "property value 0 is not allowed",
        )),
        value => Ok(value),
    }
}

pub(crate) fn read_user_property(
    bytes: &mut Bytes,
    users: &mut UserProperties,
) -> Result<(), DecodeError> {
    let key = wire::read_string(bytes)?;
    let value = wire::read_string(bytes)?;
    users.push((key, value));
    Ok(())
}

/// Receives properties from [`PropertySet::emit`]: counts or writes them.
pub(crate) trait Sink {
    fn byte(&mut self, id: u8, value: u8);
    fn two(&mut self, id: u8, value: u16);
    fn four(&mut self, id: u8, value: u32);
    fn vbi(&mut self, id: u8, value: u32);
    /// A UTF-8 string or binary data: both are length-prefixed bytes.
    fn field(&mut self, id: u8, raw: &[u8]);
    fn pair(&mut self, id: u8, key: &str, value: &str);

    fn opt_flag(&mut self, id: u8, value: Option<bool>) {
        if let Some(value) = value {
            self.byte(id, u8::from(value));
        }
    }
    fn opt_two(&mut self, id: u8, value: Option<u16>) {
        if let Some(value) = value {
            self.two(id, value);
        }
    }
    fn opt_four(&mut self, id: u8, value: Option<u32>) {
        if let Some(value) = value {
            self.four(id, value);
        }
    }
    fn opt_field(&mut self, id: u8, raw: Option<&[u8]>) {
        if let Some(raw) = raw {
            self.field(id, raw);
        }
    }
    fn users(&mut self, users: &UserProperties) {
        for (key, value) in users {
            self.pair(id::USER_PROPERTY, key, value);
        }
    }
}

/// Sizes properties and remembers the first value that cannot be encoded.
#[derive(Default)]
struct Counter {
    bytes: usize,
    error: Option<EncodeError>,
}

impl Counter {
    fn fail(&mut self, error: EncodeError) {
        self.error.get_or_insert(error);
    }
}

impl Sink for Counter {
    fn byte(&mut self, _id: u8, _value: u8) {
        self.bytes += 2;
    }
    fn two(&mut self, _id: u8, _value: u16) {
        self.bytes += 3;
    }
    fn four(&mut self, _id: u8, _value: u32) {
        self.bytes += 5;
    }
    fn vbi(&mut self, _id: u8, value: u32) {
        let value = value as usize;
        if value == 0 || value > wire::VBI_MAX {
            self.fail(EncodeError::Invalid(
                "subscription identifier outside 1..=268435455",
            ));
        }
        self.bytes += 1 + wire::vbi_bytes(value);
    }
    fn field(&mut self, _id: u8, raw: &[u8]) {
        match wire::field_bytes(raw) {
            Ok(bytes) => self.bytes += 1 + bytes,
            Err(error) => self.fail(error),
        }
    }
    fn pair(&mut self, _id: u8, key: &str, value: &str) {
        match (
            wire::field_bytes(key.as_bytes()),
            wire::field_bytes(value.as_bytes()),
        ) {
            (Ok(key), Ok(value)) => self.bytes += 1 + key + value,
            (Err(error), _) | (_, Err(error)) => self.fail(error),
        }
    }
}

struct Writer<'a>(&'a mut BytesMut);

impl Sink for Writer<'_> {
    fn byte(&mut self, id: u8, value: u8) {
        self.0.put_u8(id);
        self.0.put_u8(value);
    }
    fn two(&mut self, id: u8, value: u16) {
        self.0.put_u8(id);
        self.0.put_u16(value);
    }
    fn four(&mut self, id: u8, value: u32) {
        self.0.put_u8(id);
        self.0.put_u32(value);
    }
    fn vbi(&mut self, id: u8, value: u32) {
        self.0.put_u8(id);
        wire::write_vbi(self.0, value as usize);
    }
    fn field(&mut self, id: u8, raw: &[u8]) {
        self.0.put_u8(id);
        wire::write_field(self.0, raw);
    }
    fn pair(&mut self, id: u8, key: &str, value: &str) {
        self.0.put_u8(id);
        wire::write_field(self.0, key.as_bytes());
        wire::write_field(self.0, value.as_bytes());
    }
}

/// Properties of PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK and UNSUBACK.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckProperties {
    pub reason_string: Option<String>,
    pub user_properties: UserProperties,
}

impl AckProperties {
    pub fn is_empty(&self) -> bool {
        self.reason_string.is_none() && self.user_properties.is_empty()
    }
}

impl PropertySet for AckProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::REASON_STRING => once(&mut self.reason_string, wire::read_string(bytes)?),
            id::USER_PROPERTY => read_user_property(bytes, &mut self.user_properties),
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        sink.opt_field(id::REASON_STRING, text(&self.reason_string));
        sink.users(&self.user_properties);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(raw: &'static [u8]) -> Result<AckProperties, DecodeError> {
        read(&mut Bytes::from_static(raw))
    }

    #[test]
    fn ack_properties_round_trip() {
        let props = AckProperties {
            reason_string: Some("no".into()),
            user_properties: vec![("k".into(), "v".into()), ("k".into(), "w".into())],
        };
        let mut out = BytesMut::new();
        write(&props, &mut out);
        assert_eq!(out.len(), encoded_bytes(&props).unwrap());
        #[rustfmt::skip]
        let expected: &[u8] = &[
            19,
            0x1F, 0, 2, b'n', b'o',
            0x26, 0, 1, b'k', 0, 1, b'v',
            0x26, 0, 1, b'k', 0, 1, b'w',
        ];
        assert_eq!(&out[..], expected);
        assert_eq!(read::<AckProperties>(&mut out.freeze()).unwrap(), props);
    }

    #[test]
    fn duplicate_and_foreign_properties_are_refused() {
        assert_eq!(
            decode(&[8, 0x1F, 0, 1, b'a', 0x1F, 0, 1, b'b']),
            Err(DecodeError::ProtocolError("property appears twice"))
        );
        // Topic alias (0x23) belongs to PUBLISH only.
        assert_eq!(decode(&[3, 0x23, 0, 1]), Err(NOT_ALLOWED));
        assert_eq!(
            decode(&[9, 0x1F, 0, 1]),
            Err(DecodeError::MalformedPacket(
                "property length exceeds the packet"
            ))
        );
    }

    #[test]
    fn too_long_strings_cannot_be_encoded() {
        let props = AckProperties {
            reason_string: Some("x".repeat(70_000)),
            user_properties: Vec::new(),
        };
        assert_eq!(
            encoded_bytes(&props),
            Err(EncodeError::FieldTooLong { len_bytes: 70_000 })
        );
    }
}
