//! A JSON reader that accepts exactly what ThingsBoard's parser accepts.
//!
//! ThingsBoard parses payloads with Gson's `JsonParser.parseString`, which reads in lenient mode.
//! Besides strict JSON this accepts (Gson 2.11 `JsonReader`, the relaxations of `setLenient`):
//! - a leading byte-order mark and the non-execute prefix `)]}'` + newline;
//! - `//`, `#` (to end of line) and `/* */` comments wherever whitespace may be;
//! - names and strings in single quotes, or unquoted (a run of characters up to one of
//!   `{}[]:,;=#/\` or whitespace), so `NaN`, `Infinity` and `+5` are strings;
//! - `true`, `false`, `null` in any letter case (`True`, `NULL`);
//! - `=` or `=>` between name and value, and `;` between entries or elements;
//! - empty array elements, read as null (`[1,,2]`, `[1,]`);
//! - raw control characters inside quoted strings, `\'` and an escaped line break.
//!
//! It refuses a trailing comma in an object, an empty document, and anything after the top-level
//! value other than whitespace and comments. Numbers follow strict JSON syntax; text that is not a
//! strict number (`01`, `1.`, `.5`) or is 1024 characters or longer becomes an unquoted string,
//! as in Gson. One difference: nesting deeper than [`NESTING_DEPTH_MAX`] is refused.

use std::borrow::Cow;

use super::tree::{Node, Object};
use super::PayloadError;

/// Objects and arrays nested deeper than this are refused, so hostile payloads cannot exhaust the
/// stack (Gson 2.11 has no limit).
pub(crate) const NESTING_DEPTH_MAX: u32 = 512;

/// Gson peeks numbers inside its 1024-character buffer; longer ones read as unquoted strings.
pub(crate) const NUMBER_LEN_MAX: usize = 1024;

/// Parses one lenient JSON document.
pub(crate) fn parse(text: &str) -> Result<Node<'_>, PayloadError> {
    let mut reader = Reader {
        text,
        bytes: text.as_bytes(),
        pos: 0,
        depth: 0,
    };
    reader.document()
}

struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: u32,
}

/// Where a value sits: Gson reads a stray `,` `;` `]` as an empty (null) element only in an array.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Top,
    ArrayElement,
    ObjectValue,
}

