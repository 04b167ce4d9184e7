//! The parsed JSON document, as Gson's `JsonElement` tree holds it, and its text as Gson writes it.
//!
//! Both parsers (strict and lenient) produce this tree, borrowing from the payload, so the typing
//! rules apply once to one shape. Numbers keep their text: ThingsBoard types them from it.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// One JSON value, borrowed from the payload text where it can be.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    Null,
    Bool(bool),
    /// The number exactly as written (a strict JSON number).
    Number(&'a str),
    /// A quoted string, unescaped, or an unquoted literal of lenient JSON.
    Str(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    Object(Object<'a>),
}

/// A JSON object with Gson's `JsonObject` semantics: entries in first-seen order, and a repeated key
/// keeps its first position but takes its last value.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Object<'a> {
    entries: Vec<(Cow<'a, str>, Node<'a>)>,
}

/// Up to this many entries, repeated keys are found by sorting fingerprints on the stack; larger
/// objects use a hash set (SipHash, so crafted keys cannot make it quadratic).
const FINGERPRINT_DEDUP_MAX: usize = 64;

impl<'a> Object<'a> {
    /// Builds an object from entries in document order, resolving repeated keys as Gson does.
    pub(crate) fn from_entries(entries: Vec<(Cow<'a, str>, Node<'a>)>) -> Object<'a> {
        // Repeated keys are rare: look for one without allocating, and only then rebuild.
        let has_repeats = if entries.len() <= FINGERPRINT_DEDUP_MAX {
            let mut prints = [0u64; FINGERPRINT_DEDUP_MAX];
            let prints = &mut prints[..entries.len()];
            for (print, (key, _)) in prints.iter_mut().zip(&entries) {
                *print = fingerprint(key);
            }
            prints.sort_unstable();
            // Equal keys have equal fingerprints; equal fingerprints are checked for real.
            prints.windows(2).any(|pair| pair[0] == pair[1]) && has_equal_keys(&entries)
        } else {
            let mut seen = HashSet::with_capacity(entries.len());
            !entries.iter().all(|(key, _)| seen.insert(key.as_ref()))
        };
        if has_repeats {
            Object {
                entries: resolve_repeats(entries),
            }
        } else {
            Object { entries }
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Node<'a>> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| value)
    }

    /// Takes the value of `key` out of the object.
    pub(crate) fn remove(&mut self, key: &str) -> Option<Node<'a>> {
        let index = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(index).1)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn into_entries(self) -> Vec<(Cow<'a, str>, Node<'a>)> {
        self.entries
    }

    #[cfg(test)]
    pub(crate) fn entries(&self) -> &[(Cow<'a, str>, Node<'a>)] {
        &self.entries
    }
}

/// A cheap summary of a key: its length and its first and last eight bytes.
fn fingerprint(key: &str) -> u64 {
    let bytes = key.as_bytes();
    let word = |chunk: &[u8]| {
        let mut buf = [0u8; 8];
        buf[..chunk.len()].copy_from_slice(chunk);
        u64::from_le_bytes(buf)
    };
    let head = word(&bytes[..bytes.len().min(8)]);
    let tail = word(&bytes[bytes.len().saturating_sub(8)..]);
    (head ^ tail.rotate_left(29) ^ (bytes.len() as u64).rotate_left(53))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

fn has_equal_keys(entries: &[(Cow<'_, str>, Node<'_>)]) -> bool {
    (1..entries.len()).any(|i| entries[..i].iter().any(|(key, _)| *key == entries[i].0))
}

/// Moves the last value of each repeated key into the key's first entry and drops the others.
fn resolve_repeats<'a>(
    mut entries: Vec<(Cow<'a, str>, Node<'a>)>,
) -> Vec<(Cow<'a, str>, Node<'a>)> {
    // `first[i]` is the index of the first entry with entry i's key.
    let first: Vec<usize> = {
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(entries.len());
        entries
            .iter()
            .enumerate()
            .map(|(i, (key, _))| *seen.entry(key.as_ref()).or_insert(i))
            .collect()
    };
    for (i, &target) in first.iter().enumerate() {
        if target != i {
            entries[target].1 = std::mem::replace(&mut entries[i].1, Node::Null);
        }
    }
    let mut index = 0;
    entries.retain(|_| {
        let keep = first[index] == index;
        index += 1;
        keep
    });
    entries
}

