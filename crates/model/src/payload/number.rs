//! ThingsBoard's typing of numbers and numeric strings (reference §1.6).
//!
//! ThingsBoard (`JsonConverter.buildNumericKeyValueProto`) builds a `java.math.BigDecimal` from the
//! text of a number and decides on its unscaled digits and its scale:
//! - `stripTrailingZeros().scale() <= 0` and the text is not "digits.digits" (a `.` without an
//!   exponent): LONG if it fits in 64 bits, else STRING (`toPlainString()`);
//! - otherwise DOUBLE if `scale() <= 16`, else STRING (`toPlainString()`).
//!
//! We do the same arithmetic on the digits themselves, without a big-number type: a number is a sign,
//! a run of significant digits and a scale (value = ±digits × 10^-scale), exactly `BigDecimal`'s view.
//! Java's digit functions accept every Unicode decimal digit of the Basic Multilingual Plane
//! (`"٤٢"` is 42 to ThingsBoard), so numeric strings are first mapped to ASCII digits.

use std::borrow::Cow;

use super::PayloadError;

/// The value a number is stored as.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Typed {
    Long(i64),
    Double(f64),
    /// Too big for a long, or more than 16 fractional digits: `BigDecimal.toPlainString()`.
    Text(String),
}

/// `BigDecimal` refuses exponents with more than this many non-zero digits.
const EXPONENT_DIGITS_MAX: usize = 10;

/// Gson refuses to turn a number with a scale this large into a `BigDecimal` (its `NumberLimits`);
/// we use the same bound before writing a number out in full, so `1e999999999` costs an error
/// instead of a gigabyte of zeros (ThingsBoard would try to build that string).
const SCALE_ABS_MAX: i64 = 10_000;

/// More fractional digits than this and ThingsBoard keeps the number as a STRING.
const DOUBLE_SCALE_MAX: i64 = 16;

/// A decimal number as `BigDecimal` holds it: value = (-1)^negative × digits × 10^-scale.
#[derive(Debug)]
struct Decimal<'a> {
    negative: bool,
    /// The significant digits are `head` followed by `tail` (the integer and fraction parts of the
    /// text), with leading zeros removed; both empty means zero.
    head: &'a [u8],
    tail: &'a [u8],
    scale: i64,
}

impl Decimal<'_> {
    fn digit_count(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    fn is_zero(&self) -> bool {
        self.digit_count() == 0
    }

    fn digits(&self) -> impl Iterator<Item = u8> + '_ {
        self.head.iter().chain(self.tail).map(|d| d - b'0')
    }

    fn trailing_zero_count(&self) -> usize {
        let tail_zeros = self.tail.iter().rev().take_while(|&&d| d == b'0').count();
        if tail_zeros < self.tail.len() {
            tail_zeros
        } else {
            tail_zeros + self.head.iter().rev().take_while(|&&d| d == b'0').count()
        }
    }

    /// `stripTrailingZeros().scale()`; zero strips to scale 0 (Java 8 and later).
    fn stripped_scale(&self) -> i64 {
        if self.is_zero() {
            0
        } else {
            self.scale - self.trailing_zero_count() as i64
        }
    }

    /// `longValueExact()` for a value known to be integral: `None` when it does not fit.
    fn to_i64_exact(&self) -> Option<i64> {
        if self.is_zero() {
            return Some(0);
        }
        // Integral means the last `scale` digits (when scale > 0) are zeros that we drop.
        let kept_count = self.digit_count().checked_sub(self.scale.max(0) as usize)?;
        let zeros_appended = (-self.scale).max(0) as u64;
        let mut magnitude: u64 = 0;
        for digit in self.digits().take(kept_count) {
            magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit))?;
        }
        for _ in 0..zeros_appended {
            if magnitude == 0 {
                break;
            }
            magnitude = magnitude.checked_mul(10)?;
        }
        if self.negative {
            0i64.checked_sub_unsigned(magnitude)
        } else {
            i64::try_from(magnitude).ok()
        }
    }

    /// `toBigInteger().longValue()`: truncation toward zero, then the low 64 bits (wrapping), as
    /// Gson's `LazilyParsedNumber.longValue()` does for a `ts` like `1.5e12`.
    fn to_i64_wrapping(&self) -> i64 {
        let kept_count = self
            .digit_count()
            .saturating_sub(self.scale.max(0) as usize);
        // 10^64 is a multiple of 2^64, so after 64 appended zeros the low 64 bits are all zero.
        let zeros_appended = (-self.scale).clamp(0, 64);
        let mut magnitude: u64 = 0;
        for digit in self.digits().take(kept_count) {
            magnitude = magnitude.wrapping_mul(10).wrapping_add(u64::from(digit));
        }
        for _ in 0..zeros_appended {
            magnitude = magnitude.wrapping_mul(10);
        }
        let value = magnitude as i64;
        if self.negative {
            value.wrapping_neg()
        } else {
            value
        }
    }

    /// `toPlainString()`: no exponent; zero has no sign.
    fn to_plain_string(&self) -> Result<String, PayloadError> {
        if self.scale.abs() >= SCALE_ABS_MAX {
            return Err(PayloadError::NumberOutOfRange);
        }
        let mut out =
            String::with_capacity(self.digit_count() + self.scale.unsigned_abs() as usize + 3);
        if self.is_zero() {
            // BigDecimal zero: "0" for scale <= 0, else "0." and `scale` zeros.
            out.push('0');
            if self.scale > 0 {
                out.push('.');
                out.extend(std::iter::repeat_n('0', self.scale as usize));
            }
            return Ok(out);
        }
        if self.negative {
            out.push('-');
        }
        let digits = self.digits().map(|d| char::from(b'0' + d));
        if self.scale <= 0 {
            out.extend(digits);
            out.extend(std::iter::repeat_n('0', (-self.scale) as usize));
            return Ok(out);
        }
        let point_at = self.digit_count() as i64 - self.scale;
        if point_at <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-point_at) as usize));
            out.extend(digits);
        } else {
            for (index, digit) in digits.enumerate() {
                if index as i64 == point_at {
                    out.push('.');
                }
                out.push(digit);
            }
        }
        Ok(out)
    }
}

