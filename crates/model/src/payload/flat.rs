//! The fast path for the payloads nearly every device sends: one flat JSON object of numbers, booleans
//! and plain strings, such as `{"pulseCounter":1234,"leakage":false,"batteryLevel":87}`, alone or as
//! the values of the ts form `{"ts":1700000000000,"values":{...}}`.
//!
//! It encodes such an object's telemetry record while reading it, from keys and strings borrowed from
//! the payload, without building the document tree, a `Vec<Kv>` or one `String` per key. It gives up
//! ([`None`]) on anything else: nesting, escapes, comments, single quotes, unquoted names or strings,
//! keywords in other letter cases, `=`/`;` separators, a byte-order mark or prefix, repeated keys, a
//! `values` key outside the ts form, a ts form with other keys or with `values` before `ts`, an empty
//! object, more than [`ENTRIES_MAX`] entries, a number Gson would read as a string, or a number or `ts`
//! that does not type. The caller then parses the payload the general way, so every result, errors
//! included, is the general path's: the tests compare the two encodings on generated documents.

use super::lenient;
use super::number::{self, Typed};
use crate::record;
use crate::value::ValueRef;

/// Objects with more entries than this take the general path (repeated keys are found by comparing
/// every pair, and the entry count is written as one byte before the entries are known).
pub(crate) const ENTRIES_MAX: usize = 32;

