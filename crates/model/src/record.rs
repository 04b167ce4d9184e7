//! The records of the ingest log and their compact binary encoding.
//!
//! The transport appends one record per accepted device message; processors decode them, possibly
//! after a crash, from bytes that the log has already framed and checksummed. The byte layout is
//! documented in `docs/format/record.md`: a version byte, a kind byte, the entity id, then LEB128
//! varints for counts and lengths, zig-zag varints for timestamps and longs, little-endian `f64`s and
//! length-prefixed UTF-8. Encoding appends to a caller's buffer and allocates nothing else; decoding
//! checks every length against the bytes left, so garbage yields a [`RecordError`], never a panic or
//! a huge allocation.

use std::fmt;
use std::str::FromStr;

use crate::value::{Kv, TsRecord, Value, ValueRef};

/// The layout version written in the first byte.
pub const RECORD_VERSION: u8 = 1;

const KIND_TELEMETRY: u8 = 1;
const KIND_ATTRIBUTES: u8 = 2;
const KIND_ATTRIBUTES_DELETED: u8 = 3;
const KIND_TELEMETRY_DELETED: u8 = 4;

const FLAG_DELETE_LATEST: u8 = 1;
const FLAG_REWRITE_LATEST: u8 = 2;

const TYPE_BOOLEAN: u8 = 0;
const TYPE_LONG: u8 = 1;
const TYPE_DOUBLE: u8 = 2;
const TYPE_STRING: u8 = 3;
const TYPE_JSON: u8 = 4;

/// The longest LEB128 encoding of a `u64`.
const VARINT_BYTES_MAX: usize = 10;

/// Attribute scopes, with ThingsBoard's names and our one-byte codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttributeScope {
    /// Reported by the device.
    Client,
    /// Set by the platform, never shown to the device.
    Server,
    /// Set by the platform, pushed to the device.
    Shared,
}

impl AttributeScope {
    pub const ALL: [AttributeScope; 3] = [
        AttributeScope::Client,
        AttributeScope::Server,
        AttributeScope::Shared,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AttributeScope::Client => "CLIENT_SCOPE",
            AttributeScope::Server => "SERVER_SCOPE",
            AttributeScope::Shared => "SHARED_SCOPE",
        }
    }

    /// The byte stored in records: CLIENT=0, SERVER=1, SHARED=2.
    pub fn code(self) -> u8 {
        match self {
            AttributeScope::Client => 0,
            AttributeScope::Server => 1,
            AttributeScope::Shared => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<AttributeScope> {
        AttributeScope::ALL.get(usize::from(code)).copied()
    }
}

impl FromStr for AttributeScope {
    type Err = RecordError;

    /// Parses ThingsBoard's name (`CLIENT_SCOPE`, ...), exactly as ThingsBoard spells it.
    fn from_str(name: &str) -> Result<AttributeScope, RecordError> {
        AttributeScope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == name)
            .ok_or_else(|| RecordError::ScopeName(name.to_owned()))
    }
}

impl fmt::Display for AttributeScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One accepted device message, as stored in the ingest log.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Telemetry of one device: one or more timestamped groups.
    Telemetry {
        entity: u128,
        records: Vec<TsRecord>,
    },
    /// Attributes of one device for a scope, with the time they were saved (epoch milliseconds).
    Attributes {
        entity: u128,
        scope: AttributeScope,
        ts: i64,
        kvs: Vec<Kv>,
    },
    /// Attribute keys of one device deleted from a scope, with the time of the delete (epoch milliseconds).
    AttributesDeleted {
        entity: u128,
        scope: AttributeScope,
        ts: i64,
        keys: Vec<String>,
    },
    /// Time-series points of one device deleted: `keys` in `[start_ts, end_ts)`; the latest value too
    /// when it falls in the range and `delete_latest`, replaced by the newest point left when
    /// `rewrite_latest`.
    TelemetryDeleted {
        entity: u128,
        keys: Vec<String>,
        start_ts: i64,
        end_ts: i64,
        delete_latest: bool,
        rewrite_latest: bool,
    },
}

