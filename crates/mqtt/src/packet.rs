//! The control packets of all three versions, as one enum.

use crate::auth::Auth;
use crate::connack::ConnAck;
use crate::connect::Connect;
use crate::disconnect::Disconnect;
use crate::puback::PubAck;
use crate::publish::Publish;
use crate::suback::SubAck;
use crate::subscribe::Subscribe;
use crate::unsuback::UnsubAck;
use crate::unsubscribe::Unsubscribe;

/// An MQTT control packet. Fields a version lacks (properties, reason codes before MQTT 5)
/// decode as their defaults and are ignored when encoding for that version, so the server
/// can build one value and send it to any client.
#[derive(Debug, Clone, PartialEq, Eq)]
// CONNECT is the largest variant but arrives once per connection; boxing it would not make
// the PUBLISH hot path any cheaper.
#[allow(clippy::large_enum_variant)]
pub enum Packet {
    Connect(Connect),
    ConnAck(ConnAck),
    Publish(Publish),
    PubAck(PubAck),
    PubRec(PubAck),
    PubRel(PubAck),
    PubComp(PubAck),
    Subscribe(Subscribe),
    SubAck(SubAck),
    Unsubscribe(Unsubscribe),
    UnsubAck(UnsubAck),
    PingReq,
    PingResp,
    Disconnect(Disconnect),
    /// MQTT 5 only.
    Auth(Auth),
}

impl Packet {
    /// The packet type's name as the specs write it, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Packet::Connect(_) => "CONNECT",
            Packet::ConnAck(_) => "CONNACK",
            Packet::Publish(_) => "PUBLISH",
            Packet::PubAck(_) => "PUBACK",
            Packet::PubRec(_) => "PUBREC",
            Packet::PubRel(_) => "PUBREL",
            Packet::PubComp(_) => "PUBCOMP",
            Packet::Subscribe(_) => "SUBSCRIBE",
            Packet::SubAck(_) => "SUBACK",
            Packet::Unsubscribe(_) => "UNSUBSCRIBE",
            Packet::UnsubAck(_) => "UNSUBACK",
            Packet::PingReq => "PINGREQ",
            Packet::PingResp => "PINGRESP",
            Packet::Disconnect(_) => "DISCONNECT",
            Packet::Auth(_) => "AUTH",
        }
    }
}