/// Appends the telemetry record of `text` for `entity` to `out`, if `text` is one flat object as
/// described above (one group stamped `now_ms`) or `{"ts":<ts>,"values":<flat object>}` with exactly
/// those two keys in that order (one group at `ts`), and returns its number of data points. `None`: not
/// such a payload; `out` is left as it was and the general path must be taken.
pub(crate) fn encode(text: &str, entity: u128, now_ms: i64, out: &mut Vec<u8>) -> Option<usize> {
    let start = out.len();
    let mut reader = Flat {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    let count = reader.document(entity, now_ms, out);
    if count.is_none() {
        out.truncate(start);
    }
    count
}

struct Flat<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Flat<'a> {
    fn document(&mut self, entity: u128, now_ms: i64, out: &mut Vec<u8>) -> Option<usize> {
        if self.next()? != b'{' {
            return None;
        }
        let body = self.pos;
        let in_ts_form = self.next()? == b'"' && self.string()? == "ts";
        let count = if in_ts_form {
            // Devices that stamp their own time send this form; so does `fleetwire bench`.
            if self.next()? != b':' {
                return None;
            }
            let ts = self.ts()?;
            if self.next()? != b',' || self.next()? != b'"' || self.string()? != "values" {
                return None;
            }
            if self.next()? != b':' || self.next()? != b'{' {
                return None;
            }
            let count = self.entries(entity, ts, false, out)?;
            if self.next()? != b'}' {
                return None;
            }
            count
        } else {
            self.pos = body;
            self.entries(entity, now_ms, true, out)?
        };
        // Only whitespace may follow.
        self.next().is_none().then_some(count)
    }

    /// `ts` as Gson's `getAsLong()` reads it, from a number or a string without escapes.
    fn ts(&mut self) -> Option<i64> {
        match self.next()? {
            b'"' => number::parse_java_long(self.string()?),
            b'-' | b'0'..=b'9' => {
                self.pos -= 1;
                if let Some(value) = self.plain_integer() {
                    return Some(value);
                }
                let start = self.pos;
                let len = self.number_len()?;
                self.pos += len;
                number::java_long_value(&self.text[start..start + len])
            }
            _ => None,
        }
    }

    /// The entries of an object whose `{` was consumed, up to and including its `}`, written as one
    /// group at `ts`: the number of entries written. `top`: the object is the whole payload, where a
    /// `values` key would make it the ts form.
    fn entries(&mut self, entity: u128, ts: i64, top: bool, out: &mut Vec<u8>) -> Option<usize> {
        record::write_telemetry_group_head(entity, ts, out);
        // The entry count, patched at the end: at most ENTRIES_MAX, so one varint byte.
        let count_at = out.len();
        out.push(0);
        // Keys of every entry, null ones included: a repeated key must be seen even when null.
        let mut keys: [&str; ENTRIES_MAX] = [""; ENTRIES_MAX];
        let mut seen = 0;
        let mut count = 0;
        loop {
            if self.next()? != b'"' {
                return None;
            }
            let key = self.string()?;
            if seen == ENTRIES_MAX || (top && key == "values") || keys[..seen].contains(&key) {
                return None;
            }
            keys[seen] = key;
            seen += 1;
            if self.next()? != b':' {
                return None;
            }
            if self.value(key, out)? {
                count += 1;
            }
            match self.next()? {
                b',' => {}
                b'}' => break,
                _ => return None,
            }
        }
        // A group of nulls only is left out; the general path reports that the same way, so it is
        // left to it.
        if count == 0 {
            return None;
        }
        out[count_at] = u8::try_from(count).ok()?;
        Some(count)
    }

    /// Skips JSON whitespace and consumes the next byte; `None` at the end.
    fn next(&mut self) -> Option<u8> {
        while let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(b);
            }
        }
        None
    }

    /// A double-quoted string without escapes, its opening quote consumed.
    fn string(&mut self) -> Option<&'a str> {
        let start = self.pos;
        let len = memchr::memchr2(b'"', b'\\', &self.bytes[start..])?;
        if self.bytes[start + len] != b'"' {
            return None;
        }
        self.pos = start + len + 1;
        Some(&self.text[start..start + len])
    }

    /// A value, written as the entry `key` unless it is `null` (skipped, as the general path skips
    /// it): whether an entry was written.
    fn value(&mut self, key: &str, out: &mut Vec<u8>) -> Option<bool> {
        match self.next()? {
            b'"' => {
                let text = self.string()?;
                match number::type_numeric_string(text) {
                    Some(typed) => write_typed(key, typed, out),
                    None => record::write_entry(key, ValueRef::Str(text), out),
                }
            }
            b't' => {
                self.keyword(b"rue")?;
                record::write_entry(key, ValueRef::Bool(true), out);
            }
            b'f' => {
                self.keyword(b"alse")?;
                record::write_entry(key, ValueRef::Bool(false), out);
            }
            b'n' => {
                self.keyword(b"ull")?;
                return Some(false);
            }
            b'-' | b'0'..=b'9' => {
                self.pos -= 1;
                if let Some(value) = self.plain_integer() {
                    record::write_entry(key, ValueRef::Long(value), out);
                    return Some(true);
                }
                let start = self.pos;
                let len = self.number_len()?;
                self.pos += len;
                let typed = number::type_number(&self.text[start..start + len]).ok()?;
                write_typed(key, typed, out);
            }
            _ => return None,
        }
        Some(true)
    }

    /// The rest of a lower-case keyword, which must end where a literal ends.
    fn keyword(&mut self, rest: &[u8]) -> Option<()> {
        if !self.bytes[self.pos..].starts_with(rest) {
            return None;
        }
        self.pos += rest.len();
        self.ends_value().then_some(())
    }

    /// Whether the byte after a value (if any) is one the fast path accepts there.
    fn ends_value(&self) -> bool {
        self.bytes
            .get(self.pos)
            .is_none_or(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b',' | b'}'))
    }

    /// The number at `pos` read in one pass, if it is the common case: an optional `-` and 1 to 18 digits
    /// without a leading zero, followed by a delimiter the fast path takes. Such a number is a LONG, as
    /// `number::type_number` and `number::java_long_value` type it, and at most 18 digits cannot overflow.
    /// `None` (and `pos` unmoved) for anything else, which then takes the general scan and typing.
    fn plain_integer(&mut self) -> Option<i64> {
        let bytes = &self.bytes[self.pos..];
        let negative = bytes.first() == Some(&b'-');
        let digits = &bytes[usize::from(negative)..];
        // Wrapping: a 19th digit may overflow before the count rejects the number.
        let mut magnitude = 0i64;
        let mut count = 0;
        while let Some(&digit @ b'0'..=b'9') = digits.get(count) {
            magnitude = magnitude
                .wrapping_mul(10)
                .wrapping_add(i64::from(digit - b'0'));
            count += 1;
        }
        if count == 0 || count > 18 || (digits[0] == b'0' && count > 1) {
            return None;
        }
        if !digits
            .get(count)
            .is_none_or(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b',' | b'}'))
        {
            return None;
        }
        self.pos += usize::from(negative) + count;
        Some(if negative { -magnitude } else { magnitude })
    }

    /// A strict JSON number at `pos`, as the lenient reader's quick scan reads it; `None` for anything
    /// Gson might read otherwise (the general path then decides).
    fn number_len(&self) -> Option<usize> {
        let end = lenient::strict_number_len(&self.bytes[self.pos..])?;
        // Gson reads 1024 characters or more as an unquoted string; the fast path takes only the
        // delimiters it knows.
        let ends = self.bytes[self.pos..]
            .get(end)
            .is_none_or(|b| matches!(b, b' ' | b'\n' | b'\r' | b'\t' | b',' | b'}'));
        (ends && end < lenient::NUMBER_LEN_MAX).then_some(end)
    }
}

fn write_typed(key: &str, typed: Typed, out: &mut Vec<u8>) {
    let value = match &typed {
        Typed::Long(v) => ValueRef::Long(*v),
        Typed::Double(v) => ValueRef::Double(*v),
        Typed::Text(s) => ValueRef::Str(s),
    };
    record::write_entry(key, value, out);
}