/// Why bytes could not be decoded as a record (or a scope name not parsed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("record truncated at byte {offset}")]
    Truncated { offset: usize },
    #[error("unsupported record version {0}")]
    Version(u8),
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("unknown attribute scope {0}")]
    Scope(u8),
    #[error("unknown value type {value_type} at byte {offset}")]
    ValueType { value_type: u8, offset: usize },
    #[error("invalid boolean byte {value} at byte {offset}")]
    Bool { value: u8, offset: usize },
    #[error("malformed varint at byte {offset}")]
    Varint { offset: usize },
    #[error("string at byte {offset} is not valid UTF-8")]
    Utf8 { offset: usize },
    #[error("{count} unexpected bytes after the record")]
    TrailingBytes { count: usize },
    #[error("unknown attribute scope {0:?}")]
    ScopeName(String),
    #[error("unknown flags {0:#x}")]
    Flags(u8),
}

impl Record {
    pub fn entity(&self) -> u128 {
        match self {
            Record::Telemetry { entity, .. }
            | Record::Attributes { entity, .. }
            | Record::AttributesDeleted { entity, .. }
            | Record::TelemetryDeleted { entity, .. } => *entity,
        }
    }

    /// The number of key/value entries in the record.
    pub fn data_point_count(&self) -> usize {
        match self {
            Record::Telemetry { records, .. } => {
                records.iter().map(TsRecord::data_point_count).sum()
            }
            Record::Attributes { kvs, .. } => kvs.len(),
            Record::AttributesDeleted { keys, .. } | Record::TelemetryDeleted { keys, .. } => {
                keys.len()
            }
        }
    }

    /// Appends the encoding of the record to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Record::Telemetry { entity, records } => encode_telemetry(*entity, records, out),
            Record::Attributes {
                entity,
                scope,
                ts,
                kvs,
            } => encode_attributes(*entity, *scope, *ts, kvs, out),
            Record::AttributesDeleted {
                entity,
                scope,
                ts,
                keys,
            } => encode_attributes_deleted(*entity, *scope, *ts, keys, out),
            Record::TelemetryDeleted {
                entity,
                keys,
                start_ts,
                end_ts,
                delete_latest,
                rewrite_latest,
            } => {
                out.reserve(telemetry_deleted_len(*start_ts, *end_ts, keys));
                write_header(KIND_TELEMETRY_DELETED, *entity, out);
                let mut flags = 0;
                if *delete_latest {
                    flags |= FLAG_DELETE_LATEST;
                }
                if *rewrite_latest {
                    flags |= FLAG_REWRITE_LATEST;
                }
                out.push(flags);
                write_varint(zigzag(*start_ts), out);
                write_varint(zigzag(*end_ts), out);
                write_keys(keys, out);
            }
        }
    }

    /// The exact number of bytes [`Record::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        match self {
            Record::Telemetry { records, .. } => telemetry_len(records),
            Record::Attributes { ts, kvs, .. } => attributes_len(*ts, kvs),
            Record::AttributesDeleted { ts, keys, .. } => attributes_deleted_len(*ts, keys),
            Record::TelemetryDeleted {
                start_ts,
                end_ts,
                keys,
                ..
            } => telemetry_deleted_len(*start_ts, *end_ts, keys),
        }
    }

    /// Decodes one record that fills `bytes` exactly.
    pub fn decode(bytes: &[u8]) -> Result<Record, RecordError> {
        let mut reader = Reader { bytes, pos: 0 };
        let version = reader.u8()?;
        if version != RECORD_VERSION {
            return Err(RecordError::Version(version));
        }
        let kind = reader.u8()?;
        let entity = u128::from_be_bytes(reader.array::<16>()?);
        let record = match kind {
            KIND_TELEMETRY => {
                // Each group takes at least two bytes (ts and count).
                let count = reader.count(2)?;
                let mut records = Vec::with_capacity(count);
                for _ in 0..count {
                    let ts = reader.zigzag()?;
                    let kvs = reader.kvs()?;
                    records.push(TsRecord { ts, kvs });
                }
                Record::Telemetry { entity, records }
            }
            KIND_ATTRIBUTES => {
                let code = reader.u8()?;
                let scope = AttributeScope::from_code(code).ok_or(RecordError::Scope(code))?;
                let ts = reader.zigzag()?;
                let kvs = reader.kvs()?;
                Record::Attributes {
                    entity,
                    scope,
                    ts,
                    kvs,
                }
            }
            KIND_ATTRIBUTES_DELETED => {
                let code = reader.u8()?;
                let scope = AttributeScope::from_code(code).ok_or(RecordError::Scope(code))?;
                let ts = reader.zigzag()?;
                // Each key takes at least one byte (its length).
                let count = reader.count(1)?;
                let mut keys = Vec::with_capacity(count);
                for _ in 0..count {
                    keys.push(reader.string()?);
                }
                Record::AttributesDeleted {
                    entity,
                    scope,
                    ts,
                    keys,
                }
            }
            KIND_TELEMETRY_DELETED => {
                let flags = reader.u8()?;
                if flags & !(FLAG_DELETE_LATEST | FLAG_REWRITE_LATEST) != 0 {
                    return Err(RecordError::Flags(flags));
                }
                let start_ts = reader.zigzag()?;
                let end_ts = reader.zigzag()?;
                let count = reader.count(1)?;
                let mut keys = Vec::with_capacity(count);
                for _ in 0..count {
                    keys.push(reader.string()?);
                }
                Record::TelemetryDeleted {
                    entity,
                    keys,
                    start_ts,
                    end_ts,
                    delete_latest: flags & FLAG_DELETE_LATEST != 0,
                    rewrite_latest: flags & FLAG_REWRITE_LATEST != 0,
                }
            }
            other => return Err(RecordError::Kind(other)),
        };
        match bytes.len() - reader.pos {
            0 => Ok(record),
            count => Err(RecordError::TrailingBytes { count }),
        }
    }
}

