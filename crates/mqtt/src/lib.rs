//! Fleetwire's MQTT codec: MQTT 3.1 (`MQIsdp`, level 3), 3.1.1 (`MQTT`, level 4) and 5.0
//! (level 5) packets to and from bytes, with no I/O and no session state.
//!
//! # Shape
//!
//! - [`decode`] takes a [`bytes::BytesMut`] read buffer and returns `Ok(None)` until a whole
//!   packet is there. The fixed header is checked first, so a packet over `max_packet_bytes`
//!   or with reserved flags is refused before its body is buffered.
//!   [`packet_bytes`] reads just the fixed header, to reserve room for the rest.
//! - [`encode`] appends a [`Packet`] to a `BytesMut`; [`encoded_bytes`] sizes it first when a
//!   client announced a maximum packet size.
//! - [`connect_protocol`] peeks at the version of a CONNECT that may not decode, so that its
//!   refusal is written in a CONNACK the client can read.
//! - One file per packet (`connect.rs`, `publish.rs`, ...) holds its struct, its MQTT 5
//!   properties and small `read` / `remaining_bytes` / `write` functions, in the style of
//!   rumqttd's `protocol/v4`. `header.rs` is the fixed header, `wire.rs` the primitive types,
//!   `properties.rs` the MQTT 5 property machinery, `codec.rs` the dispatch.
//!
//! # Versions
//!
//! A connection's version is known once CONNECT is decoded (CONNECT decodes whatever
//! [`Protocol`] is passed). Every struct has the MQTT 5 fields; for 3.x they decode as
//! defaults and are ignored when encoding, so a server builds one packet for any client.
//! MQTT 3.1 differs from 3.1.1 in the CONNECT protocol name and in being lenient about
//! fixed-header flags, which 3.1 told receivers to ignore.
//!
//! # Zero copy
//!
//! A decoded PUBLISH's [`Topic`] and payload are slices of the read buffer (`Bytes`), so a
//! QoS 1 PUBLISH decodes without allocating and fans out to subscribers by reference count.
//!
//! # Errors
//!
//! Anything the specs call malformed or a protocol error is a [`DecodeError`], which maps to
//! the MQTT 5 reason code ([`DecodeError::reason_code`]) or CONNACK code
//! ([`DecodeError::connack_code`]) to answer with before closing. Checks that the specs give
//! a per-item answer for (an invalid subscription filter gets SUBACK 0x8F, an empty client id
//! gets CONNACK 0x02) are left to the server; see [`is_valid_topic_filter`].

#![deny(unsafe_code)]

mod auth;
mod codec;
mod connack;
mod connect;
mod disconnect;
mod error;
mod header;
mod packet;
mod ping;
mod properties;
mod protocol;
mod puback;
mod publish;
mod qos;
pub mod reason;
mod suback;
mod subscribe;
mod topic;
mod unsuback;
mod unsubscribe;
mod wire;

pub use auth::{Auth, AuthProperties};
pub use codec::{decode, encode, encode_puback, encoded_bytes, packet_bytes};
pub use connack::{ConnAck, ConnAckProperties};
pub use connect::{connect_protocol, Connect, ConnectProperties, Will, WillProperties};
pub use disconnect::{Disconnect, DisconnectProperties};
pub use error::{DecodeError, EncodeError};
pub use packet::Packet;
pub use properties::{AckProperties, UserProperties};
pub use protocol::Protocol;
pub use puback::PubAck;
pub use publish::{Publish, PublishProperties};
pub use qos::QoS;
pub use suback::SubAck;
pub use subscribe::{RetainHandling, Subscribe, SubscribeFilter, SubscribeProperties};
pub use topic::{is_valid_topic_filter, is_valid_topic_name, Topic};
pub use unsuback::UnsubAck;
pub use unsubscribe::{Unsubscribe, UnsubscribeProperties};