impl<'a> Reader<'a> {
    fn document(&mut self) -> Result<Node<'a>, PayloadError> {
        if self.text.starts_with('\u{feff}') {
            self.pos = '\u{feff}'.len_utf8();
        }
        if self.next_byte()?.is_none() {
            return Err(PayloadError::Empty);
        }
        self.pos -= 1;
        if self.bytes[self.pos..].starts_with(b")]}'\n") {
            self.pos += 5;
        }
        let Some(first) = self.next_byte()? else {
            return Err(PayloadError::Empty);
        };
        let node = self.value(first, Place::Top)?;
        match self.next_byte()? {
            None => Ok(node),
            Some(_) => Err(self.error(self.pos - 1, "data after the end of the JSON value")),
        }
    }

    /// Gson's `nextNonWhitespace`: skips whitespace and comments and consumes the next byte.
    fn next_byte(&mut self) -> Result<Option<u8>, PayloadError> {
        while let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            match b {
                b' ' | b'\n' | b'\r' | b'\t' => {}
                b'#' => self.skip_to_end_of_line(),
                b'/' => match self.bytes.get(self.pos) {
                    Some(b'*') => {
                        let start = self.pos - 1;
                        match self.text[self.pos + 1..].find("*/") {
                            Some(offset) => self.pos += 1 + offset + 2,
                            None => return Err(self.error(start, "unterminated comment")),
                        }
                    }
                    Some(b'/') => self.skip_to_end_of_line(),
                    _ => return Ok(Some(b'/')),
                },
                _ => return Ok(Some(b)),
            }
        }
        Ok(None)
    }

    fn next_byte_required(&mut self) -> Result<u8, PayloadError> {
        match self.next_byte()? {
            Some(b) => Ok(b),
            None => Err(self.error(self.pos, "unexpected end of input")),
        }
    }

    fn skip_to_end_of_line(&mut self) {
        match self.bytes[self.pos..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            Some(offset) => self.pos += offset + 1,
            None => self.pos = self.bytes.len(),
        }
    }

    /// Reads a value whose first byte `first` was just consumed.
    fn value(&mut self, first: u8, place: Place) -> Result<Node<'a>, PayloadError> {
        match first {
            b'"' | b'\'' => Ok(Node::Str(self.quoted(first)?)),
            b'{' => self.object(),
            b'[' => self.array(),
            b',' | b';' | b']' if place == Place::ArrayElement => {
                self.pos -= 1;
                Ok(Node::Null)
            }
            b',' | b';' | b']' => Err(self.error(self.pos - 1, "unexpected value")),
            _ => {
                self.pos -= 1;
                self.literal()
            }
        }
    }

    fn object(&mut self) -> Result<Node<'a>, PayloadError> {
        self.enter()?;
        let mut entries = Vec::with_capacity(8);
        loop {
            if !entries.is_empty() {
                match self.next_byte_required()? {
                    b'}' => break,
                    b',' | b';' => {}
                    _ => return Err(self.error(self.pos - 1, "unterminated object")),
                }
            }
            let key = match self.next_byte_required()? {
                quote @ (b'"' | b'\'') => self.quoted(quote)?,
                b'}' if entries.is_empty() => break,
                b if is_literal(b) => {
                    self.pos -= 1;
                    Cow::Borrowed(self.unquoted())
                }
                _ => return Err(self.error(self.pos - 1, "expected a name")),
            };
            match self.next_byte_required()? {
                b':' => {}
                b'=' => {
                    if self.bytes.get(self.pos) == Some(&b'>') {
                        self.pos += 1;
                    }
                }
                _ => return Err(self.error(self.pos - 1, "expected ':'")),
            }
            let first = self.next_byte_required()?;
            let value = self.value(first, Place::ObjectValue)?;
            entries.push((key, value));
        }
        self.depth -= 1;
        Ok(Node::Object(Object::from_entries(entries)))
    }

    fn array(&mut self) -> Result<Node<'a>, PayloadError> {
        self.enter()?;
        let mut items = Vec::new();
        loop {
            if !items.is_empty() {
                match self.next_byte_required()? {
                    b']' => break,
                    b',' | b';' => {}
                    _ => return Err(self.error(self.pos - 1, "unterminated array")),
                }
            }
            let first = self.next_byte_required()?;
            if first == b']' && items.is_empty() {
                break;
            }
            items.push(self.value(first, Place::ArrayElement)?);
        }
        self.depth -= 1;
        Ok(Node::Array(items))
    }

    fn enter(&mut self) -> Result<(), PayloadError> {
        self.depth += 1;
        if self.depth > NESTING_DEPTH_MAX {
            return Err(PayloadError::TooDeep {
                depth_max: NESTING_DEPTH_MAX,
            });
        }
        Ok(())
    }

    /// A keyword, a number or an unquoted string, starting at `pos`.
    fn literal(&mut self) -> Result<Node<'a>, PayloadError> {
        if let Some(node) = self.keyword() {
            return Ok(node);
        }
        let start = self.pos;
        if let Some(len) = self.number_len() {
            self.pos += len;
            return Ok(Node::Number(&self.text[start..start + len]));
        }
        if !is_literal(self.bytes[start]) {
            return Err(self.error(start, "expected a value"));
        }
        Ok(Node::Str(Cow::Borrowed(self.unquoted())))
    }

    /// Gson's `peekKeyword`: `true`, `false` or `null`, each letter in either case, not followed by
    /// a literal character (`nullable` is a string).
    fn keyword(&mut self) -> Option<Node<'a>> {
        let (word, node): (&[u8], Node<'a>) = match self.bytes[self.pos] {
            b't' | b'T' => (b"true", Node::Bool(true)),
            b'f' | b'F' => (b"false", Node::Bool(false)),
            b'n' | b'N' => (b"null", Node::Null),
            _ => return None,
        };
        let candidate = self.bytes.get(self.pos..self.pos + word.len())?;
        if !candidate.eq_ignore_ascii_case(word) {
            return None;
        }
        let after = self.pos + word.len();
        if self.bytes.get(after).is_some_and(|&b| is_literal(b)) {
            return None;
        }
        self.pos = after;
        Some(node)
    }

    /// Gson's `peekNumber`: the length of a strict JSON number at `pos` that ends where a literal
    /// ends, or `None` (the text is then an unquoted string).
    fn number_len(&self) -> Option<usize> {
        match self.strict_number_len() {
            Some(len) if len < NUMBER_LEN_MAX => Some(len),
            Some(_) => None,
            None => self.gson_number_len(),
        }
    }

    /// A quick scan for the usual case: a strict JSON number followed by a delimiter or the end.
    /// `None` leaves the decision to Gson's state machine.
    fn strict_number_len(&self) -> Option<usize> {
        strict_number_len(&self.bytes[self.pos..])
    }

    fn gson_number_len(&self) -> Option<usize> {
        #[derive(Clone, Copy, PartialEq)]
        enum Last {
            None,
            Sign,
            Digit,
            Decimal,
            FractionDigit,
            ExpE,
            ExpSign,
            ExpDigit,
        }
        let mut last = Last::None;
        // Gson's accumulator, kept only to reproduce its leading-zero test (wrapping, as Java does).
        let mut value: i64 = 0;
        let mut len = 0;
        loop {
            if len == NUMBER_LEN_MAX {
                return None;
            }
            let Some(&c) = self.bytes.get(self.pos + len) else {
                break;
            };
            match c {
                b'-' if last == Last::None => last = Last::Sign,
                b'-' | b'+' if last == Last::ExpE => last = Last::ExpSign,
                b'-' | b'+' => return None,
                b'e' | b'E' if matches!(last, Last::Digit | Last::FractionDigit) => {
                    last = Last::ExpE
                }
                b'e' | b'E' => return None,
                b'.' if last == Last::Digit => last = Last::Decimal,
                b'.' => return None,
                b'0'..=b'9' => {
                    let digit = i64::from(c - b'0');
                    match last {
                        Last::None | Last::Sign => {
                            value = -digit;
                            last = Last::Digit;
                        }
                        Last::Digit => {
                            if value == 0 {
                                return None;
                            }
                            value = value.wrapping_mul(10).wrapping_sub(digit);
                        }
                        Last::Decimal => last = Last::FractionDigit,
                        Last::ExpE | Last::ExpSign => last = Last::ExpDigit,
                        Last::FractionDigit | Last::ExpDigit => {}
                    }
                }
                _ if is_literal(c) => return None,
                _ => break,
            }
            len += 1;
        }
        matches!(last, Last::Digit | Last::FractionDigit | Last::ExpDigit).then_some(len)
    }

    /// An unquoted name or string: the run of literal bytes at `pos` (stops only at ASCII, so the
    /// slice ends on a character boundary).
    fn unquoted(&mut self) -> &'a str {
        let start = self.pos;
        let len = self.bytes[start..]
            .iter()
            .position(|&b| !is_literal(b))
            .unwrap_or(self.bytes.len() - start);
        self.pos += len;
        &self.text[start..start + len]
    }

    /// A string in `quote`s whose opening quote was consumed; borrowed unless it has escapes.
    fn quoted(&mut self, quote: u8) -> Result<Cow<'a, str>, PayloadError> {
        let start = self.pos;
        let stop = |b: u8| b == quote || b == b'\\';
        let Some(offset) = self.bytes[start..].iter().position(|&b| stop(b)) else {
            return Err(self.error(start - 1, "unterminated string"));
        };
        if self.bytes[start + offset] == quote {
            self.pos = start + offset + 1;
            return Ok(Cow::Borrowed(&self.text[start..start + offset]));
        }
        let mut out = String::with_capacity(offset + 16);
        let mut units = Utf16Joiner::default();
        self.pos = start;
        loop {
            let Some(offset) = self.bytes[self.pos..].iter().position(|&b| stop(b)) else {
                return Err(self.error(start - 1, "unterminated string"));
            };
            if offset > 0 {
                units.flush(&mut out);
                out.push_str(&self.text[self.pos..self.pos + offset]);
            }
            self.pos += offset + 1;
            if self.bytes[self.pos - 1] == quote {
                units.flush(&mut out);
                return Ok(Cow::Owned(out));
            }
            self.escape(&mut out, &mut units)?;
        }
    }

    /// Gson's `readEscapeCharacter`, after the backslash.
    fn escape(&mut self, out: &mut String, units: &mut Utf16Joiner) -> Result<(), PayloadError> {
        let at = self.pos - 1;
        let Some(&c) = self.bytes.get(self.pos) else {
            return Err(self.error(at, "unterminated escape sequence"));
        };
        self.pos += 1;
        let plain = match c {
            b'u' => {
                let Some(hex) = self.bytes.get(self.pos..self.pos + 4) else {
                    return Err(self.error(at, "unterminated escape sequence"));
                };
                let mut unit: u16 = 0;
                for &h in hex {
                    let nibble = match h {
                        b'0'..=b'9' => h - b'0',
                        b'a'..=b'f' => h - b'a' + 10,
                        b'A'..=b'F' => h - b'A' + 10,
                        _ => return Err(self.error(at, "malformed unicode escape")),
                    };
                    unit = unit << 4 | u16::from(nibble);
                }
                self.pos += 4;
                units.push(unit, out);
                return Ok(());
            }
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' | b'\n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'"' | b'\'' | b'/' | b'\\' => char::from(c),
            _ => return Err(self.error(at, "invalid escape sequence")),
        };
        units.flush(out);
        out.push(plain);
        Ok(())
    }

    fn error(&self, at: usize, reason: &'static str) -> PayloadError {
        syntax_error(self.text, at, reason)
    }
}

