//! Recovery of the ingest log (`fleetwire_log`, `recovery.rs`) from a damaged last segment.
//!
//! The input lays out partition 0 of a log directory, as a crash or bad disk could leave it:
//! - byte 0 picks the layout: the rest of the input as the whole segment file; or a header,
//!   valid frames, then a garbage tail; or the same with the last frame damaged by the tail
//!   (XOR); or a sealed segment of valid frames followed by an active segment made of the tail;
//! - byte 1 and then one length byte per record give up to 7 valid records;
//! - the rest is the tail.
//!
//! Opening the log must not panic. A segment whose 8-byte header is torn is re-created; a
//! complete but foreign header is `Corrupt`. Otherwise the log must hold exactly the longest
//! valid prefix of frames (computed here independently of the log's frame code), the file must be
//! cut back to it unless only zeros follow (a preallocated tail, which stays), and an append after
//! recovery must read back after a reopen.

#![no_main]

use std::path::Path;
use std::time::Duration;

use fleetwire_log::segment::{header_bytes, segment_path, SEGMENT_HEADER_BYTES};
use fleetwire_log::{Durability, Log, LogConfig, LogError};
use libfuzzer_sys::fuzz_target;

const HEADER: usize = SEGMENT_HEADER_BYTES as usize;

fn config(dir: &Path) -> LogConfig {
    let mut config = LogConfig::new(dir);
    config.partition_count = 1;
    // Recovery syncs whatever the durability; Os keeps the appends cheap.
    config.durability = Durability::Os;
    config
}

fn frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    fleetwire_log::frame::encode_into(&mut out, payload, fleetwire_log::frame::checksum(payload));
    out
}

/// The payloads of the valid frames at the start of `body` (a segment after its header), and the
/// bytes they take.
fn valid_prefix(body: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut records = Vec::new();
    let mut pos = 0;
    while body.len() - pos >= 8 {
        let len = u32::from_le_bytes(body[pos..pos + 4].try_into().unwrap()) as usize;
        let crc = u32::from_le_bytes(body[pos + 4..pos + 8].try_into().unwrap());
        let Some(payload) = body.get(pos + 8..).and_then(|rest| rest.get(..len)) else {
            break;
        };
        if crc32c::crc32c_append(crc32c::crc32c(&body[pos..pos + 4]), payload) != crc {
            break;
        }
        records.push(payload.to_vec());
        pos += 8 + len;
    }
    (records, pos)
}

fn read_all(log: &Log) -> Vec<Vec<u8>> {
    let mut reader = log.reader(0, 0).unwrap();
    let mut records = Vec::new();
    while let Some(record) = reader.next_record().unwrap() {
        records.push(record.payload.to_vec());
    }
    records
}

fn temp_dir() -> tempfile::TempDir {
    // tmpfs when there is one: recovery fsyncs, and the disk is shared.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

fuzz_target!(|data: &[u8]| {
    let [layout, count, rest @ ..] = data else {
        return;
    };
    let mut rest = rest;
    let mut records = Vec::new();
    for _ in 0..count % 8 {
        let Some((&len, after)) = rest.split_first() else {
            break;
        };
        let len = usize::from(len % 64).min(after.len());
        records.push(after[..len].to_vec());
        rest = &after[len..];
    }
    let tail = rest;
    let frames: Vec<u8> = records.iter().flat_map(|p| frame(p)).collect();

    // Segment files of partition 0: (base, bytes).
    let mut segments: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut active = header_bytes().to_vec();
    match layout % 4 {
        0 => active = tail.to_vec(),
        1 => {
            active.extend_from_slice(&frames);
            active.extend_from_slice(tail);
        }
        2 => {
            active.extend_from_slice(&frames);
            let last_frame = active.len() - records.last().map_or(0, |p| 8 + p.len());
            for (i, &b) in tail.iter().enumerate() {
                match active.get_mut(last_frame + i) {
                    Some(byte) => *byte ^= b,
                    None => active.push(b),
                }
            }
        }
        // A sealed segment needs at least one record: its end is the next segment's name.
        _ if records.is_empty() => active = tail.to_vec(),
        _ => {
            let mut sealed = header_bytes().to_vec();
            sealed.extend_from_slice(&frames);
            segments.push((0, sealed));
            active = tail.to_vec();
        }
    }
    let active_base = match segments.last() {
        Some((base, bytes)) => base + (bytes.len() - HEADER) as u64,
        None => 0,
    };
    segments.push((active_base, active.clone()));

    let dir = temp_dir();
    let partition_dir = dir.path().join("p0");
    std::fs::create_dir(&partition_dir).unwrap();
    for (base, bytes) in &segments {
        std::fs::write(segment_path(&partition_dir, *base), bytes).unwrap();
    }
    let mut expected: Vec<Vec<u8>> = segments[..segments.len() - 1]
        .iter()
        .flat_map(|(_, bytes)| valid_prefix(&bytes[HEADER..]).0)
        .collect();
    let active_path = segment_path(&partition_dir, active_base);

    let opened = Log::open(config(dir.path()));
    // Zeros after the valid frames (preallocated, or left by a crash) stay in the file; anything
    // else after them is cut off.
    let mut file_bytes = None;
    let kept_bytes = if active.len() < HEADER {
        // A torn header: the segment is started again, empty.
        0
    } else if active[..HEADER] != header_bytes() {
        match opened {
            Err(LogError::Corrupt { segment, .. }) => assert_eq!(segment, active_path),
            other => panic!(
                "foreign header {:02x?} opened as {other:?}",
                &active[..HEADER]
            ),
        }
        assert_eq!(
            std::fs::read(&active_path).unwrap(),
            active,
            "foreign file changed"
        );
        return;
    } else {
        let (records, bytes) = valid_prefix(&active[HEADER..]);
        expected.extend(records);
        if active[HEADER + bytes..].iter().all(|&b| b == 0) {
            file_bytes = Some(active.len());
        }
        bytes
    };
    let log = match opened {
        Ok(log) => log,
        Err(error) => panic!("recoverable log refused: {error}"),
    };
    assert_eq!(read_all(&log), expected);
    assert_eq!(log.end_offset(0).unwrap(), active_base + kept_bytes as u64);
    assert_eq!(
        std::fs::metadata(&active_path).unwrap().len(),
        file_bytes.unwrap_or(HEADER + kept_bytes) as u64,
        "the active segment is not cut back to its valid frames (and zeros)"
    );

    let seq = log.append(0, b"after recovery").unwrap();
    log.wait_durable(seq, Duration::from_secs(10)).unwrap();
    log.close().unwrap();
    let log = Log::open(config(dir.path())).unwrap();
    expected.push(b"after recovery".to_vec());
    assert_eq!(read_all(&log), expected, "after an append and a reopen");
    log.close().unwrap();
});