/// Reads `[-]digits[.digits][(e|E)[+|-]digits]` (a JSON number, or a numeric string after
/// [`is_parsable`]) the way `new BigDecimal(text)` does. `None` if `BigDecimal` would throw.
fn parse_decimal(text: &[u8]) -> Option<Decimal<'_>> {
    let (negative, rest) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let mantissa_len = rest
        .iter()
        .position(|&b| b == b'e' || b == b'E')
        .unwrap_or(rest.len());
    let (mantissa, exponent_part) = rest.split_at(mantissa_len);
    let (int_part, frac_part) = match mantissa.iter().position(|&b| b == b'.') {
        Some(dot) => (&mantissa[..dot], &mantissa[dot + 1..]),
        None => (mantissa, &mantissa[mantissa.len()..]),
    };
    let all_digits = |part: &[u8]| part.iter().all(u8::is_ascii_digit);
    if int_part.len() + frac_part.len() == 0 || !all_digits(int_part) || !all_digits(frac_part) {
        return None;
    }
    let exponent = match exponent_part.split_first() {
        None => 0,
        Some((_, exponent)) => parse_exponent(exponent)?,
    };
    let scale = frac_part.len() as i64 - exponent;
    // BigDecimal keeps its scale in an int.
    i32::try_from(scale).ok()?;

    let head = trim_leading_zeros(int_part);
    let tail = if head.is_empty() {
        trim_leading_zeros(frac_part)
    } else {
        frac_part
    };
    Some(Decimal {
        negative,
        head,
        tail,
        scale,
    })
}

fn parse_exponent(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let significant = trim_leading_zeros(digits);
    if significant.len() > EXPONENT_DIGITS_MAX {
        return None;
    }
    let magnitude = significant
        .iter()
        .fold(0i64, |acc, &d| acc * 10 + i64::from(d - b'0'));
    Some(if negative { -magnitude } else { magnitude })
}

fn trim_leading_zeros(digits: &[u8]) -> &[u8] {
    let zeros = digits.iter().take_while(|&&d| d == b'0').count();
    &digits[zeros..]
}

/// Types the text of a JSON number (always ASCII) as ThingsBoard does.
///
/// Fails only where `BigDecimal` throws (an exponent beyond `int`) or the plain form would be absurdly
/// long ([`SCALE_ABS_MAX`]); ThingsBoard refuses the first as malformed too.
pub(crate) fn type_number(text: &str) -> Result<Typed, PayloadError> {
    if let Some(typed) = type_common_number(text) {
        return Ok(typed);
    }
    let decimal = parse_decimal(text.as_bytes()).ok_or(PayloadError::NumberOutOfRange)?;
    // ThingsBoard's `isSimpleDouble`: "42.0" is a DOUBLE even though it is integral.
    let simple_double = text.contains('.') && !text.contains(['e', 'E']);
    if decimal.stripped_scale() <= 0 && !simple_double {
        return match decimal.to_i64_exact() {
            Some(value) => Ok(Typed::Long(value)),
            None => decimal.to_plain_string().map(Typed::Text),
        };
    }
    if decimal.scale <= DOUBLE_SCALE_MAX {
        double(text).ok_or(PayloadError::NumberOutOfRange)
    } else {
        decimal.to_plain_string().map(Typed::Text)
    }
}

