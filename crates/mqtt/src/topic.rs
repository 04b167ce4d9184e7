//! Topic names: a zero-copy UTF-8 string over the packet's bytes, and the name / filter rules.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use bytes::Bytes;

use crate::error::DecodeError;
use crate::wire;

/// A topic name backed by [`Bytes`], so that decoding a PUBLISH and fanning it out to many
/// subscribers never copies the topic.
///
/// Invariant: the bytes are valid UTF-8 without U+0000 (every constructor checks). Wildcards
/// are not checked here: PUBLISH decoding rejects them, and a `Topic` may also hold a
/// response topic.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Topic(Bytes);

impl Topic {
    /// A topic from a string literal.
    ///
    /// # Panics
    /// If `text` contains U+0000, which no MQTT string may carry: a programming error.
    pub fn from_static(text: &'static str) -> Topic {
        assert!(!text.contains('\0'), "MQTT topics cannot contain U+0000");
        Topic(Bytes::from_static(text.as_bytes()))
    }

    pub fn as_str(&self) -> &str {
        #[allow(unsafe_code)]
        // SAFETY: every constructor checked that the bytes are UTF-8 (`wire::check_utf8` or a
        // `str`), and `Bytes` is immutable, so they still are.
        unsafe {
            std::str::from_utf8_unchecked(&self.0)
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The underlying bytes, sharing the packet's buffer.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// Whether this is a valid PUBLISH topic name: non-empty and without wildcards.
    pub fn is_valid_name(&self) -> bool {
        is_valid_topic_name(self.as_str())
    }
}

impl TryFrom<Bytes> for Topic {
    type Error = DecodeError;

    fn try_from(raw: Bytes) -> Result<Topic, DecodeError> {
        wire::check_utf8(&raw)?;
        Ok(Topic(raw))
    }
}

impl TryFrom<String> for Topic {
    type Error = DecodeError;

    fn try_from(text: String) -> Result<Topic, DecodeError> {
        if text.contains('\0') {
            return Err(DecodeError::InvalidUtf8);
        }
        Ok(Topic(Bytes::from(text)))
    }
}

impl TryFrom<&str> for Topic {
    type Error = DecodeError;

    fn try_from(text: &str) -> Result<Topic, DecodeError> {
        Topic::try_from(text.to_owned())
    }
}

impl Deref for Topic {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Topic {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

// Hashes as `str` does, which `Borrow<str>` requires for map look-ups by `&str`.
impl Hash for Topic {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for Topic {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Topic {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A topic name a client may publish to: at least one character, no `+` or `#`
/// (MQTT-4.7.3-1, MQTT-4.7.1-1).
pub fn is_valid_topic_name(name: &str) -> bool {
    !name.is_empty() && !name.bytes().any(|b| b == b'+' || b == b'#')
}

/// A topic filter a client may subscribe to: at least one character, `+` only as a whole
/// level, `#` only as the whole last level (MQTT-4.7.1-2, MQTT-4.7.1-3). An invalid filter is
/// not a malformed SUBSCRIBE: the server refuses just that filter (MQTT 5 reason 0x8F).
pub fn is_valid_topic_filter(filter: &str) -> bool {
    if filter.is_empty() {
        return false;
    }
    let mut levels = filter.split('/').peekable();
    while let Some(level) = levels.next() {
        let is_last = levels.peek().is_none();
        match level {
            "+" => {}
            "#" if is_last => {}
            _ if level.contains(['+', '#']) => return false,
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_reject_wildcards_and_empty() {
        assert!(is_valid_topic_name("v1/devices/me/telemetry"));
        assert!(is_valid_topic_name("/"));
        assert!(!is_valid_topic_name(""));
        assert!(!is_valid_topic_name("a/+/b"));
        assert!(!is_valid_topic_name("a/#"));
    }

    #[test]
    fn filters_follow_level_rules() {
        for good in ["#", "+", "a/+/c", "a/b/#", "+/+", "/", "sport/tennis/+/#"] {
            assert!(is_valid_topic_filter(good), "{good}");
        }
        for bad in ["", "a#", "a/#/b", "a+/b", "a/b+", "##", "#/"] {
            assert!(!is_valid_topic_filter(bad), "{bad}");
        }
    }

    #[test]
    fn topic_rejects_nul_and_hashes_like_str() {
        assert_eq!(Topic::try_from("a\0b"), Err(DecodeError::InvalidUtf8));
        assert_eq!(
            Topic::try_from(Bytes::from_static(&[0xFF])),
            Err(DecodeError::InvalidUtf8)
        );
        let mut set = HashSet::new();
        set.insert(Topic::from_static("a/b"));
        assert!(set.contains("a/b"));
        assert_eq!(Topic::from_static("a/b"), "a/b");
    }
}