impl Node<'_> {
    /// Appends the value as Gson's `JsonElement.toString()` writes it: compact, numbers as written,
    /// strings escaped by `JsonWriter` (not HTML-safe). ThingsBoard stores JSON values in this form.
    pub(crate) fn write_gson(&self, out: &mut String) {
        match self {
            Node::Null => out.push_str("null"),
            Node::Bool(true) => out.push_str("true"),
            Node::Bool(false) => out.push_str("false"),
            Node::Number(text) => out.push_str(text),
            Node::Str(text) => write_gson_string(text, out),
            Node::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    item.write_gson(out);
                }
                out.push(']');
            }
            Node::Object(object) => {
                out.push('{');
                for (index, (key, value)) in object.entries.iter().enumerate() {
                    if index > 0 {
                        out.push(',');
                    }
                    write_gson_string(key, out);
                    out.push(':');
                    value.write_gson(out);
                }
                out.push('}');
            }
        }
    }
}

/// `JsonWriter.string()`: escapes `"`, `\`, control characters (short forms where JSON has them,
/// else `\u00xx` in lower case) and the JavaScript line separators U+2028/U+2029.
fn write_gson_string(text: &str, out: &mut String) {
    out.push('"');
    let mut clean_from = 0;
    for (index, c) in text.char_indices() {
        let escape: Option<&str> = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\t' => Some("\\t"),
            '\u{8}' => Some("\\b"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\u{c}' => Some("\\f"),
            '\u{2028}' => Some("\\u2028"),
            '\u{2029}' => Some("\\u2029"),
            c if (c as u32) < 0x20 => None,
            _ => continue,
        };
        out.push_str(&text[clean_from..index]);
        match escape {
            Some(escape) => out.push_str(escape),
            None => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let code = c as usize;
                out.push_str("\\u00");
                out.push(char::from(HEX[code >> 4]));
                out.push(char::from(HEX[code & 0xf]));
            }
        }
        clean_from = index + c.len_utf8();
    }
    out.push_str(&text[clean_from..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(&'static str, i32)]) -> Vec<(Cow<'static, str>, Node<'static>)> {
        const NUMBERS: [&str; 6] = ["0", "1", "2", "3", "4", "5"];
        pairs
            .iter()
            .map(|&(k, v)| (Cow::Borrowed(k), Node::Number(NUMBERS[v as usize])))
            .collect()
    }

    #[test]
    fn repeated_keys_keep_first_position_and_last_value() {
        let object =
            Object::from_entries(entries(&[("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)]));
        let mut text = String::new();
        Node::Object(object).write_gson(&mut text);
        assert_eq!(text, r#"{"a":3,"b":5,"c":4}"#);
    }

    #[test]
    fn large_objects_dedup_the_same_way() {
        let mut pairs: Vec<(Cow<'static, str>, Node<'static>)> = (0..40)
            .map(|i| (Cow::Owned(format!("k{i}")), Node::Number("1")))
            .collect();
        pairs.push((Cow::Borrowed("k3"), Node::Number("2")));
        let object = Object::from_entries(pairs);
        assert_eq!(object.len(), 40);
        assert_eq!(object.get("k3"), Some(&Node::Number("2")));
        assert_eq!(object.entries()[3].0, "k3");
    }

    #[test]
    fn strings_are_escaped_like_json_writer() {
        let mut text = String::new();
        write_gson_string("a\"b\\c\t\u{1}\u{7f}é\u{2028}/<", &mut text);
        assert_eq!(text, "\"a\\\"b\\\\c\\t\\u0001\u{7f}é\\u2028/<\"");
    }
}
