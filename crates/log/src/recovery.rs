//! Recovery on open: bring one partition directory back to "every byte in it is a valid, synced
//! record" before the writer starts.
//!
//! Policy, and why:
//! - The **last segment** is scanned frame by frame. The first frame that is incomplete (torn
//!   write), claims more bytes than the file holds (impossible length) or fails its checksum
//!   (garbage, e.g. zeros the filesystem left after a crash) ends the log: the file is truncated
//!   there with a `warn!`. Only the tail after the last fsync can be damaged by a crash, and a
//!   frame cannot be told apart from garbage without its checksum, so truncating at the first bad
//!   frame is both sufficient and the only safe cut.
//! - **Older segments** were fully synced before the roll that closed them, so a crash cannot
//!   damage them. They are checked cheaply (header, and length matching the next segment's base);
//!   any mismatch is `LogError::Corrupt` and the log refuses to open instead of dropping the
//!   segments after it: that would silently lose acknowledged records, and an operator should
//!   decide. Their frames are CRC-checked when a reader reaches them (also `Corrupt`), which avoids
//!   reading gigabytes of backlog at every start.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::checkpoint::{read_checkpoint, reclaim_segments, write_checkpoint};
use crate::error::{LogError, Result};
use crate::frame::{self, Decoded};
use crate::segment::{
    check_header, list_segments, segment_path, sync_dir, ActiveSegment, SEGMENT_HEADER_BYTES,
};

/// A partition after recovery.
#[derive(Debug)]
pub(crate) struct RecoveredPartition {
    /// Base offsets of the retained segments, ascending; the last one is `active`.
    pub segments: Vec<u64>,
    pub active: ActiveSegment,
    pub checkpoint: u64,
}

/// Scan buffer for the last segment; grows only for records larger than this.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// Recovers the partition in `dir` (which must exist).
pub(crate) fn recover_partition(partition: u32, dir: &Path) -> Result<RecoveredPartition> {
    // A checkpoint.tmp is a checkpoint write that never got renamed: the old checkpoint stands.
    match std::fs::remove_file(dir.join("checkpoint.tmp")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(LogError::io(dir, e)),
        _ => {}
    }
    let mut checkpoint = read_checkpoint(partition, dir)?.unwrap_or(0);
    let mut segments = list_segments(dir)?;

    let Some(&last_base) = segments.last() else {
        // Fresh partition (or one whose files were removed by hand): start at the checkpoint so
        // offsets never go below what downstream has already consumed.
        let active = ActiveSegment::create(dir, checkpoint).map_err(|e| LogError::io(dir, e))?;
        return Ok(RecoveredPartition {
            segments: vec![checkpoint],
            active,
            checkpoint,
        });
    };

    // Reclaim first, by name only: a crash between two deletions may have left a gap below the
    // checkpoint, which must not fail the chain check.
    reclaim_segments(dir, &mut segments, checkpoint)?;
    for pair in segments.windows(2) {
        check_sealed_segment(partition, dir, pair[0], pair[1])?;
    }
    let active = recover_last_segment(partition, dir, last_base)?;

    let end = active.end_offset();
    let first = segments[0];
    if checkpoint > end {
        // Only possible if synced data vanished (durability = "os" and a power loss, or a
        // disk-level problem). Clamping keeps new records at offsets the consumer will read.
        tracing::warn!(
            partition,
            checkpoint,
            end,
            "checkpoint beyond log end; moving it back"
        );
        checkpoint = end;
        write_checkpoint(dir, checkpoint)?;
    } else if checkpoint < first {
        tracing::warn!(
            partition,
            checkpoint,
            first,
            "segments below the checkpoint are missing; moving checkpoint to the first segment"
        );
        checkpoint = first;
        write_checkpoint(dir, checkpoint)?;
    }
    Ok(RecoveredPartition {
        segments,
        active,
        checkpoint,
    })
}

/// Checks a sealed segment's header and that its length ends exactly where `next_base` begins.
fn check_sealed_segment(partition: u32, dir: &Path, base: u64, next_base: u64) -> Result<()> {
    let path = segment_path(dir, base);
    let corrupt = |offset: u64, reason: String| LogError::Corrupt {
        partition,
        segment: path.clone(),
        offset,
        reason,
    };
    let file = File::open(&path).map_err(|e| LogError::io(&path, e))?;
    let len_bytes = file.metadata().map_err(|e| LogError::io(&path, e))?.len();
    let mut header = [0u8; SEGMENT_HEADER_BYTES as usize];
    let header_len = read_up_to(&file, &mut header, 0).map_err(|e| LogError::io(&path, e))?;
    check_header(&header[..header_len]).map_err(|reason| corrupt(base, reason))?;
    let expected_bytes = next_base - base + SEGMENT_HEADER_BYTES;
    if len_bytes != expected_bytes {
        return Err(corrupt(
            base + len_bytes.min(expected_bytes) - SEGMENT_HEADER_BYTES,
            format!(
                "sealed segment is {len_bytes} bytes but the next segment starts at offset \
                 {next_base}, which needs {expected_bytes} bytes"
            ),
        ));
    }
    Ok(())
}