/// Decodes `bytes` into `records` when they hold a telemetry record, reusing the groups, entry vectors and
/// key strings `records` already holds, so that a processor applying a stream of records does not
/// allocate for each one. Returns the record's entity, or `None` (and `records` untouched) when the record
/// is of another kind; decode those with [`Record::decode`]. Errors are those of [`Record::decode`]; on an
/// error `records` holds garbage.
pub fn decode_telemetry_into(
    bytes: &[u8],
    records: &mut Vec<TsRecord>,
) -> Result<Option<u128>, RecordError> {
    let mut reader = Reader { bytes, pos: 0 };
    let version = reader.u8()?;
    if version != RECORD_VERSION {
        return Err(RecordError::Version(version));
    }
    if reader.u8()? != KIND_TELEMETRY {
        return Ok(None);
    }
    let entity = u128::from_be_bytes(reader.array::<16>()?);
    // Each group takes at least two bytes (ts and count).
    let count = reader.count(2)?;
    records.truncate(count);
    for i in 0..count {
        let ts = reader.zigzag()?;
        match records.get_mut(i) {
            Some(record) => {
                record.ts = ts;
                reader.kvs_into(&mut record.kvs)?;
            }
            None => {
                let mut kvs = Vec::new();
                reader.kvs_into(&mut kvs)?;
                records.push(TsRecord { ts, kvs });
            }
        }
    }
    match bytes.len() - reader.pos {
        0 => Ok(Some(entity)),
        count => Err(RecordError::TrailingBytes { count }),
    }
}

/// The entity of a telemetry record, read from its header alone (the rest is not decoded): `None` for a
/// record of another kind or one too short to have an entity.
pub fn telemetry_entity(bytes: &[u8]) -> Option<u128> {
    match bytes {
        [RECORD_VERSION, KIND_TELEMETRY, rest @ ..] => {
            Some(u128::from_be_bytes(*rest.first_chunk::<16>()?))
        }
        _ => None,
    }
}

/// Appends a telemetry record straight from parsed groups, without building a [`Record`].
pub fn encode_telemetry(entity: u128, records: &[TsRecord], out: &mut Vec<u8>) {
    out.reserve(telemetry_len(records));
    write_header(KIND_TELEMETRY, entity, out);
    write_varint(records.len() as u64, out);
    for record in records {
        write_varint(zigzag(record.ts), out);
        write_kvs(&record.kvs, out);
    }
}

/// Appends an attributes record straight from parsed entries, without building a [`Record`].
pub fn encode_attributes(
    entity: u128,
    scope: AttributeScope,
    ts: i64,
    kvs: &[Kv],
    out: &mut Vec<u8>,
) {
    out.reserve(attributes_len(ts, kvs));
    write_header(KIND_ATTRIBUTES, entity, out);
    out.push(scope.code());
    write_varint(zigzag(ts), out);
    write_kvs(kvs, out);
}

