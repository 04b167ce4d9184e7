//! Payload parsing against ThingsBoard's behaviour (reference §1.5-1.7), one payload per line.

use proptest::prelude::*;

use super::*;

const NOW_MS: i64 = 1000;

/// Renders parsed telemetry compactly: `@ts key=TYPE:value ...`, groups joined by ` | `.
fn telemetry(payload: &str) -> String {
    match parse_telemetry(payload.as_bytes(), NOW_MS) {
        Ok(groups) => groups
            .iter()
            .map(|group| format!("@{} {}", group.ts, render_kvs(&group.kvs)))
            .collect::<Vec<_>>()
            .join(" | "),
        Err(error) => format!("error: {error}"),
    }
}

fn attributes(payload: &str) -> String {
    match parse_attributes(payload.as_bytes()) {
        Ok(kvs) => render_kvs(&kvs),
        Err(error) => format!("error: {error}"),
    }
}

fn render_kvs(kvs: &[Kv]) -> String {
    kvs.iter()
        .map(|kv| {
            let value = match &kv.value {
                Value::Bool(v) => format!("BOOLEAN:{v}"),
                Value::Long(v) => format!("LONG:{v}"),
                Value::Double(v) => format!("DOUBLE:{v:?}"),
                Value::Str(v) => format!("STRING:{v:?}"),
                Value::Json(v) => format!("JSON:{v}"),
            };
            format!("{}={value}", kv.key)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn check(cases: &[(&str, &str)]) {
    for (payload, expected) in cases {
        assert_eq!(telemetry(payload), *expected, "payload {payload:?}");
    }
}

#[test]
fn telemetry_forms() {
    check(&[
        (r#"{"temperature":42,"humidity":73.4}"#, "@1000 temperature=LONG:42 humidity=DOUBLE:73.4"),
        (
            r#"{"ts":1451649600512,"values":{"temperature":42,"humidity":73.4}}"#,
            "@1451649600512 temperature=LONG:42 humidity=DOUBLE:73.4",
        ),
        (
            r#"[{"ts":1451649600512,"values":{"temperature":42}},
                {"ts":1451649601512,"values":{"temperature":43}},
                {"pressure":1013}]"#,
            "@1451649600512 temperature=LONG:42 | @1451649601512 temperature=LONG:43 | @1000 pressure=LONG:1013",
        ),
        // Only BOTH `ts` and `values` make the ts form; the other keys are then ignored.
        (r#"{"ts":1,"t":2}"#, "@1000 ts=LONG:1 t=LONG:2"),
        (r#"{"values":{"a":1}}"#, r#"@1000 values=JSON:{"a":1}"#),
        (r#"{"values":{"a":1},"other":3,"ts":5}"#, "@5 a=LONG:1"),
        (r#"{"ts":"1451649600512","values":{"a":1}}"#, "@1451649600512 a=LONG:1"),
        (r#"{"ts":"+7","values":{"a":1}}"#, "@7 a=LONG:1"),
        (r#"{"ts":1.9e3,"values":{"a":1}}"#, "@1900 a=LONG:1"),
        (r#"{"ts":-1.9,"values":{"a":1}}"#, "@-1 a=LONG:1"),
        (r#"{"ts":1,"values":{"a":1},"ts":2}"#, "@2 a=LONG:1"),
        (r#"{"ts":1.5,"values":5}"#, r#"error: "values" must be a JSON object"#),
        (r#"{"ts":1,"values":null}"#, r#"error: "values" must be a JSON object"#),
        (r#"{"ts":"1.5","values":{}}"#, r#"error: "ts" must be a number or a numeric string"#),
        (r#"{"ts":null,"values":{"a":1}}"#, r#"error: "ts" must be a number or a numeric string"#),
        (r#"{"ts":true,"values":{"a":1}}"#, r#"error: "ts" must be a number or a numeric string"#),
        (r#"{"ts":[1],"values":{"a":1}}"#, r#"error: "ts" must be a number or a numeric string"#),
        // Empty documents of the right shape are fine and store nothing.
        ("{}", ""),
        ("[]", ""),
        ("[{}]", ""),
        (r#"{"ts":1,"values":{}}"#, ""),
        (r#"{"a":null}"#, ""),
        (r#"{"a":null,"b":1,"c":null}"#, "@1000 b=LONG:1"),
        // Later duplicates replace the value in the first position; a null replaces and is skipped.
        (r#"{"a":1,"b":2,"a":3}"#, "@1000 a=LONG:3 b=LONG:2"),
        (r#"{"a":1,"b":2,"a":null}"#, "@1000 b=LONG:2"),
        ("[1]", "error: element 0 of the array is not a JSON object"),
        (r#"[{"a":1},[]]"#, "error: element 1 of the array is not a JSON object"),
        ("[null]", "error: element 0 of the array is not a JSON object"),
        ("42", "error: expected a JSON object or array"),
        (r#""text""#, "error: expected a JSON object or array"),
        ("null", "error: expected a JSON object or array"),
        ("", "error: payload is empty"),
        (" \n\t ", "error: payload is empty"),
    ]);
}

#[test]
fn value_typing() {
    check(&[
        (
            r#"{"on":true,"off":false}"#,
            "@1000 on=BOOLEAN:true off=BOOLEAN:false",
        ),
        (
            r#"{"a":42,"b":-7,"c":1e3,"d":1.5e3,"e":0}"#,
            "@1000 a=LONG:42 b=LONG:-7 c=LONG:1000 d=LONG:1500 e=LONG:0",
        ),
        (
            r#"{"a":42.0,"b":3.14,"c":1.55e1,"d":-0.0}"#,
            "@1000 a=DOUBLE:42.0 b=DOUBLE:3.14 c=DOUBLE:15.5 d=DOUBLE:0.0",
        ),
        (
            r#"{"a":12345678901234567890,"b":0.1234567890123456789}"#,
            r#"@1000 a=STRING:"12345678901234567890" b=STRING:"0.1234567890123456789""#,
        ),
        (r#"{"a":1e20}"#, r#"@1000 a=STRING:"100000000000000000000""#),
        (
            r#"{"a":1e-20}"#,
            r#"@1000 a=STRING:"0.00000000000000000001""#,
        ),
        // Numeric strings are cast; exponents, signs and padding are not numeric strings.
        (
            r#"{"a":"42","b":"-3.5","c":".5","d":"007"}"#,
            "@1000 a=LONG:42 b=DOUBLE:-3.5 c=DOUBLE:0.5 d=LONG:7",
        ),
        (
            r#"{"a":"1e5","b":"+5","c":" 5","d":"5.","e":"abc","f":""}"#,
            r#"@1000 a=STRING:"1e5" b=STRING:"+5" c=STRING:" 5" d=STRING:"5." e=STRING:"abc" f=STRING:"""#,
        ),
        (
            r#"{"a":"99999999999999999999"}"#,
            r#"@1000 a=STRING:"99999999999999999999""#,
        ),
        (r#"{"a":"٤٢"}"#, "@1000 a=LONG:42"),
        (
            r#"{"o":{"x":1, "y" : [1.50, "s", null, true]},"a":[]}"#,
            r#"@1000 o=JSON:{"x":1,"y":[1.50,"s",null,true]} a=JSON:[]"#,
        ),
        (
            r#"{"o":{"x":1,"x":2,"n":null}}"#,
            r#"@1000 o=JSON:{"x":2,"n":null}"#,
        ),
        (
            r#"{"o":["\u0001\u2028\"é/"]}"#,
            r#"@1000 o=JSON:["\u0001\u2028\"é/"]"#,
        ),
        (
            r#"{"a":"\uD83D\uDE00","b":"\uD83D","c":"x\uDE00"}"#,
            r#"@1000 a=STRING:"😀" b=STRING:"�" c=STRING:"x�""#,
        ),
        (r#"{"":1}"#, "@1000 =LONG:1"),
        (r#"{"a":1e99999}"#, "error: number out of range"),
        (r#"{"a":1e2147483648}"#, "error: number out of range"),
    ]);
}

#[test]
fn lenient_json_is_accepted_like_gson() {
    check(&[
        ("{temperature:21.5}", "@1000 temperature=DOUBLE:21.5"),
        ("{'a':'b'}", r#"@1000 a=STRING:"b""#),
        ("{a=1;b=>2,c:3}", "@1000 a=LONG:1 b=LONG:2 c=LONG:3"),
        ("// comment\n{\"a\":1} # trailing comment", "@1000 a=LONG:1"),
        ("/* x */{\"a\":/* y */1}/**/", "@1000 a=LONG:1"),
        (
            r#"{"a":NaN,"b":Infinity,"c":-Infinity}"#,
            r#"@1000 a=STRING:"NaN" b=STRING:"Infinity" c=STRING:"-Infinity""#,
        ),
        (
            r#"{"a":TRUE,"b":False,"c":NULL,"d":nullable}"#,
            r#"@1000 a=BOOLEAN:true b=BOOLEAN:false d=STRING:"nullable""#,
        ),
        (r#"{"a":[1,,2,]}"#, "@1000 a=JSON:[1,null,2,null]"),
        (r#"{"a":[,]}"#, "@1000 a=JSON:[null,null]"),
        (r#"{"a":[1;2]}"#, "@1000 a=JSON:[1,2]"),
        (")]}'\n{\"a\":1}", "@1000 a=LONG:1"),
        ("\u{feff}{\"a\":1}", "@1000 a=LONG:1"),
        // Text that is not a strict JSON number is an unquoted string, typed as a string.
        (
            r#"{"a":01,"b":+5,"c":1.,"d":.5,"e":1e5x}"#,
            r#"@1000 a=LONG:1 b=STRING:"+5" c=STRING:"1." d=DOUBLE:0.5 e=STRING:"1e5x""#,
        ),
        (r#"{"a":"x\'y\/z"}"#, r#"@1000 a=STRING:"x'y/z""#),
        (
            "{\"a\":\"line\nbreak\\\nx\"}",
            r#"@1000 a=STRING:"line\nbreak\nx""#,
        ),
        (
            r#"{"k":{b:'c',"d":hello world}}"#,
            "error: invalid JSON at line 1 column 23: unterminated object",
        ),
        (
            r#"{"k":{b:'c',"d":hello}}"#,
            r#"@1000 k=JSON:{"b":"c","d":"hello"}"#,
        ),
        (
            r#"{a b:1}"#,
            "error: invalid JSON at line 1 column 4: expected ':'",
        ),
        ("[{a:1};{b:2}]", "@1000 a=LONG:1 | @1000 b=LONG:2"),
    ]);
}

#[test]
fn malformed_json_is_refused_with_its_position() {
    check(&[
        (
            r#"{"a":1,}"#,
            "error: invalid JSON at line 1 column 8: expected a name",
        ),
        (
            r#"{"a":1"#,
            "error: invalid JSON at line 1 column 7: unexpected end of input",
        ),
        (
            r#"{"a" 1}"#,
            "error: invalid JSON at line 1 column 6: expected ':'",
        ),
        (
            "{\"a\":1}x",
            "error: invalid JSON at line 1 column 8: data after the end of the JSON value",
        ),
        (
            "{\"a\":1}\n{\"b\":2}",
            "error: invalid JSON at line 2 column 1: data after the end of the JSON value",
        ),
        (
            r#"{"a":1};"#,
            "error: invalid JSON at line 1 column 8: data after the end of the JSON value",
        ),
        (
            r#"{"a":"\x"}"#,
            "error: invalid JSON at line 1 column 7: invalid escape sequence",
        ),
        (
            r#"{"a":"\u12G4"}"#,
            "error: invalid JSON at line 1 column 7: malformed unicode escape",
        ),
        (
            r#"{"a":"abc"#,
            "error: invalid JSON at line 1 column 6: unterminated string",
        ),
        (
            r#"{"a":/*}"#,
            "error: invalid JSON at line 1 column 6: unterminated comment",
        ),
        (
            r#"{"a":,}"#,
            "error: invalid JSON at line 1 column 6: unexpected value",
        ),
        (
            r#"{"a":}"#,
            "error: invalid JSON at line 1 column 6: expected a value",
        ),
        (
            r#"{"a":1 "b":2}"#,
            "error: invalid JSON at line 1 column 8: unterminated object",
        ),
        (
            "[1 2]",
            "error: invalid JSON at line 1 column 4: unterminated array",
        ),
        (
            "{,}",
            "error: invalid JSON at line 1 column 2: expected a name",
        ),
        (
            "[",
            "error: invalid JSON at line 1 column 2: unexpected end of input",
        ),
        (
            "/",
            "error: invalid JSON at line 1 column 1: expected a value",
        ),
        ("\u{feff}", "error: payload is empty"),
        ("// only a comment", "error: payload is empty"),
        (")]}'\n", "error: payload is empty"),
    ]);
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(600), "]".repeat(600));
    assert_eq!(
        telemetry(&deep),
        "error: JSON nested deeper than 512 levels"
    );
    let fine = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
    assert_eq!(
        telemetry(&fine),
        format!("@1000 a=JSON:{}{}", "[".repeat(200), "]".repeat(200))
    );
}

#[test]
fn attribute_payloads() {
    assert_eq!(
        attributes(r#"{"fw":"1.2","n":3,"cfg":{"a":1},"x":null}"#),
        r#"fw=DOUBLE:1.2 n=LONG:3 cfg=JSON:{"a":1}"#
    );
    assert_eq!(
        attributes(r#"{"ts":1,"values":{"a":1}}"#),
        r#"ts=LONG:1 values=JSON:{"a":1}"#
    );
    assert_eq!(attributes("{}"), "");
    assert_eq!(attributes(r#"[{"a":1}]"#), "error: expected a JSON object");
    assert_eq!(attributes("1"), "error: expected a JSON object");
    assert_eq!(attributes("{fw:'1.0.0'}"), r#"fw=STRING:"1.0.0""#);
}

#[test]
fn invalid_utf8_is_replaced() {
    let kvs = parse_attributes(b"{\"a\":\"x\xffy\"}").unwrap();
    assert_eq!(kvs[0].value, Value::Str("x\u{fffd}y".to_owned()));
}

#[test]
fn numbers_of_1024_characters_or_more_are_strings() {
    let long = "9".repeat(1024);
    let shorter = "9".repeat(1023);
    for text in [
        format!(r#"{{"a":{long}}}"#),
        format!(r#"{{"a":{shorter}}}"#),
    ] {
        let kvs = parse_attributes(text.as_bytes()).unwrap();
        assert_eq!(kvs[0].value.data_type(), crate::DataType::String);
    }
    // Inside a JSON value Gson writes the long one as a string, the shorter one as a number.
    let nested = format!(r#"{{"o":[{long},{shorter}]}}"#);
    let kvs = parse_attributes(nested.as_bytes()).unwrap();
    assert_eq!(
        kvs[0].value,
        Value::Json(format!(r#"["{long}",{shorter}]"#))
    );
    assert_eq!(
        strict::parse(&nested),
        Some(lenient::parse(&nested).unwrap())
    );
}

/// A generated JSON document, rendered as strict or lenient text.
#[derive(Debug, Clone)]
enum Doc {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Array(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

fn doc_strategy() -> impl Strategy<Value = Doc> {
    let number = proptest::string::string_regex(
        "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
    )
    .expect("valid regex");
    let key = prop_oneof![
        Just("ts".to_owned()),
        Just("values".to_owned()),
        "[a-z]{1,3}",
        any::<String>(),
    ];
    let leaf = prop_oneof![
        Just(Doc::Null),
        any::<bool>().prop_map(Doc::Bool),
        number.prop_map(Doc::Number),
        prop_oneof![
            "-?[0-9]{1,5}(\\.[0-9]{1,3})?",
            "[a-zA-Z]{0,6}",
            any::<String>()
        ]
        .prop_map(Doc::Str),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Doc::Array),
            proptest::collection::vec((key.clone(), inner), 0..6).prop_map(Doc::Object),
        ]
    })
}

/// How to write a document: strict JSON, or with the lenient relaxations Gson accepts.
#[derive(Debug, Clone, Copy)]
struct Style {
    lenient: bool,
    /// Picks among the spellings of each token, so one document has many renderings.
    seed: u64,
}

impl Style {
    fn pick(&mut self, choices: u64) -> u64 {
        self.seed = self
            .seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.seed >> 33) % choices
    }

    fn space(&mut self, out: &mut String) {
        let spaces = if self.lenient { 7 } else { 4 };
        match self.pick(spaces) {
            0 => out.push(' '),
            1 => out.push_str("\n\t"),
            4 => out.push_str("/* c */"),
            5 => out.push_str("# c\n"),
            6 => out.push_str("// c\r\n"),
            _ => {}
        }
    }

    fn string(&mut self, text: &str, out: &mut String) {
        let bare = self.lenient
            && text.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && text.chars().all(|c| c.is_ascii_alphanumeric())
            && !["true", "false", "null"]
                .iter()
                .any(|k| k.eq_ignore_ascii_case(text));
        if bare && self.pick(2) == 0 {
            out.push_str(text);
            return;
        }
        let quote = if self.lenient && self.pick(2) == 0 {
            '\''
        } else {
            '"'
        };
        out.push(quote);
        for c in text.chars() {
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                '\'' if quote == '\'' => out.push_str("\\'"),
                c if (c as u32) < 0x20 || self.pick(8) == 0 => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push(quote);
    }

    fn write(&mut self, doc: &Doc, out: &mut String) {
        match doc {
            Doc::Null => out.push_str(if self.lenient && self.pick(2) == 0 {
                "NULL"
            } else {
                "null"
            }),
            Doc::Bool(b) => out.push_str(&b.to_string()),
            Doc::Number(text) => out.push_str(text),
            Doc::Str(text) => self.string(text, out),
            Doc::Array(items) => {
                out.push('[');
                for (index, item) in items.iter().enumerate() {
                    if index > 0 {
                        out.push(if self.lenient && self.pick(2) == 0 {
                            ';'
                        } else {
                            ','
                        });
                    }
                    self.space(out);
                    self.write(item, out);
                    self.space(out);
                }
                out.push(']');
            }
            Doc::Object(entries) => {
                out.push('{');
                for (index, (key, value)) in entries.iter().enumerate() {
                    if index > 0 {
                        out.push(if self.lenient && self.pick(2) == 0 {
                            ';'
                        } else {
                            ','
                        });
                    }
                    self.space(out);
                    self.string(key, out);
                    self.space(out);
                    let colon = if self.lenient { self.pick(3) } else { 0 };
                    out.push_str([":", "=", "=>"][colon as usize]);
                    self.space(out);
                    self.write(value, out);
                    self.space(out);
                }
                out.push('}');
            }
        }
    }

    fn render(mut self, doc: &Doc) -> String {
        let mut out = String::new();
        self.space(&mut out);
        self.write(doc, &mut out);
        self.space(&mut out);
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn strict_and_lenient_readers_agree_on_strict_json(doc in doc_strategy(), seed in any::<u64>()) {
        let text = Style { lenient: false, seed }.render(&doc);
        let lenient = lenient::parse(&text);
        prop_assert!(lenient.is_ok(), "lenient refused {text:?}: {lenient:?}");
        let strict = strict::parse(&text);
        prop_assert!(strict.is_some(), "serde_json refused {text:?}");
        prop_assert_eq!(strict, lenient.ok());
    }

    #[test]
    fn lenient_spellings_read_as_the_strict_document(doc in doc_strategy(), seed in any::<u64>()) {
        let strict_text = Style { lenient: false, seed }.render(&doc);
        let lenient_text = Style { lenient: true, seed }.render(&doc);
        let expected = lenient::parse(&strict_text);
        prop_assert!(expected.is_ok());
        prop_assert_eq!(lenient::parse(&lenient_text), expected, "lenient text {:?}", lenient_text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = parse_telemetry(&bytes, NOW_MS);
        let _ = parse_attributes(&bytes);
    }

    #[test]
    fn json_like_noise_never_panics(parts in proptest::collection::vec(
        proptest::sample::select(vec![
            "{", "}", "[", "]", ":", ",", ";", "=", ">", "\"", "'", "\\", "/", "*", "#", "\n", " ",
            "a", "1", "-", ".", "e", "+", "0", "u", "D83D", "true", "NULL", "NaN", "ts", "values",
            ")]}'", "\u{feff}", "é", "\\u",
        ]),
        0..64,
    )) {
        let text = parts.concat();
        let _ = parse_telemetry(text.as_bytes(), NOW_MS);
        let _ = parse_attributes(text.as_bytes());
        // Whatever serde_json accepts, the lenient reader reads the same way.
        if let Some(strict) = strict::parse(&text) {
            prop_assert_eq!(Ok(strict), lenient::parse(&text));
        }
    }
}

const ENTITY: u128 = 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef;

/// The general path's telemetry record of a payload: its data points and encoding.
fn general_record(payload: &str) -> Result<(usize, Vec<u8>), PayloadError> {
    let records = parse_telemetry(payload.as_bytes(), NOW_MS)?;
    let points: usize = records.iter().map(TsRecord::data_point_count).sum();
    let mut out = Vec::new();
    if points > 0 {
        crate::record::encode_telemetry(ENTITY, &records, &mut out);
    }
    Ok((points, out))
}

/// The flat fast path either encodes exactly what the general path encodes, or gives up leaving the
/// buffer as it was; `encode_telemetry_record` always matches the general path. Returns whether the
/// fast path took the payload.
fn check_fast_path(payload: &str) -> Result<bool, TestCaseError> {
    let general = general_record(payload);
    let mut out = b"kept".to_vec();
    let fast = flat::encode(payload, ENTITY, NOW_MS, &mut out);
    match fast {
        Some(points) => {
            prop_assert!(out.starts_with(b"kept"));
            prop_assert_eq!(
                Ok((points, out[4..].to_vec())),
                general.clone(),
                "fast path on {:?}",
                payload
            );
        }
        None => prop_assert_eq!(&out, b"kept", "fast path left bytes for {:?}", payload),
    }
    let mut out = Vec::new();
    let public = encode_telemetry_record(ENTITY, payload.as_bytes(), NOW_MS, &mut out);
    prop_assert_eq!(public.map(|points| (points, out)), general, "{:?}", payload);
    Ok(fast.is_some())
}

#[test]
fn the_payloads_devices_send_take_the_fast_path() {
    let big = "9".repeat(30);
    let long_fraction = format!("0.{}", "1".repeat(20));
    for payload in [
        r#"{"pulseCounter":1234,"leakage":false,"batteryLevel":87}"#,
        r#"{"latitude":"51.5072","longitude":"-0.1276","speed":"42","fuel":57.5,"batteryLevel":12}"#,
        "{ \"temperature\" : 21.5 ,\n\t\"humidity\": 40, \"ok\": true }\r\n",
        r#"{"a":null,"b":1,"c":null}"#,
        r#"{"n":-0,"e":1e3,"E":-2.5E-2,"z":0.0,"s":"","u":"é ünïcode","ts":5}"#,
        &format!(r#"{{"big":{big},"fraction":{long_fraction},"numeric":"{big}"}}"#),
        r#"{"text":"not a number","raw":"tab	inside"}"#,
        r#"{"k":1}"#,
        r#"{"ts":1700000000123,"values":{"pulseCounter":5,"leakage":false,"batteryLevel":10}}"#,
        r#"{ "ts" : "1700000000123" , "values" : { "a" : "x" } }"#,
        r#"{"ts":-5,"values":{"values":1,"ts":2}}"#,
        r#"{"ts":1.5e3,"values":{"a":null,"b":2}}"#,
        r#"{"ts":99999999999999999999,"values":{"a":1}}"#,
        // 18 digits are read in one pass, 19 through the general typing.
        r#"{"a":999999999999999999,"b":-999999999999999999,"c":1000000000000000000,"d":-0}"#,
        r#"{"ts":999999999999999999,"values":{"a":-1000000000000000000}}"#,
    ] {
        match check_fast_path(payload) {
            Ok(fast) => assert!(fast, "general path taken for {payload}"),
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn anything_else_takes_the_general_path_with_the_same_result() {
    let long_number = "1".repeat(1100);
    let many: String = (0..=flat::ENTRIES_MAX)
        .map(|i| format!("\"k{i}\":{i}"))
        .collect::<Vec<_>>()
        .join(",");
    for payload in [
        "",
        "   ",
        "{}",
        r#"{"a":null}"#,
        r#"[{"a":1}]"#,
        r#"{"values":{"a":1},"ts":1}"#,
        r#"{"ts":1,"values":{"a":1},"b":2}"#,
        r#"{"b":2,"ts":1,"values":{"a":1}}"#,
        r#"{"ts":1,"values":{}}"#,
        r#"{"ts":1,"values":{"a":null}}"#,
        r#"{"ts":1,"values":5}"#,
        r#"{"ts":true,"values":{"a":1}}"#,
        r#"{"ts":"x","values":{"a":1}}"#,
        r#"{"ts":"1\u0030","values":{"a":1}}"#,
        r#"{"ts":5}"#,
        r#"{"ts":5,"a":1}"#,
        r#"{"ts":1,"values":{"a":1}"#,
        r#"[{"ts":1,"values":{"a":1}}]"#,
        r#"{"values":1}"#,
        r#"{"a":1,"a":2}"#,
        r#"{"a":1,"b":null,"b":3}"#,
        r#"{"a":{"b":1}}"#,
        r#"{"a":[1,2]}"#,
        r#"{"a\"b":1}"#,
        r#"{"a":"x\ny"}"#,
        r#"{'a':1}"#,
        r#"{a:1}"#,
        r#"{"a":x}"#,
        r#"{"a":True}"#,
        r#"{"a":NULL}"#,
        r#"{"a":truex}"#,
        r#"{"a"=1}"#,
        r#"{"a":1;"b":2}"#,
        r#"{"a":1,}"#,
        r#"{"a":1}}"#,
        r#"{"a":1} x"#,
        r#"{"a":1 # comment
        }"#,
        r#"{"a":1/* c */}"#,
        "\u{feff}{\"a\":1}",
        ")]}'\n{\"a\":1}",
        r#"{"a":01}"#,
        r#"{"a":1.}"#,
        r#"{"a":.5}"#,
        r#"{"a":-}"#,
        r#"{"a":1e}"#,
        r#"{"a":1e99999999999}"#,
        r#"{"a":1x}"#,
        r#"{"a":1"#,
        r#"{"a""#,
        &format!(r#"{{"a":{long_number}}}"#),
        &format!("{{{many}}}"),
    ] {
        match check_fast_path(payload) {
            Ok(fast) => assert!(!fast, "fast path taken for {payload:?}"),
            Err(e) => panic!("{e}"),
        }
    }
}

/// Flat objects with the keys and values that decide the fast path: repeated keys, `ts` and `values`,
/// nulls, numbers of every shape, numeric and plain strings, and now and then a nested value.
fn flat_doc_strategy() -> impl Strategy<Value = Doc> {
    let number = proptest::string::string_regex(
        "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
    )
    .expect("valid regex");
    let key = prop_oneof![
        4 => "[a-c]{1,2}",
        1 => Just("ts".to_owned()),
        1 => Just("values".to_owned()),
        1 => any::<String>(),
    ];
    let value = prop_oneof![
        2 => Just(Doc::Null),
        2 => any::<bool>().prop_map(Doc::Bool),
        6 => number.prop_map(Doc::Number),
        4 => prop_oneof!["-?[0-9]{1,5}(\\.[0-9]{1,3})?", "[a-zA-Z ]{0,6}", any::<String>()]
            .prop_map(Doc::Str),
        1 => Just(Doc::Array(vec![Doc::Bool(true)])),
        1 => Just(Doc::Object(vec![("x".to_owned(), Doc::Null)])),
    ];
    let flat = proptest::collection::vec((key, value), 0..10).prop_map(Doc::Object);
    let ts = prop_oneof![
        "-?[0-9]{1,19}".prop_map(Doc::Number),
        "-?[0-9]{1,3}(\\.[0-9])?(e[0-9])?".prop_map(Doc::Number),
        "[+-]?[0-9]{1,20}".prop_map(Doc::Str),
        Just(Doc::Bool(true)),
    ];
    prop_oneof![
        flat.clone(),
        (ts, flat).prop_map(|(ts, values)| Doc::Object(vec![
            ("ts".to_owned(), ts),
            ("values".to_owned(), values)
        ])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn flat_objects_encode_as_the_general_path(
        doc in flat_doc_strategy(),
        seed in any::<u64>(),
        lenient in any::<bool>(),
    ) {
        let text = Style { lenient, seed }.render(&doc);
        check_fast_path(&text)?;
    }

    #[test]
    fn any_document_encodes_as_the_general_path(doc in doc_strategy(), seed in any::<u64>()) {
        check_fast_path(&Style { lenient: false, seed }.render(&doc))?;
        check_fast_path(&Style { lenient: true, seed }.render(&doc))?;
    }

    #[test]
    fn json_like_noise_encodes_as_the_general_path(parts in proptest::collection::vec(
        proptest::sample::select(vec![
            "{", "}", "\"", "\"a\"", "\"b\"", ":", ",", " ", "\n", "1", "-", ".", "e", "0", "true",
            "null", "fals", "\"1.5\"", "\\", "#", "[", "]", "values", "ts",
        ]),
        0..40,
    )) {
        check_fast_path(&parts.concat())?;
    }
}
