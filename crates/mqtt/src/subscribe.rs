//! SUBSCRIBE (MQTT 5.0 §3.8, 3.1.1 §3.8): a packet identifier and a list of topic filters,
//! each with its subscription options.
//!
//! Filters are only checked for UTF-8 here: an invalid filter is refused per filter in the
//! SUBACK (see [`crate::is_valid_topic_filter`]), not by closing the connection.

use bytes::{BufMut, Bytes, BytesMut};

use crate::error::{DecodeError, EncodeError};
use crate::properties::{self, id, once, PropertySet, Sink, UserProperties, NOT_ALLOWED};
use crate::protocol::Protocol;
use crate::qos::QoS;
use crate::wire;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscribe {
    pub pkid: u16,
    /// At least one.
    pub filters: Vec<SubscribeFilter>,
    /// Always empty before MQTT 5.
    pub properties: SubscribeProperties,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscribeFilter {
    pub path: String,
    /// The maximum QoS the client accepts for this subscription.
    pub qos: QoS,
    /// MQTT 5: do not send the client its own publications. Ignored when encoding for 3.x.
    pub nolocal: bool,
    /// MQTT 5: keep the RETAIN flag when forwarding. Ignored when encoding for 3.x.
    pub retain_as_published: bool,
    /// MQTT 5: when to send retained messages. Ignored when encoding for 3.x.
    pub retain_handling: RetainHandling,
}

impl SubscribeFilter {
    pub fn new(path: impl Into<String>, qos: QoS) -> SubscribeFilter {
        SubscribeFilter {
            path: path.into(),
            qos,
            ..SubscribeFilter::default()
        }
    }
}

/// MQTT 5 "Retain Handling" subscription option.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RetainHandling {
    /// Send retained messages at the time of the subscribe (the only 3.x behaviour).
    #[default]
    OnSubscribe = 0,
    /// Send retained messages only if the subscription did not exist yet.
    OnNewSubscribe = 1,
    /// Do not send retained messages.
    Never = 2,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscribeProperties {
    /// In `1..=268_435_455` when present.
    pub subscription_id: Option<u32>,
    pub user_properties: UserProperties,
}

const QOS_MASK: u8 = 0b0000_0011;
const NO_LOCAL: u8 = 0b0000_0100;
const RETAIN_AS_PUBLISHED: u8 = 0b0000_1000;
const RETAIN_HANDLING_SHIFT: u8 = 4;
const V5_RESERVED: u8 = 0b1100_0000;

pub(crate) fn read(mut bytes: Bytes, protocol: Protocol) -> Result<Subscribe, DecodeError> {
    let pkid = wire::read_packet_id(&mut bytes)?;
    let properties = if protocol.is_v5() {
        properties::read(&mut bytes)?
    } else {
        SubscribeProperties::default()
    };
    let mut filters = Vec::new();
    while !bytes.is_empty() {
        let path = wire::read_string(&mut bytes)?;
        let options = wire::read_u8(&mut bytes)?;
        filters.push(read_options(path, options, protocol)?);
    }
    if filters.is_empty() {
        // MQTT-3.8.3-3.
        return Err(DecodeError::ProtocolError(
            "SUBSCRIBE without topic filters",
        ));
    }
    Ok(Subscribe {
        pkid,
        filters,
        properties,
    })
}

fn read_options(
    path: String,
    options: u8,
    protocol: Protocol,
) -> Result<SubscribeFilter, DecodeError> {
    let qos = QoS::try_from(options & QOS_MASK)?;
    if !protocol.is_v5() {
        if options & !QOS_MASK != 0 {
            return Err(DecodeError::MalformedPacket(
                "subscription options reserved bits are set",
            ));
        }
        return Ok(SubscribeFilter::new(path, qos));
    }
    if options & V5_RESERVED != 0 {
        return Err(DecodeError::MalformedPacket(
            "subscription options reserved bits are set",
        ));
    }
    let retain_handling = match (options >> RETAIN_HANDLING_SHIFT) & 0b11 {
        0 => RetainHandling::OnSubscribe,
        1 => RetainHandling::OnNewSubscribe,
        2 => RetainHandling::Never,
        _ => return Err(DecodeError::ProtocolError("retain handling 3")),
    };
    Ok(SubscribeFilter {
        path,
        qos,
        nolocal: options & NO_LOCAL != 0,
        retain_as_published: options & RETAIN_AS_PUBLISHED != 0,
        retain_handling,
    })
}

fn options(filter: &SubscribeFilter, protocol: Protocol) -> u8 {
    let mut options = filter.qos as u8;
    if protocol.is_v5() {
        options |= (filter.retain_handling as u8) << RETAIN_HANDLING_SHIFT;
        if filter.nolocal {
            options |= NO_LOCAL;
        }
        if filter.retain_as_published {
            options |= RETAIN_AS_PUBLISHED;
        }
    }
    options
}

pub(crate) fn remaining_bytes(
    subscribe: &Subscribe,
    protocol: Protocol,
) -> Result<usize, EncodeError> {
    if subscribe.pkid == 0 {
        return Err(EncodeError::PacketIdZero);
    }
    if subscribe.filters.is_empty() {
        return Err(EncodeError::Invalid("SUBSCRIBE without topic filters"));
    }
    let mut bytes = 2;
    if protocol.is_v5() {
        bytes += properties::encoded_bytes(&subscribe.properties)?;
    }
    for filter in &subscribe.filters {
        bytes += wire::field_bytes(filter.path.as_bytes())? + 1;
    }
    Ok(bytes)
}

pub(crate) fn write(subscribe: &Subscribe, protocol: Protocol, out: &mut BytesMut) {
    out.put_u16(subscribe.pkid);
    if protocol.is_v5() {
        properties::write(&subscribe.properties, out);
    }
    for filter in &subscribe.filters {
        wire::write_field(out, filter.path.as_bytes());
        out.put_u8(options(filter, protocol));
    }
}

impl PropertySet for SubscribeProperties {
    fn read_one(&mut self, id: u8, bytes: &mut Bytes) -> Result<(), DecodeError> {
        match id {
            id::SUBSCRIPTION_IDENTIFIER => match wire::read_vbi(bytes)? {
                0 => Err(DecodeError::ProtocolError("subscription identifier 0")),
                // A variable byte integer of at most four bytes fits in 28 bits.
                sub_id => once(&mut self.subscription_id, sub_id as u32),
            },
            id::USER_PROPERTY => properties::read_user_property(bytes, &mut self.user_properties),
            _ => Err(NOT_ALLOWED),
        }
    }

    fn emit<S: Sink>(&self, sink: &mut S) {
        if let Some(sub_id) = self.subscription_id {
            sink.vbi(id::SUBSCRIPTION_IDENTIFIER, sub_id);
        }
        sink.users(&self.user_properties);
    }
}