/// Appends an attribute-delete record.
pub fn encode_attributes_deleted(
    entity: u128,
    scope: AttributeScope,
    ts: i64,
    keys: &[String],
    out: &mut Vec<u8>,
) {
    out.reserve(attributes_deleted_len(ts, keys));
    write_header(KIND_ATTRIBUTES_DELETED, entity, out);
    out.push(scope.code());
    write_varint(zigzag(ts), out);
    write_keys(keys, out);
}

fn write_keys(keys: &[String], out: &mut Vec<u8>) {
    write_varint(keys.len() as u64, out);
    for key in keys {
        write_str(key, out);
    }
}

fn keys_len(keys: &[String]) -> usize {
    varint_len(keys.len() as u64) + keys.iter().map(|k| str_len(k)).sum::<usize>()
}

fn telemetry_deleted_len(start_ts: i64, end_ts: i64, keys: &[String]) -> usize {
    HEADER_LEN + 1 + varint_len(zigzag(start_ts)) + varint_len(zigzag(end_ts)) + keys_len(keys)
}

const HEADER_LEN: usize = 2 + 16;

fn telemetry_len(records: &[TsRecord]) -> usize {
    HEADER_LEN
        + varint_len(records.len() as u64)
        + records
            .iter()
            .map(|r| varint_len(zigzag(r.ts)) + kvs_len(&r.kvs))
            .sum::<usize>()
}

fn attributes_len(ts: i64, kvs: &[Kv]) -> usize {
    HEADER_LEN + 1 + varint_len(zigzag(ts)) + kvs_len(kvs)
}

fn attributes_deleted_len(ts: i64, keys: &[String]) -> usize {
    HEADER_LEN
        + 1
        + varint_len(zigzag(ts))
        + varint_len(keys.len() as u64)
        + keys.iter().map(|k| str_len(k)).sum::<usize>()
}

fn kvs_len(kvs: &[Kv]) -> usize {
    varint_len(kvs.len() as u64)
        + kvs
            .iter()
            .map(|kv| {
                let value_len = match &kv.value {
                    Value::Bool(_) => 1,
                    Value::Long(v) => varint_len(zigzag(*v)),
                    Value::Double(_) => 8,
                    Value::Str(s) | Value::Json(s) => str_len(s),
                };
                str_len(&kv.key) + 1 + value_len
            })
            .sum::<usize>()
}

fn str_len(s: &str) -> usize {
    varint_len(s.len() as u64) + s.len()
}

fn write_header(kind: u8, entity: u128, out: &mut Vec<u8>) {
    out.push(RECORD_VERSION);
    out.push(kind);
    // Big-endian, so the bytes are the UUID's own byte order (`Uuid::from_u128`).
    out.extend_from_slice(&entity.to_be_bytes());
}

fn write_kvs(kvs: &[Kv], out: &mut Vec<u8>) {
    write_varint(kvs.len() as u64, out);
    for kv in kvs {
        write_entry(&kv.key, ValueRef::from(&kv.value), out);
    }
}

/// One key/value entry of a telemetry group or attributes record.
pub(crate) fn write_entry(key: &str, value: ValueRef<'_>, out: &mut Vec<u8>) {
    write_str(key, out);
    match value {
        ValueRef::Bool(b) => {
            out.push(TYPE_BOOLEAN);
            out.push(u8::from(b));
        }
        ValueRef::Long(v) => {
            out.push(TYPE_LONG);
            write_varint(zigzag(v), out);
        }
        ValueRef::Double(v) => {
            out.push(TYPE_DOUBLE);
            out.extend_from_slice(&v.to_le_bytes());
        }
        ValueRef::Str(s) => {
            out.push(TYPE_STRING);
            write_str(s, out);
        }
        ValueRef::Json(s) => {
            out.push(TYPE_JSON);
            write_str(s, out);
        }
    }
}

