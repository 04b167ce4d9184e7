//! Chunk encoding: a sealed run of one series' points as a self-checking byte blob.
//!
//! Numbers go through pco (pcodec), which finds the delta order and the bit widths per column
//! itself; the layout around them is ours and is documented byte by byte in
//! `docs/format/chunk.md`. Encoding is split from storage (`store.rs` decides where a chunk
//! lives), so this file is pure: bytes in, points out.

use crate::points::{Points, Tag, ValueRef};

pub(crate) const VERSION: u8 = 1;
/// version, type mask, point count, first ts, last ts.
pub(crate) const HEADER_BYTES: usize = 1 + 1 + 4 + 8 + 8;
const CRC_BYTES: usize = 4;

/// The fixed header of a chunk, readable without decompressing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) point_count: u32,
    pub(crate) first_ts: i64,
    pub(crate) last_ts: i64,
}

/// Why a blob is not a valid chunk; the store adds where the blob was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalid(pub(crate) String);

impl Invalid {
    fn new(reason: impl Into<String>) -> Invalid {
        Invalid(reason.into())
    }
}

/// Errors that can only come from a bug in our use of pco (encoding is infallible for valid
/// input); reported rather than panicking because the store must stay up.
#[derive(Debug)]
pub(crate) struct EncodeError(pub(crate) String);

/// How pco is told to treat a column.
#[derive(Clone, Copy)]
enum Column {
    /// Timestamps: pco's classic mode and first-order deltas. Its automatic mode detection
    /// sometimes picks an integer multiplier for regular timestamps and costs 6x more (measured:
    /// 316 B instead of 36 B for 1000 points at 1 s); classic + delta is never worse on regular,
    /// jittered or gappy ts. Its automatic delta choice tries no delta, lookback and each order
    /// until one is worse, on a sample; on timestamps (regular, jittered around 5 s, arrival times
    /// 15-27 ms apart) it gave the bytes of order 1, at 2-5x the encode time.
    Ts,
    /// Values: pco chooses the mode; the delta order is ours ([`delta_order`]).
    Values(usize),
    /// Booleans and type tags: 8-bit numbers, which pco refuses unless asked. Mostly-constant
    /// flags cost ~30 B per 1000 points, alternating ones ~1.2 bits per point.
    Bytes,
}

/// pco's compression level (its default is 8). Measured on 1024-point columns: smart-meter
/// columns (ts, counter, battery, flags) 153 -> 82 us per chunk, doubles (coordinates, PLC
/// readings, a noisy sine) 457 -> 125 us, with output within 0.5% either way, and the same
/// 0.538 / 0.227 / 0.184 B/point at 256 / 1024 / 4096 points in tests/compression.rs (all heads
/// sealed at the maximum). Level 2
/// loses density (0.540 / 0.230 / 0.202). Sealing runs on the processor thread, beside the
/// connections, so its cost shows in their latency.
const COMPRESSION_LEVEL: usize = 4;

fn pco_config(column: Column) -> pco::ChunkConfig {
    let config = pco::ChunkConfig::default().with_compression_level(COMPRESSION_LEVEL);
    match column {
        Column::Ts => config
            .with_mode_spec(pco::ModeSpec::Classic)
            .with_delta_spec(pco::DeltaSpec::TryConsecutive(1)),
        Column::Values(order) => config.with_delta_spec(pco::DeltaSpec::TryConsecutive(order)),
        Column::Bytes => config.with_enable_8_bit(true),
    }
}

/// A number column whose delta order we choose ourselves.
trait Spread: pco::data_types::Number {
    /// The value as an `f64`, so that differences and differences of differences cannot
    /// overflow. Integers beyond 2^53 round, which only blurs an estimate.
    fn wide(self) -> f64;
}

impl Spread for i64 {
    fn wide(self) -> f64 {
        self as f64
    }
}

impl Spread for f64 {
    fn wide(self) -> f64 {
        self
    }
}

impl Spread for u32 {
    fn wide(self) -> f64 {
        f64::from(self)
    }
}

