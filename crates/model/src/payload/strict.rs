//! Strict JSON (RFC 8259) read with serde_json into the same tree as the lenient reader: the oracle
//! that the tests hold the lenient reader to.
//!
//! serde_json does not keep the text of numbers (without its `arbitrary_precision` feature, which
//! would change `serde_json::Value` for every crate of the workspace), and ThingsBoard types numbers
//! from their text. So containers are read entry by entry with every value taken as a `RawValue`
//! (its exact text), and nested containers are read again from that text.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::lenient::NESTING_DEPTH_MAX;
use super::tree::{Node, Object};

/// Gson reads numbers this long as unquoted strings (see the lenient reader).
const NUMBER_LEN_MAX: usize = 1024;

/// Parses strict JSON; `None` if it is not strict JSON (or is nested too deep).
pub(crate) fn parse(text: &str) -> Option<Node<'_>> {
    let start = text.trim_start_matches([' ', '\t', '\n', '\r']);
    match start.as_bytes().first()? {
        b'{' | b'[' => container(text, 1),
        _ => scalar(serde_json::from_str::<&RawValue>(text).ok()?.get()),
    }
}

/// An object or array whose text is `text` (surrounding whitespace allowed), `depth` levels deep.
fn container(text: &str, depth: u32) -> Option<Node<'_>> {
    if depth > NESTING_DEPTH_MAX {
        return None;
    }
    let start = text.trim_start_matches([' ', '\t', '\n', '\r']);
    if start.starts_with('{') {
        let Entries(raw_entries) = serde_json::from_str(text).ok()?;
        let mut entries = Vec::with_capacity(raw_entries.len());
        for (key, raw) in raw_entries {
            entries.push((key, value(raw.get(), depth)?));
        }
        Some(Node::Object(Object::from_entries(entries)))
    } else {
        let raw_items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
        let items = raw_items
            .into_iter()
            .map(|raw| value(raw.get(), depth))
            .collect::<Option<Vec<_>>>()?;
        Some(Node::Array(items))
    }
}

/// A value of a container that is `depth` levels deep.
fn value(text: &str, depth: u32) -> Option<Node<'_>> {
    match text.as_bytes().first()? {
        b'{' | b'[' => container(text, depth + 1),
        _ => scalar(text),
    }
}

/// The exact text of a JSON string, number, boolean or null.
fn scalar(text: &str) -> Option<Node<'_>> {
    Some(match text.as_bytes().first()? {
        b'"' => {
            let inner = &text[1..text.len() - 1];
            if inner.contains('\\') {
                // Lone surrogate escapes fail here; the lenient reader replaces them.
                Node::Str(Cow::Owned(serde_json::from_str::<String>(text).ok()?))
            } else {
                Node::Str(Cow::Borrowed(inner))
            }
        }
        b't' => Node::Bool(true),
        b'f' => Node::Bool(false),
        b'n' => Node::Null,
        _ if text.len() >= NUMBER_LEN_MAX => Node::Str(Cow::Borrowed(text)),
        _ => Node::Number(text),
    })
}

/// The entries of an object in document order, values unparsed.
struct Entries<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Entries<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(EntriesVisitor(std::marker::PhantomData))
    }
}

struct EntriesVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for EntriesVisitor<'a> {
    type Value = Entries<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(key) = map.next_key_seed(KeySeed(std::marker::PhantomData))? {
            entries.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(Entries(entries))
    }
}

/// Reads a key, borrowed from the text unless it has escapes.
struct KeySeed<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> DeserializeSeed<'de> for KeySeed<'a> {
    type Value = Cow<'a, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de: 'a, 'a> Visitor<'de> for KeySeed<'a> {
    type Value = Cow<'a, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}