/// Scans the last segment, truncates anything after the last valid frame, syncs it, and returns
/// it ready for appending.
fn recover_last_segment(partition: u32, dir: &Path, base: u64) -> Result<ActiveSegment> {
    let path = segment_path(dir, base);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| LogError::io(&path, e))?;
    let file_bytes = file.metadata().map_err(|e| LogError::io(&path, e))?.len();

    if file_bytes < SEGMENT_HEADER_BYTES {
        // Crash while the segment was being created: its header never reached the disk, so no
        // record in it was ever published. Start it again.
        tracing::warn!(partition, segment = %path.display(), file_bytes, "re-creating segment with a torn header");
        drop(file);
        std::fs::remove_file(&path).map_err(|e| LogError::io(&path, e))?;
        return ActiveSegment::create(dir, base).map_err(|e| LogError::io(&path, e));
    }

    let mut header = [0u8; SEGMENT_HEADER_BYTES as usize];
    file.read_exact_at(&mut header, 0)
        .map_err(|e| LogError::io(&path, e))?;
    check_header(&header).map_err(|reason| LogError::Corrupt {
        partition,
        segment: path.clone(),
        offset: base,
        reason,
    })?;

    let (valid_bytes, tail_reason) =
        scan_frames(&file, file_bytes).map_err(|e| LogError::io(&path, e))?;
    let mut kept_bytes = valid_bytes;
    if let Some(reason) = tail_reason {
        let offset = base + valid_bytes - SEGMENT_HEADER_BYTES;
        let dropped_bytes = file_bytes - valid_bytes;
        if is_all_zeros(&file, valid_bytes, file_bytes).map_err(|e| LogError::io(&path, e))? {
            // Preallocated (or left zeroed by a crash): zeros read as the end of the log wherever
            // they are, so they stay, and appends overwrite them.
            tracing::debug!(partition, segment = %path.display(), offset, zero_bytes = dropped_bytes, "log ends at zeros");
            kept_bytes = file_bytes;
        } else {
            tracing::warn!(
                partition,
                segment = %path.display(),
                offset,
                dropped_bytes,
                reason = %reason,
                "truncating ingest log tail"
            );
            file.set_len(valid_bytes)
                .map_err(|e| LogError::io(&path, e))?;
        }
    }
    // Records written by the previous process may still sit only in the page cache; sync them
    // now so that everything a reader sees after open is durable, as it is during normal running.
    file.sync_data().map_err(|e| LogError::io(&path, e))?;
    sync_dir(dir).map_err(|e| LogError::io(dir, e))?;
    drop(file);
    ActiveSegment::open_validated(path.clone(), base, valid_bytes, kept_bytes)
        .map_err(|e| LogError::io(&path, e))
}

/// Whether the file holds only zero bytes from `from` to `to`.
fn is_all_zeros(file: &File, from: u64, to: u64) -> std::io::Result<bool> {
    let mut buf = vec![0u8; SCAN_CHUNK_BYTES];
    let mut position = from;
    while position < to {
        let want = (to - position).min(SCAN_CHUNK_BYTES as u64) as usize;
        let read = read_up_to(file, &mut buf[..want], position)?;
        if read == 0 {
            return Ok(true);
        }
        if buf[..read].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        position += read as u64;
    }
    Ok(true)
}

/// Walks the frames after the header. Returns the file length up to the last valid frame and,
/// when the file continues past it, why the rest is invalid.
fn scan_frames(file: &File, file_bytes: u64) -> std::io::Result<(u64, Option<String>)> {
    let mut buf: Vec<u8> = Vec::with_capacity(SCAN_CHUNK_BYTES);
    let mut buf_start = SEGMENT_HEADER_BYTES; // file position of buf[0]
    let mut cursor = 0usize; // frame start within buf
    loop {
        let position = buf_start + cursor as u64;
        if position == file_bytes {
            return Ok((position, None));
        }
        match frame::decode(&buf[cursor..]) {
            Ok(Decoded::Record { frame_bytes, .. }) => cursor += frame_bytes,
            Err(mismatch) => return Ok((position, Some(mismatch.to_string()))),
            Ok(Decoded::Incomplete { frame_bytes }) => {
                let remaining = file_bytes - position;
                if frame_bytes as u64 > remaining {
                    let reason = format!(
                        "frame needs {frame_bytes} bytes but only {remaining} remain (torn write or garbage length)"
                    );
                    return Ok((position, Some(reason)));
                }
                // Refill: keep the partial frame, read at least the rest of it.
                buf.drain(..cursor);
                buf_start = position;
                cursor = 0;
                let want = frame_bytes.max(SCAN_CHUNK_BYTES).min(remaining as usize);
                let have = buf.len();
                buf.resize(want, 0);
                let read = read_up_to(file, &mut buf[have..], position + have as u64)?;
                buf.truncate(have + read);
                if read == 0 {
                    // The file shrank under us; treat what we have as the end.
                    return Ok((position, Some("unexpected end of file".to_string())));
                }
            }
        }
    }
}

/// Reads into `buf` at `position` until it is full or the file ends; returns bytes read.
fn read_up_to(file: &File, buf: &mut [u8], position: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], position + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}