/// The length of the strict JSON number at the start of `bytes` if it is followed by a delimiter (a byte
/// that cannot continue an unquoted literal) or the end; `None` otherwise.
pub(crate) fn strict_number_len(bytes: &[u8]) -> Option<usize> {
    let digits_from = |start: usize| {
        start
            + bytes[start..]
                .iter()
                .take_while(|b| b.is_ascii_digit())
                .count()
    };
    let mut end = usize::from(bytes.first() == Some(&b'-'));
    match bytes.get(end) {
        Some(b'0') => end += 1,
        Some(b'1'..=b'9') => end = digits_from(end + 1),
        _ => return None,
    }
    if bytes.get(end) == Some(&b'.') {
        let fraction_end = digits_from(end + 1);
        if fraction_end == end + 1 {
            return None;
        }
        end = fraction_end;
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        end += 1;
        if matches!(bytes.get(end), Some(b'+' | b'-')) {
            end += 1;
        }
        let exponent_end = digits_from(end);
        if exponent_end == end {
            return None;
        }
        end = exponent_end;
    }
    match bytes.get(end) {
        Some(&b) if is_literal(b) => None,
        _ => Some(end),
    }
}

/// Builds a syntax error with the 1-based line and column (in characters) of byte offset `at`.
pub(crate) fn syntax_error(text: &str, at: usize, reason: &'static str) -> PayloadError {
    let at = at.min(text.len());
    let before = &text.as_bytes()[..at];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    PayloadError::Syntax {
        line: u32::try_from(line).unwrap_or(u32::MAX),
        column: u32::try_from(column).unwrap_or(u32::MAX),
        reason,
    }
}