/// The start of a telemetry record of one group at `ts`, up to the group's entry count: what
/// [`encode_telemetry`] writes before it, for encoders that count the entries as they write them.
pub(crate) fn write_telemetry_group_head(entity: u128, ts: i64, out: &mut Vec<u8>) {
    write_header(KIND_TELEMETRY, entity, out);
    write_varint(1, out);
    write_varint(zigzag(ts), out);
}

fn write_str(s: &str, out: &mut Vec<u8>) {
    write_varint(s.len() as u64, out);
    out.extend_from_slice(s.as_bytes());
}

fn write_varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Small magnitudes of either sign take few varint bytes.
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

/// A cursor over a record's bytes; every read checks the bytes left.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn truncated(&self) -> RecordError {
        RecordError::Truncated {
            offset: self.bytes.len(),
        }
    }

    fn u8(&mut self) -> Result<u8, RecordError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| self.truncated())?;
        self.pos += 1;
        Ok(b)
    }

    fn slice(&mut self, len: usize) -> Result<&[u8], RecordError> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.truncated())?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let mut array = [0; N];
        array.copy_from_slice(self.slice(N)?);
        Ok(array)
    }

    fn varint(&mut self) -> Result<u64, RecordError> {
        let start = self.pos;
        let mut value: u64 = 0;
        for index in 0..VARINT_BYTES_MAX {
            let b = self.u8()?;
            // The tenth byte holds only the top bit of a u64.
            if index == VARINT_BYTES_MAX - 1 && b > 1 {
                return Err(RecordError::Varint { offset: start });
            }
            value |= u64::from(b & 0x7f) << (7 * index);
            if b & 0x80 == 0 {
                // A zero final byte means padding (`0x80 0x00` for 0): refusing it keeps the
                // encoding canonical, so decoding and re-encoding give back the same bytes.
                if b == 0 && index > 0 {
                    return Err(RecordError::Varint { offset: start });
                }
                return Ok(value);
            }
        }
        Err(RecordError::Varint { offset: start })
    }

    fn zigzag(&mut self) -> Result<i64, RecordError> {
        self.varint().map(unzigzag)
    }

    /// A count of items that take at least `item_bytes_min` bytes each; refusing counts the bytes
    /// left cannot hold keeps garbage from reserving gigabytes.
    fn count(&mut self, item_bytes_min: usize) -> Result<usize, RecordError> {
        let count = self.varint()?;
        let left = self.bytes.len() - self.pos;
        match usize::try_from(count) {
            Ok(count) if count <= left / item_bytes_min => Ok(count),
            _ => Err(self.truncated()),
        }
    }

    fn str(&mut self) -> Result<&str, RecordError> {
        let (offset, bytes) = self.str_bytes()?;
        utf8(bytes, offset)
    }

    /// A length-prefixed string's offset and bytes, not yet checked as UTF-8.
    fn str_bytes(&mut self) -> Result<(usize, &[u8]), RecordError> {
        let len = self.count(1)?;
        let offset = self.pos;
        Ok((offset, self.slice(len)?))
    }

    fn string(&mut self) -> Result<String, RecordError> {
        self.str().map(str::to_owned)
    }

    fn kvs(&mut self) -> Result<Vec<Kv>, RecordError> {
        let mut kvs = Vec::new();
        self.kvs_into(&mut kvs)?;
        Ok(kvs)
    }

    /// Decodes entries into `kvs`, reusing the entries (and their key strings) it holds.
    fn kvs_into(&mut self, kvs: &mut Vec<Kv>) -> Result<(), RecordError> {
        // Each entry takes at least three bytes (key length, type, value).
        let count = self.count(3)?;
        kvs.truncate(count);
        kvs.reserve_exact(count - kvs.len());
        for i in 0..count {
            match kvs.get_mut(i) {
                Some(kv) => {
                    // Consecutive records of a fleet name the same keys in the same order: a key equal to
                    // the one already in place (so valid UTF-8) is neither validated nor copied again.
                    let (offset, bytes) = self.str_bytes()?;
                    if kv.key.as_bytes() != bytes {
                        let key = utf8(bytes, offset)?;
                        kv.key.clear();
                        kv.key.push_str(key);
                    }
                    kv.value = self.value()?;
                }
                None => {
                    let key = self.string()?;
                    let value = self.value()?;
                    kvs.push(Kv { key, value });
                }
            }
        }
        Ok(())
    }

    fn value(&mut self) -> Result<Value, RecordError> {
        let offset = self.pos;
        let value = match self.u8()? {
            TYPE_BOOLEAN => match self.u8()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                value => {
                    return Err(RecordError::Bool {
                        value,
                        offset: offset + 1,
                    })
                }
            },
            TYPE_LONG => Value::Long(self.zigzag()?),
            TYPE_DOUBLE => Value::Double(f64::from_le_bytes(self.array::<8>()?)),
            TYPE_STRING => Value::Str(self.string()?),
            TYPE_JSON => Value::Json(self.string()?),
            value_type => return Err(RecordError::ValueType { value_type, offset }),
        };
        Ok(value)
    }
}