/// The delta order (0, 1 or 2) for a value column: the one whose differences span the narrowest
/// range, an order being taken only when it at least halves the range of the one below (saves a
/// bit per value). pco's own choice (`DeltaSpec::Auto`) estimates the compressed size of a
/// sample for no delta, lookback and each order until one is worse, which was half of the
/// encode time of a column; on counters, step functions, random integers, integrated velocities,
/// a noisy sine, 0.1-step temperatures, drifting coordinates and random doubles this picks the
/// order it picked, for the same bytes in half the time (measured on 1000-point columns). What it
/// gives up is lookback, for values that repeat a pattern further back than the previous value.
/// Only the size of a chunk depends on the choice: the order is recorded in the chunk.
fn delta_order<T: Spread>(values: &[T]) -> usize {
    // The span of a column of differences. One without any (a column of one or two values) comes
    // out negative, an infinite value makes it infinite, NaN is skipped by min and max; either way
    // the column takes no delta.
    fn width(xs: impl Iterator<Item = f64>) -> f64 {
        let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
        hi - lo
    }
    let d1 = |a: T, b: T| b.wide() - a.wide();
    let widths = [
        width(values.iter().map(|v| v.wide())),
        width(values.windows(2).map(|w| d1(w[0], w[1]))),
        width(values.windows(3).map(|w| d1(w[1], w[2]) - d1(w[0], w[1]))),
    ];
    if widths.iter().any(|w| !w.is_finite() || *w < 0.0) {
        return 0;
    }
    let mut best = 0;
    for order in 1..widths.len() {
        if widths[order] < widths[best] / 2.0 {
            best = order;
        }
    }
    best
}

