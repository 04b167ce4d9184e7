//! The three protocol versions this codec speaks.

/// An MQTT protocol version, as negotiated by CONNECT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// MQTT 3.1: protocol name `MQIsdp`, level 3.
    V31,
    /// MQTT 3.1.1: protocol name `MQTT`, level 4.
    V311,
    /// MQTT 5.0: protocol name `MQTT`, level 5.
    V5,
}

impl Protocol {
    /// The protocol level byte of CONNECT.
    pub const fn level(self) -> u8 {
        match self {
            Protocol::V31 => 3,
            Protocol::V311 => 4,
            Protocol::V5 => 5,
        }
    }

    /// The version with this protocol level, if it is one we speak.
    pub const fn from_level(level: u8) -> Option<Protocol> {
        match level {
            3 => Some(Protocol::V31),
            4 => Some(Protocol::V311),
            5 => Some(Protocol::V5),
            _ => None,
        }
    }

    /// The protocol name CONNECT carries for this version.
    pub const fn name(self) -> &'static str {
        match self {
            Protocol::V31 => "MQIsdp",
            Protocol::V311 | Protocol::V5 => "MQTT",
        }
    }

    /// Whether packets carry properties and reason codes.
    pub const fn is_v5(self) -> bool {
        matches!(self, Protocol::V5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip() {
        for protocol in [Protocol::V31, Protocol::V311, Protocol::V5] {
            assert_eq!(Protocol::from_level(protocol.level()), Some(protocol));
        }
        assert_eq!(Protocol::from_level(6), None);
        assert_eq!(Protocol::V31.name(), "MQIsdp");
    }
}