/// `BigDecimal.doubleValue()`: correctly rounded, as Rust's float parsing is; a `BigDecimal` has no
/// negative zero, so `-0.0` is stored as `0.0`.
fn double(text: &str) -> Option<Typed> {
    let value: f64 = text.parse().ok()?;
    Some(Typed::Double(if value == 0.0 { 0.0 } else { value }))
}

/// The two spellings nearly every device uses, typed without the general arithmetic (which gives
/// the same answers): plain integers of up to 18 digits, and decimals without an exponent.
fn type_common_number(text: &str) -> Option<Typed> {
    let bytes = text.as_bytes();
    let unsigned = bytes.strip_prefix(b"-").unwrap_or(bytes);
    if unsigned.is_empty() {
        return None;
    }
    let mut dot = None;
    for (index, &b) in unsigned.iter().enumerate() {
        match b {
            b'0'..=b'9' => {}
            b'.' if dot.is_none() => dot = Some(index),
            _ => return None,
        }
    }
    match dot {
        // At most 18 digits always fit in an i64.
        None if unsigned.len() <= 18 => text.parse().ok().map(Typed::Long),
        // "digits.digits" is a DOUBLE whatever its value, if its scale (fraction length) allows.
        Some(dot) if unsigned.len() - dot - 1 <= DOUBLE_SCALE_MAX as usize => double(text),
        _ => None,
    }
}

/// Types a string value: numeric strings (commons-lang `NumberUtils.isParsable`) are typed as numbers
/// (`JSON_TYPE_CAST_ENABLED`, on by default); `None` means "keep it a STRING".
pub(crate) fn type_numeric_string(text: &str) -> Option<Typed> {
    if !is_parsable(text) {
        return None;
    }
    let ascii = to_ascii_digits(text);
    // ThingsBoard falls back to the original string if typing throws; a parsable string has no
    // exponent, so this can only fail for absurdly long fractions.
    type_number(&ascii).ok()
}

/// commons-lang3 `NumberUtils.isParsable`: an optional `-`, then digits with at most one `.`, not
/// ending with `.`; no `+`, no exponent, no surrounding space. Works on Java chars (UTF-16 units), so
/// a character outside the Basic Multilingual Plane is never a digit.
pub(crate) fn is_parsable(text: &str) -> bool {
    if text.is_empty() || text.ends_with('.') {
        return false;
    }
    let body = match text.strip_prefix('-') {
        Some("") => return false,
        Some(body) => body,
        None => text,
    };
    let mut points = 0;
    for c in body.chars() {
        if c == '.' {
            points += 1;
            if points > 1 {
                return false;
            }
        } else if java_digit(c).is_none() {
            return false;
        }
    }
    true
}