/// `bytes` as UTF-8; the error names the string's `offset` in the record.
fn utf8(bytes: &[u8], offset: usize) -> Result<&str, RecordError> {
    std::str::from_utf8(bytes).map_err(|_| RecordError::Utf8 { offset })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(record: &Record) -> Vec<u8> {
        let mut out = Vec::new();
        record.encode(&mut out);
        assert_eq!(out.len(), record.encoded_len());
        out
    }

    fn kv(key: &str, value: Value) -> Kv {
        Kv {
            key: key.to_owned(),
            value,
        }
    }

    #[test]
    fn a_telemetry_records_entity_is_read_from_its_header_alone() {
        let entity = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210_u128;
        let telemetry = encoded(&Record::Telemetry {
            entity,
            records: vec![TsRecord {
                ts: 1,
                kvs: vec![kv("t", Value::Long(1))],
            }],
        });
        assert_eq!(telemetry_entity(&telemetry), Some(entity));
        // Only the header is read: what follows it may be anything.
        assert_eq!(telemetry_entity(&telemetry[..18]), Some(entity));
        assert_eq!(telemetry_entity(&telemetry[..17]), None);
        assert_eq!(telemetry_entity(&[]), None);
        let attributes = encoded(&Record::Attributes {
            entity,
            scope: AttributeScope::Client,
            ts: 1,
            kvs: vec![kv("a", Value::Bool(true))],
        });
        assert_eq!(telemetry_entity(&attributes), None);
        let mut newer = telemetry.clone();
        newer[0] = RECORD_VERSION + 1;
        assert_eq!(telemetry_entity(&newer), None);
    }

    #[test]
    fn telemetry_decodes_into_reused_groups_as_decode_does() {
        let big = Record::Telemetry {
            entity: 7,
            records: vec![
                TsRecord {
                    ts: 1,
                    kvs: vec![
                        kv("temperature", Value::Double(21.5)),
                        kv("label", Value::Str("a".into())),
                        kv("on", Value::Bool(true)),
                    ],
                },
                TsRecord {
                    ts: -2,
                    kvs: vec![kv("j", Value::Json("{\"x\":1}".into()))],
                },
            ],
        };
        let small = Record::Telemetry {
            entity: 9,
            records: vec![TsRecord {
                ts: 3,
                kvs: vec![kv("t", Value::Long(-5))],
            }],
        };
        let mut scratch = Vec::new();
        // Growing from nothing, shrinking, growing again over what is left, and the same keys again.
        for record in [&big, &small, &big, &big] {
            let entity = decode_telemetry_into(&encoded(record), &mut scratch).unwrap();
            let Record::Telemetry { entity: e, records } = record else {
                unreachable!()
            };
            assert_eq!(entity, Some(*e));
            assert_eq!(&scratch, records);
        }
        // Another kind leaves the scratch as it was; garbage is an error.
        let other = Record::AttributesDeleted {
            entity: 1,
            scope: AttributeScope::Shared,
            ts: 5,
            keys: vec!["k".into()],
        };
        assert_eq!(
            decode_telemetry_into(&encoded(&other), &mut scratch),
            Ok(None)
        );
        assert_eq!(scratch.len(), 2);
        let mut bytes = encoded(&small);
        bytes.push(0);
        assert!(decode_telemetry_into(&bytes, &mut scratch).is_err());
        assert!(decode_telemetry_into(&[RECORD_VERSION + 1], &mut scratch).is_err());
    }

    #[test]
    fn varints_cover_the_extremes() {
        for v in [0, 1, 127, 128, 16_383, 16_384, u64::MAX / 2, u64::MAX] {
            let mut out = Vec::new();
            write_varint(v, &mut out);
            assert_eq!(out.len(), varint_len(v), "length of {v}");
            let mut reader = Reader {
                bytes: &out,
                pos: 0,
            };
            assert_eq!(reader.varint(), Ok(v));
        }
        for v in [0, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        let overlong = [0xff; 11];
        assert_eq!(
            Reader {
                bytes: &overlong,
                pos: 0
            }
            .varint(),
            Err(RecordError::Varint { offset: 0 })
        );
        let too_big = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(
            Reader {
                bytes: &too_big,
                pos: 0
            }
            .varint(),
            Err(RecordError::Varint { offset: 0 })
        );
        let padded = [0x80, 0x00];
        assert_eq!(
            Reader {
                bytes: &padded,
                pos: 0
            }
            .varint(),
            Err(RecordError::Varint { offset: 0 })
        );
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let good = encoded(&Record::Attributes {
            entity: 7,
            scope: AttributeScope::Client,
            ts: 5,
            kvs: vec![kv("k", Value::Bool(false))],
        });
        assert_eq!(
            Record::decode(&[]),
            Err(RecordError::Truncated { offset: 0 })
        );
        assert_eq!(Record::decode(&[9]), Err(RecordError::Version(9)));
        let mut bad_kind = good.clone();
        bad_kind[1] = 7;
        assert_eq!(Record::decode(&bad_kind), Err(RecordError::Kind(7)));
        let mut bad_scope = good.clone();
        bad_scope[18] = 3;
        assert_eq!(Record::decode(&bad_scope), Err(RecordError::Scope(3)));
        let mut bad_bool = good.clone();
        *bad_bool.last_mut().unwrap() = 2;
        assert!(matches!(
            Record::decode(&bad_bool),
            Err(RecordError::Bool { value: 2, .. })
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(
            Record::decode(&trailing),
            Err(RecordError::TrailingBytes { count: 1 })
        );
        for len in 0..good.len() {
            assert!(
                Record::decode(&good[..len]).is_err(),
                "prefix of {len} bytes"
            );
        }
        // A count that the remaining bytes cannot hold is refused before anything is reserved.
        let mut huge_count = good[..20].to_vec();
        huge_count.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            Record::decode(&huge_count),
            Err(RecordError::Truncated { .. })
        ));
        let mut bad_utf8 = good[..21].to_vec();
        bad_utf8.extend_from_slice(&[1, 0xff, TYPE_BOOLEAN, 0]);
        assert_eq!(
            Record::decode(&bad_utf8),
            Err(RecordError::Utf8 { offset: 22 })
        );
    }

    #[test]
    fn a_reused_key_slot_still_refuses_bad_utf8() {
        let record = Record::Telemetry {
            entity: 0,
            records: vec![TsRecord {
                ts: 1,
                kvs: vec![kv("k", Value::Long(2))],
            }],
        };
        let good = encoded(&record);
        let at = good.iter().position(|&b| b == b'k').unwrap();
        let mut bad = good.clone();
        bad[at] = 0xff;
        let mut scratch = Vec::new();
        assert_eq!(decode_telemetry_into(&good, &mut scratch), Ok(Some(0)));
        assert_eq!(
            decode_telemetry_into(&bad, &mut scratch),
            Err(RecordError::Utf8 { offset: at })
        );
        // And a good record decodes over what the failed one left.
        assert_eq!(decode_telemetry_into(&good, &mut scratch), Ok(Some(0)));
        let Record::Telemetry { records, .. } = &record else {
            unreachable!()
        };
        assert_eq!(&scratch, records);
    }

    #[test]
    fn scopes_use_thingsboard_names() {
        for scope in AttributeScope::ALL {
            assert_eq!(scope.as_str().parse::<AttributeScope>(), Ok(scope));
            assert_eq!(AttributeScope::from_code(scope.code()), Some(scope));
        }
        assert_eq!(AttributeScope::Shared.to_string(), "SHARED_SCOPE");
        assert_eq!(
            "client_scope".parse::<AttributeScope>(),
            Err(RecordError::ScopeName("client_scope".to_owned()))
        );
        assert_eq!(AttributeScope::from_code(3), None);
    }
}