/// Gson's `isLiteral`: the bytes that may appear in an unquoted name or string.
fn is_literal(b: u8) -> bool {
    !matches!(
        b,
        b'\t'
            | b'\n'
            | 0x0c
            | b'\r'
            | b' '
            | b'#'
            | b','
            | b'/'
            | b'='
            | b'{'
            | b'}'
            | b':'
            | b';'
            | b'['
            | b']'
            | b'\\'
    )
}

/// Joins `\uXXXX` escapes, which are UTF-16 code units, into characters. Java strings may hold a
/// lone surrogate; Rust strings may not, so it becomes U+FFFD (as it does when Java encodes it).
#[derive(Default)]
struct Utf16Joiner {
    high: Option<u16>,
}

impl Utf16Joiner {
    fn push(&mut self, unit: u16, out: &mut String) {
        match unit {
            0xD800..=0xDBFF => {
                self.flush(out);
                self.high = Some(unit);
            }
            0xDC00..=0xDFFF => match self.high.take() {
                Some(high) => {
                    let code =
                        0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(unit) - 0xDC00);
                    out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                }
                None => out.push(char::REPLACEMENT_CHARACTER),
            },
            _ => {
                self.flush(out);
                out.push(char::from_u32(u32::from(unit)).unwrap_or(char::REPLACEMENT_CHARACTER));
            }
        }
    }

    /// Ends a pending high surrogate that no low surrogate followed.
    fn flush(&mut self, out: &mut String) {
        if self.high.take().is_some() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
}