/// `Long.parseLong(text)`: optional sign, Java decimal digits, must fit in 64 bits.
pub(crate) fn parse_java_long(text: &str) -> Option<i64> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut magnitude: u64 = 0;
    for c in digits.chars() {
        let digit = java_digit(c)?;
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Gson's `LazilyParsedNumber.longValue()` for the text of a JSON number: `Long.parseLong`, else
/// `BigDecimal.longValue()` (truncating, wrapping), which Gson refuses for huge scales.
pub(crate) fn java_long_value(text: &str) -> Option<i64> {
    if let Some(value) = parse_java_long(text) {
        return Some(value);
    }
    let decimal = parse_decimal(text.as_bytes())?;
    if decimal.scale.abs() >= SCALE_ABS_MAX {
        return None;
    }
    Some(decimal.to_i64_wrapping())
}

/// The zeros of the runs of ten Unicode decimal digits (category Nd) in the Basic Multilingual Plane
/// besides ASCII (Unicode 14): what Java's `Character.isDigit(char)` and `Character.digit` accept.
const BMP_DIGIT_ZEROS: [u32; 36] = [
    0x0660, 0x06F0, 0x07C0, 0x0966, 0x09E6, 0x0A66, 0x0AE6, 0x0B66, 0x0BE6, 0x0C66, 0x0CE6, 0x0D66,
    0x0DE6, 0x0E50, 0x0ED0, 0x0F20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
];

/// The value of a Java decimal digit character.
fn java_digit(c: char) -> Option<u8> {
    if c.is_ascii_digit() {
        return Some(c as u8 - b'0');
    }
    let code = c as u32;
    if !(0x0660..=0xFF19).contains(&code) {
        return None;
    }
    let index = BMP_DIGIT_ZEROS.partition_point(|&zero| zero <= code);
    let zero = BMP_DIGIT_ZEROS[index.checked_sub(1)?];
    let value = code - zero;
    (value < 10).then_some(value as u8)
}

/// Maps Java digits of a parsable string to ASCII so the rest of the typing reads bytes.
fn to_ascii_digits(text: &str) -> Cow<'_, str> {
    if text.is_ascii() {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| match java_digit(c) {
                Some(digit) => char::from(b'0' + digit),
                None => c,
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(text: &str) -> String {
        match type_number(text) {
            Ok(Typed::Long(v)) => format!("LONG {v}"),
            Ok(Typed::Double(v)) => format!("DOUBLE {v:?}"),
            Ok(Typed::Text(s)) => format!("STRING {s}"),
            Err(e) => format!("ERROR {e}"),
        }
    }

    #[test]
    fn numbers_are_typed_like_big_decimal() {
        let cases = [
            ("42", "LONG 42"),
            ("-42", "LONG -42"),
            ("0", "LONG 0"),
            ("-0", "LONG 0"),
            ("42.0", "DOUBLE 42.0"),
            ("-0.0", "DOUBLE 0.0"),
            ("-0.0e0", "LONG 0"),
            ("3.14", "DOUBLE 3.14"),
            ("1e3", "LONG 1000"),
            ("1E3", "LONG 1000"),
            ("1.5e3", "LONG 1500"),
            ("1.55e1", "DOUBLE 15.5"),
            ("100e-2", "LONG 1"),
            ("0e-20", "LONG 0"),
            ("1e-5", "DOUBLE 1e-5"),
            ("1.23456e-5", "DOUBLE 1.23456e-5"),
            ("9223372036854775807", "LONG 9223372036854775807"),
            ("-9223372036854775808", "LONG -9223372036854775808"),
            ("9223372036854775808", "STRING 9223372036854775808"),
            ("12345678901234567890", "STRING 12345678901234567890"),
            ("-1.50e20", "STRING -150000000000000000000"),
            ("1e19", "STRING 10000000000000000000"),
            ("0.1234567890123456", "DOUBLE 0.1234567890123456"),
            ("0.1234567890123456789", "STRING 0.1234567890123456789"),
            ("0.00000000000000000", "STRING 0.00000000000000000"),
            ("-0.00000000000000000", "STRING 0.00000000000000000"),
            ("42.00000000000000000", "STRING 42.00000000000000000"),
            ("1e-20", "STRING 0.00000000000000000001"),
            ("1.0e-17", "STRING 0.000000000000000010"),
            ("12345678901234567890.0", "DOUBLE 1.2345678901234567e19"),
            ("1e2147483648", "ERROR number out of range"),
            ("1e99999", "ERROR number out of range"),
            ("1e00000000000000000003", "LONG 1000"),
        ];
        for (text, expected) in cases {
            assert_eq!(typed(text), expected, "typing {text}");
        }
    }

    #[test]
    fn parsable_strings_follow_commons_lang() {
        for text in [
            "42", "-3.5", ".5", "-.5", "007", "٤٢", "1.", "-", "", "+5", "1e5", " 1", "1.2.3", "-1",
        ] {
            let expected = matches!(text, "42" | "-3.5" | ".5" | "-.5" | "007" | "٤٢" | "-1");
            assert_eq!(is_parsable(text), expected, "isParsable({text:?})");
        }
        assert_eq!(type_numeric_string("٤٢"), Some(Typed::Long(42)));
        assert_eq!(type_numeric_string(".5"), Some(Typed::Double(0.5)));
        assert_eq!(type_numeric_string("007.50"), Some(Typed::Double(7.5)));
        assert_eq!(
            type_numeric_string("00.12345678901234567890"),
            Some(Typed::Text("0.12345678901234567890".to_string()))
        );
        assert_eq!(type_numeric_string("1e5"), None);
    }

    #[test]
    fn long_values_follow_gson() {
        assert_eq!(parse_java_long("+17"), Some(17));
        assert_eq!(parse_java_long("-0"), Some(0));
        assert_eq!(parse_java_long("١٢"), Some(12));
        assert_eq!(parse_java_long("9223372036854775808"), None);
        assert_eq!(parse_java_long("1.5"), None);
        assert_eq!(parse_java_long("+"), None);
        assert_eq!(java_long_value("1.5e3"), Some(1500));
        assert_eq!(java_long_value("1451649600512.9"), Some(1451649600512));
        assert_eq!(java_long_value("-2.9"), Some(-2));
        assert_eq!(java_long_value("18446744073709551617"), Some(1));
        assert_eq!(java_long_value("1e100"), Some(0));
        assert_eq!(java_long_value("1e10000"), None);
    }

    #[test]
    fn java_digits_cover_every_bmp_run() {
        assert_eq!(java_digit('٣'), Some(3));
        assert_eq!(java_digit('９'), Some(9));
        assert_eq!(java_digit('\u{19DA}'), None);
        assert_eq!(java_digit('\u{1D7CE}'), None);
        assert_eq!(java_digit('a'), None);
    }
}
