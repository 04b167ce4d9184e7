//! Value conversions exactly as ThingsBoard's alarm-rule evaluator does them (reference section 5.1,
//! "Conversions"), including the Java library behaviour they rest on: `Double.parseDouble`,
//! `Double.toString`, `Long.parseLong`, `Boolean.parseBoolean` and
//! `StringUtils.splitByCommaWithoutQuotes`.
//!
//! Every function here is pure and allocates only when it must produce a new string.

use std::borrow::Cow;

use fleetwire_model::Value;

/// The value as a double for a NUMERIC predicate: LONG and DOUBLE as is, BOOLEAN as 1/0, STRING and
/// JSON through `Double.parseDouble`; `None` when unparsable (the filter is then false).
pub(crate) fn to_f64(value: &Value) -> Option<f64> {
    match value {
        Value::Long(v) => Some(*v as f64),
        Value::Double(v) => Some(*v),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        Value::Str(s) | Value::Json(s) => java_parse_double(s),
    }
}

/// The value as a long, for the dynamic values of DURATION and REPEATING specs: DOUBLE truncated,
/// BOOLEAN as 1/0, STRING and JSON through `Long.parseLong`.
pub(crate) fn to_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Long(v) => Some(*v),
        // Java's `(long) double` saturates and maps NaN to 0, as Rust's `as` does.
        Value::Double(v) => Some(*v as i64),
        Value::Bool(b) => Some(i64::from(*b)),
        Value::Str(s) | Value::Json(s) => s.parse::<i64>().ok(),
    }
}

/// The value as a boolean for a BOOLEAN predicate: numbers are true when > 0, strings and JSON through
/// `Boolean.parseBoolean` (true only for "true", ignoring case).
pub(crate) fn to_bool(value: &Value) -> bool {
    match value {
        Value::Long(v) => *v > 0,
        Value::Double(v) => *v > 0.0,
        Value::Bool(b) => *b,
        Value::Str(s) | Value::Json(s) => s.eq_ignore_ascii_case("true"),
    }
}

/// The string form STRING predicates and `${key}` templates see: Java's `toString()` of the value.
pub(crate) fn to_java_string(value: &Value) -> Cow<'_, str> {
    match value {
        Value::Long(v) => Cow::Owned(v.to_string()),
        Value::Double(v) => Cow::Owned(java_double_to_string(*v)),
        Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
        Value::Str(s) | Value::Json(s) => Cow::Borrowed(s),
    }
}

