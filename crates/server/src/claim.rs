//! Device claiming (reference 1.10): a device (or its gateway) announces that it may be claimed, with a secret
//! key and for how long; a customer user who knows the key then claims it by name and the device is assigned
//! to the user's customer. Announcements live in memory, as in ThingsBoard's claim cache: a restart forgets
//! them and the device announces again.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::Value as JsonValue;
use uuid::Uuid;

/// ThingsBoard's `SECURITY_CLAIM_DURATION`: how long an announcement without `durationMs` stays valid.
pub const DEFAULT_DURATION_MS: i64 = 86_400_000;

/// Why an announcement was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ClaimError {
    #[error("a claim request must be a JSON object: {0}")]
    Malformed(String),
}

#[derive(Default)]
pub struct Claims {
    offers: Mutex<HashMap<Uuid, Offer>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Offer {
    secret: String,
    expires_ms: i64,
}

/// What a claim attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimCheck {
    /// The key matches a live announcement (which is used up).
    Allowed,
    /// No live announcement, or another key.
    Refused,
}

impl Claims {
    /// The device announces `{"secretKey":…,"durationMs":…}` (both optional; an empty payload is allowed).
    pub fn offer(&self, device: Uuid, payload: &[u8], now_ms: i64) -> Result<(), ClaimError> {
        let request = if payload.iter().all(u8::is_ascii_whitespace) {
            JsonValue::Object(Default::default())
        } else {
            serde_json::from_slice(payload).map_err(|e| ClaimError::Malformed(e.to_string()))?
        };
        self.offer_json(device, &request, now_ms)
    }

    /// As [`Claims::offer`], from an already parsed request (a gateway's per-device entry).
    pub fn offer_json(
        &self,
        device: Uuid,
        request: &JsonValue,
        now_ms: i64,
    ) -> Result<(), ClaimError> {
        let JsonValue::Object(fields) = request else {
            return Err(ClaimError::Malformed("not an object".into()));
        };
        let secret = fields
            .get("secretKey")
            .and_then(JsonValue::as_str)
            .unwrap_or_default()
            .to_string();
        let duration = fields
            .get("durationMs")
            .and_then(JsonValue::as_i64)
            .filter(|d| *d > 0)
            .unwrap_or(DEFAULT_DURATION_MS);
        let mut offers = self.offers.lock();
        // Drop what expired, so announcements never pile up.
        offers.retain(|_, offer| offer.expires_ms > now_ms);
        offers.insert(
            device,
            Offer {
                secret,
                expires_ms: now_ms.saturating_add(duration),
            },
        );
        Ok(())
    }

    /// A customer user's attempt with `secret`: allowed (and used up) if the device announced that key and
    /// the announcement has not expired.
    pub fn check(&self, device: Uuid, secret: &str, now_ms: i64) -> ClaimCheck {
        let mut offers = self.offers.lock();
        match offers.get(&device) {
            Some(offer) if offer.expires_ms > now_ms && offer.secret == secret => {
                offers.remove(&device);
                ClaimCheck::Allowed
            }
            _ => ClaimCheck::Refused,
        }
    }

    /// Forgets a deleted device's announcement.
    pub fn forget(&self, device: Uuid) {
        self.offers.lock().remove(&device);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_claimed_once_with_its_key_before_it_expires() {
        let claims = Claims::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        claims
            .offer(a, br#"{"secretKey":"abc","durationMs":1000}"#, 0)
            .unwrap();
        assert_eq!(claims.check(a, "wrong", 10), ClaimCheck::Refused);
        assert_eq!(claims.check(a, "abc", 10), ClaimCheck::Allowed);
        assert_eq!(claims.check(a, "abc", 20), ClaimCheck::Refused, "used up");

        claims.offer(b, b"", 0).unwrap();
        assert_eq!(
            claims.check(b, "", DEFAULT_DURATION_MS),
            ClaimCheck::Refused,
            "expired"
        );
        claims.offer(b, b"  ", 0).unwrap();
        assert_eq!(
            claims.check(b, "", 5),
            ClaimCheck::Allowed,
            "empty key, default duration"
        );
        assert!(claims.offer(a, b"[1]", 0).is_err());
        assert!(claims.offer(a, b"{not json", 0).is_err());
    }
}