fn put_section(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_pco<T: pco::data_types::Number>(
    out: &mut Vec<u8>,
    column: Column,
    values: &[T],
) -> Result<(), EncodeError> {
    let bytes = pco::standalone::simple_compress(values, &pco_config(column))
        .map_err(|e| EncodeError(format!("pco compress: {e}")))?;
    put_section(out, &bytes);
    Ok(())
}

/// Encodes non-empty points into a chunk blob.
pub(crate) fn encode(points: &Points) -> Result<Vec<u8>, EncodeError> {
    let n = points.len();
    let (Some(first_ts), Some(last_ts)) = (points.first_ts(), points.last_ts()) else {
        return Err(EncodeError("cannot encode an empty chunk".into()));
    };
    let n_u32 = u32::try_from(n).map_err(|_| EncodeError(format!("{n} points in one chunk")))?;

    let mut type_mask = 0u8;
    let mut tags = Vec::with_capacity(n);
    let mut bools = Vec::new();
    let mut longs = Vec::new();
    let mut doubles = Vec::new();
    let mut texts: [(Vec<u32>, Vec<u8>); 2] = Default::default();
    for i in 0..n {
        let tag = points.tag(i);
        type_mask |= 1 << tag as u8;
        tags.push(tag as u8);
        match points.get(i) {
            ValueRef::Bool(b) => bools.push(u8::from(b)),
            ValueRef::Long(v) => longs.push(v),
            ValueRef::Double(v) => doubles.push(v),
            ValueRef::Str(s) | ValueRef::Json(s) => {
                let (lens, bytes) = &mut texts[usize::from(tag == Tag::Json)];
                let len = u32::try_from(s.len())
                    .map_err(|_| EncodeError(format!("text of {} bytes", s.len())))?;
                lens.push(len);
                bytes.extend_from_slice(s.as_bytes());
            }
        }
    }

    let mut out = Vec::with_capacity(HEADER_BYTES + n * 2 + 64);
    out.push(VERSION);
    out.push(type_mask);
    out.extend_from_slice(&n_u32.to_le_bytes());
    out.extend_from_slice(&first_ts.to_le_bytes());
    out.extend_from_slice(&last_ts.to_le_bytes());
    put_pco(&mut out, Column::Ts, points.ts())?;
    if type_mask.count_ones() > 1 {
        put_pco(&mut out, Column::Bytes, &tags)?;
    }
    if !bools.is_empty() {
        put_pco(&mut out, Column::Bytes, &bools)?;
    }
    if !longs.is_empty() {
        put_pco(&mut out, Column::Values(delta_order(&longs)), &longs)?;
    }
    if !doubles.is_empty() {
        put_pco(&mut out, Column::Values(delta_order(&doubles)), &doubles)?;
    }
    for (lens, bytes) in &texts {
        if !lens.is_empty() {
            put_pco(&mut out, Column::Values(delta_order(lens)), lens)?;
            put_section(&mut out, bytes);
        }
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Reads the fixed header only (no checksum check, no decompression): used to find which
/// stored chunks a new one overlaps.
/// Most points one chunk may hold. Chunks are written in pieces of at most the store's
/// `chunk_points_max`, which is clamped to this; the decoder refuses a header that declares more, so a
/// damaged count can never make it allocate more than this many values per column (8 MiB of i64).
pub const CHUNK_POINTS_MAX: u32 = 1 << 20;

pub(crate) fn header(blob: &[u8]) -> Result<Header, Invalid> {
    if blob.len() < HEADER_BYTES + CRC_BYTES {
        return Err(Invalid::new(format!(
            "{} bytes is shorter than a header",
            blob.len()
        )));
    }
    if blob[0] != VERSION {
        return Err(Invalid::new(format!("unknown chunk version {}", blob[0])));
    }
    let mut r = Reader {
        buf: &blob[2..HEADER_BYTES],
    };
    let point_count = u32::from_le_bytes(r.array()?);
    let first_ts = i64::from_le_bytes(r.array()?);
    let last_ts = i64::from_le_bytes(r.array()?);
    if point_count == 0 || point_count > CHUNK_POINTS_MAX || first_ts > last_ts {
        return Err(Invalid::new(format!(
            "bad header: {point_count} points from {first_ts} to {last_ts}"
        )));
    }
    Ok(Header {
        point_count,
        first_ts,
        last_ts,
    })
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Invalid> {
        if self.buf.len() < n {
            return Err(Invalid::new(format!(
                "truncated: need {n} bytes, {} left",
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Invalid> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn section(&mut self) -> Result<&'a [u8], Invalid> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        self.take(len)
    }

    /// Decodes a pco column of exactly `n` values, chunk by chunk into `n` slots: the counts a damaged
    /// column declares are checked before anything is allocated for them (pco's one-call decode
    /// preallocates what the column claims, up to 4 GiB; the fuzzer found that).
    fn pco<T: pco::data_types::Number>(&mut self, what: &str, n: usize) -> Result<Vec<T>, Invalid> {
        let bytes = self.section()?;
        let bad = |e: pco::errors::PcoError| Invalid::new(format!("{what} column: {e}"));
        let (file, mut src) = pco::standalone::FileDecompressor::new(bytes).map_err(bad)?;
        let mut values = vec![T::default(); n];
        let mut filled = 0;
        while let pco::standalone::DecompressorItem::Chunk(mut chunk) =
            file.chunk_decompressor::<T, &[u8]>(src).map_err(bad)?
        {
            let count = chunk.n();
            if count > n - filled {
                return Err(Invalid::new(format!(
                    "{what} column holds more than the {n} values expected"
                )));
            }
            let end = filled + count;
            while filled < end {
                let progress = chunk.read(&mut values[filled..end]).map_err(bad)?;
                if progress.n_processed == 0 {
                    return Err(Invalid::new(format!("{what} column: a chunk ends early")));
                }
                filled += progress.n_processed;
            }
            src = chunk.into_src();
        }
        if filled != n {
            return Err(Invalid::new(format!(
                "{what} column holds {filled} values, expected {n}"
            )));
        }
        Ok(values)
    }
}

/// Decodes and verifies a chunk blob.
pub(crate) fn decode(blob: &[u8]) -> Result<Points, Invalid> {
    let h = header(blob)?;
    let (body, crc_bytes) = blob.split_at(blob.len() - CRC_BYTES);
    let mut crc = [0u8; CRC_BYTES];
    crc.copy_from_slice(crc_bytes);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc) {
        return Err(Invalid::new("checksum mismatch"));
    }
    let type_mask = blob[1];
    if type_mask == 0 || type_mask >> Tag::COUNT != 0 {
        return Err(Invalid::new(format!("bad type mask {type_mask:#x}")));
    }
    let n = h.point_count as usize;
    let mut r = Reader {
        buf: &body[HEADER_BYTES..],
    };

    let ts: Vec<i64> = r.pco("ts", n)?;
    if ts.windows(2).any(|w| w[0] >= w[1]) || ts[0] != h.first_ts || ts[n - 1] != h.last_ts {
        return Err(Invalid::new(
            "timestamps not strictly increasing or not matching the header",
        ));
    }

    let tags: Vec<Tag> = if type_mask.count_ones() > 1 {
        let raw: Vec<u8> = r.pco("type", n)?;
        let mut tags = Vec::with_capacity(n);
        for b in raw {
            match Tag::from_u8(b) {
                Some(tag) if type_mask & (1 << b) != 0 => tags.push(tag),
                _ => return Err(Invalid::new(format!("type {b} not in mask {type_mask:#x}"))),
            }
        }
        tags
    } else {
        let only = Tag::from_u8(type_mask.trailing_zeros() as u8)
            .ok_or_else(|| Invalid::new("bad type mask"))?;
        vec![only; n]
    };

    let mut counts = [0usize; Tag::COUNT];
    for &tag in &tags {
        counts[tag as usize] += 1;
    }
    for (t, &count) in counts.iter().enumerate() {
        if (count > 0) != (type_mask & (1 << t) != 0) {
            return Err(Invalid::new(format!(
                "type {t} present in mask but has no point"
            )));
        }
    }

    let bools: Vec<u8> = take_if(&mut r, "bool", counts[Tag::Bool as usize])?;
    let longs: Vec<i64> = take_if(&mut r, "long", counts[Tag::Long as usize])?;
    let doubles: Vec<f64> = take_if(&mut r, "double", counts[Tag::Double as usize])?;
    let mut texts = Vec::with_capacity(counts[Tag::Str as usize] + counts[Tag::Json as usize]);
    // Payload index of the first string and of the first JSON text in `texts`.
    let mut text_base = [0usize; 2];
    for (k, tag) in [Tag::Str, Tag::Json].into_iter().enumerate() {
        text_base[k] = texts.len();
        let count = counts[tag as usize];
        if count == 0 {
            continue;
        }
        let lens: Vec<u32> = r.pco("text length", count)?;
        let mut bytes = r.section()?;
        for len in lens {
            let len = len as usize;
            if bytes.len() < len {
                return Err(Invalid::new("text column shorter than its lengths"));
            }
            let (s, rest) = bytes.split_at(len);
            bytes = rest;
            let s = std::str::from_utf8(s).map_err(|_| Invalid::new("text is not UTF-8"))?;
            texts.push(s.to_owned());
        }
        if !bytes.is_empty() {
            return Err(Invalid::new("text column longer than its lengths"));
        }
    }
    if !r.buf.is_empty() {
        return Err(Invalid::new(format!("{} trailing bytes", r.buf.len())));
    }

    let mut next = [0usize; Tag::COUNT];
    let mut payload = Vec::with_capacity(n);
    for &tag in &tags {
        let k = next[tag as usize];
        next[tag as usize] += 1;
        payload.push(match tag {
            Tag::Bool => u64::from(bools[k] != 0),
            Tag::Long => longs[k] as u64,
            Tag::Double => doubles[k].to_bits(),
            Tag::Str => (text_base[0] + k) as u64,
            Tag::Json => (text_base[1] + k) as u64,
        });
    }
    Ok(Points::from_columns(ts, tags, payload, texts))
}

fn take_if<T: pco::data_types::Number>(
    r: &mut Reader<'_>,
    what: &str,
    count: usize,
) -> Result<Vec<T>, Invalid> {
    if count == 0 {
        Ok(Vec::new())
    } else {
        r.pco(what, count)
    }
}

#[cfg(test)]
mod tests {
    /// Found by the `chunk_decode` fuzz target: a chunk (with a valid checksum) whose ts column declares
    /// ~2^29 values made pco preallocate 4 GiB. Its declared count is now checked against the header's
    /// point count before anything is allocated. The input is the fuzzer's: a flag byte (odd: fix the CRC
    /// up), then the blob.
    /// Also found by `chunk_decode`: a header declaring ~859M points made the decoder allocate 6.9 GB for
    /// the column it was about to fill. Headers may declare at most `CHUNK_POINTS_MAX`.
    #[test]
    fn a_header_declaring_more_points_than_a_chunk_may_hold_is_refused() {
        let input = include_bytes!("../../../fuzz/corpus/chunk_decode/regression-oom-header-count");
        let mut blob = input[1..].to_vec();
        if input[0] & 1 == 1 {
            let body = blob.len() - super::CRC_BYTES;
            let crc = crc32c::crc32c(&blob[..body]);
            blob[body..].copy_from_slice(&crc.to_le_bytes());
        }
        assert!(super::decode(&blob).is_err());
        let mut huge = blob.clone();
        huge[2..6].copy_from_slice(&(super::CHUNK_POINTS_MAX + 1).to_le_bytes());
        let err = super::header(&huge).unwrap_err();
        assert!(err.0.contains("bad header"), "{}", err.0);
    }

    #[test]
    fn a_column_declaring_more_values_than_the_header_is_refused_before_allocating() {
        let input = include_bytes!("../../../fuzz/corpus/chunk_decode/regression-oom-pco-count");
        let mut blob = input[1..].to_vec();
        let body = blob.len() - super::CRC_BYTES;
        let crc = crc32c::crc32c(&blob[..body]);
        blob[body..].copy_from_slice(&crc.to_le_bytes());
        let err = super::decode(&blob).unwrap_err();
        assert!(err.0.contains("ts column"), "{}", err.0);
    }

    use super::*;
    use fleetwire_model::Value;

    fn sample() -> Points {
        let mut p = Points::new();
        let values = [
            Value::Long(42),
            Value::Double(-1.5),
            Value::Bool(true),
            Value::Str("héllo".into()),
            Value::Json("{\"a\":1}".into()),
            Value::Str(String::new()),
            Value::Long(i64::MIN),
            Value::Double(f64::MAX),
            Value::Bool(false),
        ];
        for (i, v) in values.iter().enumerate() {
            p.upsert(i64::MIN + 10 * i as i64, v);
        }
        p.upsert(i64::MAX, &Value::Long(7));
        p
    }

    #[test]
    fn round_trips_every_type() {
        let p = sample();
        let blob = encode(&p).unwrap();
        assert_eq!(
            header(&blob).unwrap(),
            Header {
                point_count: 10,
                first_ts: i64::MIN,
                last_ts: i64::MAX
            }
        );
        assert_eq!(decode(&blob).unwrap(), p);
    }

    #[test]
    fn round_trips_single_type_without_type_column() {
        let mut p = Points::new();
        for ts in 0..1000 {
            p.upsert(ts * 1000, &Value::Long(ts / 7));
        }
        let blob = encode(&p).unwrap();
        assert_eq!(decode(&blob).unwrap(), p);
        // 1000 regular ts + a step function: ~1 bit per point plus pco's headers.
        assert!(
            blob.len() < 250,
            "regular longs should compress well, got {}",
            blob.len()
        );
    }

    #[test]
    fn rejects_every_single_byte_corruption() {
        let blob = encode(&sample()).unwrap();
        for i in 0..blob.len() {
            let mut bad = blob.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "flipping byte {i} went unnoticed");
        }
    }

    #[test]
    fn rejects_truncation() {
        let blob = encode(&sample()).unwrap();
        for len in 0..blob.len() {
            assert!(
                decode(&blob[..len]).is_err(),
                "truncation to {len} went unnoticed"
            );
        }
    }

    #[test]
    fn refuses_to_encode_nothing() {
        assert!(encode(&Points::new()).is_err());
    }

    /// Named value columns.
    type Columns<T> = Vec<(&'static str, Vec<T>)>;

    /// Columns of the kinds telemetry sends.
    fn value_columns() -> (Columns<i64>, Columns<f64>) {
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let n = 1000;
        let (mut pulses, mut pos, mut velocity) = (144_120i64, 52_100_000i64, 30i64);
        let mut longs = vec![
            ("counter", Vec::new()),
            ("battery", Vec::new()),
            ("random", Vec::new()),
            ("position", Vec::new()),
        ];
        let (mut temp, mut lat, mut drift) = (21.5f64, 52.1f64, 0.0001f64);
        let mut doubles = vec![
            ("sine", Vec::new()),
            ("temperature", Vec::new()),
            ("coordinate", Vec::new()),
            ("random", Vec::new()),
        ];
        for i in 0..n {
            pulses += (next() % 4) as i64;
            velocity += (next() % 3) as i64 - 1;
            pos += velocity;
            temp += ((next() % 3) as f64 - 1.0) * 0.1;
            drift += ((next() % 3) as f64 - 1.0) * 0.000_001;
            lat += drift;
            longs[0].1.push(pulses);
            longs[1].1.push(100 - i / 900);
            longs[2].1.push((next() % 100) as i64);
            longs[3].1.push(pos);
            doubles[0]
                .1
                .push((i as f64 / 50.0).sin() * 20.0 + (next() % 1000) as f64 / 1000.0);
            doubles[1].1.push((temp * 10.0).round() / 10.0);
            doubles[2].1.push(lat);
            doubles[3].1.push((next() % 100_000) as f64 / 7.0);
        }
        (longs, doubles)
    }

    fn size_with<T: super::Spread>(values: &[T], spec: pco::DeltaSpec) -> usize {
        let config = super::pco_config(super::Column::Values(0)).with_delta_spec(spec);
        pco::standalone::simple_compress(values, &config)
            .unwrap()
            .len()
    }

    #[test]
    fn our_delta_order_packs_value_columns_as_tightly_as_pcos_own_choice() {
        let (longs, doubles) = value_columns();
        let mut orders = Vec::new();
        let mut check = |name: &str, ours: usize, auto: usize, order: usize| {
            orders.push(order);
            assert!(
                ours as f64 <= auto as f64 * 1.02,
                "{name}: {ours} B with order {order}, pco's own choice {auto} B"
            );
        };
        for (name, values) in &longs {
            let order = super::delta_order(values);
            let ours = size_with(values, pco::DeltaSpec::TryConsecutive(order));
            check(name, ours, size_with(values, pco::DeltaSpec::Auto), order);
        }
        for (name, values) in &doubles {
            let order = super::delta_order(values);
            let ours = size_with(values, pco::DeltaSpec::TryConsecutive(order));
            check(name, ours, size_with(values, pco::DeltaSpec::Auto), order);
        }
        // Counter, step, random, integrated velocity; sine, temperature, drifting coordinate,
        // random doubles.
        assert_eq!(orders, [1, 0, 0, 2, 1, 1, 2, 0]);
    }

    #[test]
    fn short_and_non_finite_columns_take_no_delta() {
        assert_eq!(super::delta_order::<i64>(&[]), 0);
        assert_eq!(super::delta_order(&[5i64]), 0);
        assert_eq!(super::delta_order(&[5i64, 7]), 0);
        assert_eq!(super::delta_order(&[1.0, 2.0, f64::INFINITY, 4.0]), 0);
        assert_eq!(super::delta_order(&[i64::MIN, i64::MAX, i64::MIN, 0]), 0);
        assert_eq!(super::delta_order(&[10i64, 20, 30, 40, 50]), 1);
        let doubles = [f64::NAN, 1.0, f64::INFINITY, -0.0];
        let mut points = Points::new();
        for (i, &v) in doubles.iter().enumerate() {
            points.upsert(i as i64, &Value::Double(v));
        }
        let back = decode(&encode(&points).unwrap()).unwrap();
        for (i, &v) in doubles.iter().enumerate() {
            let ValueRef::Double(got) = back.get(i) else {
                panic!("point {i} is not a double");
            };
            assert_eq!(got.to_bits(), v.to_bits(), "point {i}");
        }
    }
}
