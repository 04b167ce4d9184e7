//! Quality of service levels.

use crate::error::DecodeError;

/// Delivery guarantee of a PUBLISH, a will or a subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(u8)]
pub enum QoS {
    #[default]
    AtMostOnce = 0,
    AtLeastOnce = 1,
    ExactlyOnce = 2,
}

impl QoS {
    /// The QoS with this wire value; 3 is reserved and gives `None`.
    pub const fn from_u8(value: u8) -> Option<QoS> {
        match value {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }
}

impl TryFrom<u8> for QoS {
    type Error = DecodeError;

    fn try_from(value: u8) -> Result<QoS, DecodeError> {
        QoS::from_u8(value).ok_or(DecodeError::InvalidQoS)
    }
}

impl From<QoS> for u8 {
    fn from(qos: QoS) -> u8 {
        qos as u8
    }
}