/// Java's `Double.toString`: decimal notation with at least one fractional digit for magnitudes in
/// [1e-3, 1e7), "computerized scientific notation" (`1.0E7`, `1.5E-4`) otherwise.
pub(crate) fn java_double_to_string(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let magnitude = v.abs();
    if magnitude == 0.0 || (1e-3..1e7).contains(&magnitude) {
        let mut text = format!("{v}");
        if !text.contains('.') {
            text.push_str(".0");
        }
        return text;
    }
    // Rust's `{:e}` gives the same shortest digits as `{}`: "1.5e-4", "1e7".
    let text = format!("{v:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let mut out = String::with_capacity(text.len() + 3);
    out.push_str(mantissa);
    if !mantissa.contains('.') {
        out.push_str(".0");
    }
    out.push('E');
    out.push_str(exponent);
    out
}

/// Java's `Double.parseDouble` for the decimal forms: surrounding whitespace (chars <= ' ') is
/// ignored, an optional `f`/`F`/`d`/`D` suffix is accepted, `NaN` and `Infinity` are spelled exactly.
/// Hexadecimal floating-point literals are not supported (they are rejected).
pub(crate) fn java_parse_double(text: &str) -> Option<f64> {
    let trimmed = text.trim_matches(|c: char| c <= ' ');
    let (sign, unsigned) = match trimmed.as_bytes().first() {
        Some(b'-') => (-1.0, &trimmed[1..]),
        Some(b'+') => (1.0, &trimmed[1..]),
        _ => (1.0, trimmed),
    };
    match unsigned {
        "NaN" => return Some(f64::NAN),
        "Infinity" => return Some(sign * f64::INFINITY),
        _ => {}
    }
    let body = unsigned
        .strip_suffix(['f', 'F', 'd', 'D'])
        .unwrap_or(unsigned);
    // Only the characters of a decimal literal; this also keeps Rust's "inf"/"nan" spellings out.
    if !body.bytes().any(|b| b.is_ascii_digit())
        || !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    body.parse::<f64>().ok().map(|v| sign * v)
}

/// Java's `Double.equals`: bit equality after collapsing NaNs, so `NaN == NaN` and `0.0 != -0.0`.
pub(crate) fn java_double_equals(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

/// ThingsBoard's `StringUtils.splitByCommaWithoutQuotes`, used by the IN / NOT_IN string operations:
/// split on commas with surrounding whitespace; if every element is wrapped in the same kind of quote
/// (`'` or `"`), the quotes are removed, otherwise the elements are returned as split.
pub(crate) fn split_by_comma_without_quotes(value: &str) -> Vec<&str> {
    let split = java_split_comma(value.trim_matches(|c: char| c <= ' '));
    let mut unquoted = Vec::with_capacity(split.len());
    let mut quote: Option<char> = None;
    for element in &split {
        let mut chars = element.chars();
        let (Some(first), Some(last)) = (chars.next(), chars.next_back()) else {
            // Empty or one-character elements: ThingsBoard throws on the former and cannot strip
            // quotes from the latter; both leave the list as split.
            return split;
        };
        if (first != '\'' && first != '"') || first != last {
            return split;
        }
        if quote.is_some_and(|q| q != first) {
            return split;
        }
        unquoted.push(&element[1..element.len() - 1]);
        quote = Some(first);
    }
    unquoted
}

/// `String.split("\\s*,\\s*")`: separators swallow surrounding whitespace, trailing empty elements
/// are dropped, a leading empty element is kept.
fn java_split_comma(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = text;
    while let Some(comma) = rest.find(',') {
        let before = rest[..comma].trim_end_matches(is_java_space);
        parts.push(before);
        rest = rest[comma + 1..].trim_start_matches(is_java_space);
    }
    parts.push(rest);
    while parts.len() > 1 && parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
}

/// Java regex `\s`: space, tab, newline, vertical tab, form feed, carriage return.
fn is_java_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_to_string_matches_java() {
        assert_eq!(java_double_to_string(20.0), "20.0");
        assert_eq!(java_double_to_string(21.5), "21.5");
        assert_eq!(java_double_to_string(-0.0), "-0.0");
        assert_eq!(java_double_to_string(0.001), "0.001");
        assert_eq!(java_double_to_string(0.0001), "1.0E-4");
        assert_eq!(java_double_to_string(1.5e-4), "1.5E-4");
        assert_eq!(java_double_to_string(1e7), "1.0E7");
        assert_eq!(java_double_to_string(1234567.0), "1234567.0");
        assert_eq!(java_double_to_string(-2.5e10), "-2.5E10");
        assert_eq!(java_double_to_string(f64::NAN), "NaN");
        assert_eq!(java_double_to_string(f64::NEG_INFINITY), "-Infinity");
    }

    #[test]
    fn parse_double_matches_java() {
        assert_eq!(java_parse_double("20"), Some(20.0));
        assert_eq!(java_parse_double(" 20.5 "), Some(20.5));
        assert_eq!(java_parse_double("1e3"), Some(1000.0));
        assert_eq!(java_parse_double("-3d"), Some(-3.0));
        assert_eq!(java_parse_double(".5"), Some(0.5));
        assert_eq!(java_parse_double("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(java_parse_double("NaN").is_some_and(f64::is_nan));
        assert_eq!(java_parse_double("inf"), None);
        assert_eq!(java_parse_double("nan"), None);
        assert_eq!(java_parse_double("abc"), None);
        assert_eq!(java_parse_double(""), None);
        assert_eq!(java_parse_double("{\"a\":1}"), None);
    }

    #[test]
    fn conversions() {
        assert_eq!(to_f64(&Value::Bool(true)), Some(1.0));
        assert_eq!(to_f64(&Value::Str("x".into())), None);
        assert!(to_bool(&Value::Long(1)));
        assert!(!to_bool(&Value::Double(-0.5)));
        assert!(to_bool(&Value::Str("TRUE".into())));
        assert!(!to_bool(&Value::Str("yes".into())));
        assert_eq!(to_i64(&Value::Double(9.9)), Some(9));
        assert_eq!(to_i64(&Value::Str("10.5".into())), None);
        assert_eq!(to_java_string(&Value::Double(25.0)), "25.0");
        assert_eq!(to_java_string(&Value::Bool(false)), "false");
        assert!(java_double_equals(f64::NAN, f64::NAN));
        assert!(!java_double_equals(0.0, -0.0));
    }

    #[test]
    fn split_respects_quotes() {
        assert_eq!(
            split_by_comma_without_quotes("a, b ,c"),
            vec!["a", "b", "c"]
        );
        assert_eq!(
            split_by_comma_without_quotes("\"a,b\", \"c\""),
            vec!["\"a", "b\"", "\"c\""],
            "a comma inside quotes still splits, and the halves are no longer quoted"
        );
        assert_eq!(split_by_comma_without_quotes("'x', 'y'"), vec!["x", "y"]);
        assert_eq!(
            split_by_comma_without_quotes("'x', \"y\""),
            vec!["'x'", "\"y\""],
            "mixed quote kinds are kept"
        );
        assert_eq!(
            split_by_comma_without_quotes("\"on\", off"),
            vec!["\"on\"", "off"]
        );
        assert_eq!(split_by_comma_without_quotes("a,b,,"), vec!["a", "b"]);
        assert_eq!(split_by_comma_without_quotes(",a"), vec!["", "a"]);
    }
}
