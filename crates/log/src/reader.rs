//! Consumers' sequential view of one partition.
//!
//! A reader sees only durable records, so a processor never applies a record that a crash could
//! take back. At the durable end `next_record` returns `Ok(None)`; call it again after
//! `Log::wait_for_data` says there is more. Readers own their file handles and buffer, so each
//! processor thread can hold one without locking against the writer.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{LogError, Result};
use crate::frame::{self, Decoded};
use crate::segment::{segment_path, SEGMENT_HEADER_BYTES};
use crate::writer::Shared;

/// Bytes read from a segment file at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// One record as seen by a reader. The payload borrows the reader's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset of this record: what to pass to `Log::reader` to read it again.
    pub offset: u64,
    /// Offset of the record after it: what to checkpoint once this one is persisted downstream.
    pub next_offset: u64,
    pub payload: &'a [u8],
}

/// The segment the reader is in.
struct OpenSegment {
    base: u64,
    path: PathBuf,
    file: File,
    /// Base of the next segment once it exists: the end of this one.
    next_base: Option<u64>,
}

/// Reads one partition's durable records in order from a starting offset.
pub struct Reader {
    shared: Arc<Shared>,
    partition: u32,
    /// Offset of the next record to return.
    offset: u64,
    segment: Option<OpenSegment>,
    /// Bytes of the current segment starting at offset `buf_offset`.
    buf: Vec<u8>,
    buf_offset: u64,
}

impl Reader {
    pub(crate) fn new(shared: Arc<Shared>, partition: u32, offset: u64) -> Self {
        Self {
            shared,
            partition,
            offset,
            segment: None,
            buf: Vec::new(),
            buf_offset: offset,
        }
    }

    /// The partition this reader reads.
    pub fn partition(&self) -> u32 {
        self.partition
    }

    /// Offset of the next record `next_record` will return.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next durable record, or None at the durable end.
    pub fn next_record(&mut self) -> Result<Option<Record<'_>>> {
        let state = &self.shared.partitions[self.partition as usize];
        let durable_end = state.durable_end();
        if self.offset >= durable_end {
            return Ok(None);
        }
        self.enter_segment()?;
        let Some(segment) = &self.segment else {
            unreachable!("enter_segment always opens a segment");
        };
        // Readable bytes in this segment end at the durable end or the segment's end.
        let limit = segment
            .next_base
            .map_or(durable_end, |next| next.min(durable_end));
        loop {
            let cursor = (self.offset - self.buf_offset) as usize;
            let wanted = match frame::decode(&self.buf[cursor..]) {
                Ok(Decoded::Record {
                    payload,
                    frame_bytes,
                }) => {
                    let start = cursor + frame::FRAME_HEADER_BYTES;
                    let end = start + payload.len();
                    let offset = self.offset;
                    self.offset += frame_bytes as u64;
                    return Ok(Some(Record {
                        offset,
                        next_offset: self.offset,
                        payload: &self.buf[start..end],
                    }));
                }
                Ok(Decoded::Incomplete { frame_bytes }) => frame_bytes,
                Err(mismatch) => return Err(self.corrupt(mismatch.to_string())),
            };
            if self.offset + wanted as u64 > limit {
                return Err(self.corrupt(format!(
                    "frame of {wanted} bytes extends past the durable end {limit} \
                     (is {} a record boundary?)",
                    self.offset
                )));
            }
            self.refill(wanted, limit)?;
        }
    }

    /// Makes sure the open segment is the one holding `self.offset`.
    fn enter_segment(&mut self) -> Result<()> {
        if let Some(segment) = &mut self.segment {
            if segment.next_base.is_none() {
                segment.next_base = self.shared.partitions[self.partition as usize]
                    .segments
                    .read()
                    .iter()
                    .copied()
                    .find(|&base| base > segment.base);
            }
            if segment.next_base.is_none_or(|next| self.offset < next) {
                return Ok(());
            }
        }
        let state = &self.shared.partitions[self.partition as usize];
        let (base, next_base) = {
            let segments = state.segments.read();
            let index = segments.partition_point(|&base| base <= self.offset);
            if index == 0 {
                return Err(self.out_of_range(segments[0]));
            }
            (segments[index - 1], segments.get(index).copied())
        };
        let path = segment_path(&state.dir, base);
        let file = match File::open(&path) {
            Ok(file) => file,
            // Reclaimed between the lookup and the open: the reader fell below the checkpoint.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(self.out_of_range(state.first_offset()))
            }
            Err(e) => return Err(LogError::io(path, e)),
        };
        self.segment = Some(OpenSegment {
            base,
            path,
            file,
            next_base,
        });
        self.buf.clear();
        self.buf_offset = self.offset;
        Ok(())
    }

    /// Reads so that the buffer holds at least `wanted` bytes from `self.offset`, and up to a chunk
    /// more, never past `limit`.
    fn refill(&mut self, wanted: usize, limit: u64) -> Result<()> {
        let Some(segment) = &self.segment else {
            unreachable!("refill only runs with a segment open");
        };
        let consumed = (self.offset - self.buf_offset) as usize;
        self.buf.drain(..consumed);
        self.buf_offset = self.offset;
        let target = wanted
            .max(READ_CHUNK_BYTES)
            .min((limit - self.offset) as usize);
        let have = self.buf.len();
        self.buf.resize(target, 0);
        let position = self.offset - segment.base + SEGMENT_HEADER_BYTES + have as u64;
        let mut filled = have;
        while filled < target {
            match segment
                .file
                .read_at(&mut self.buf[filled..], position + (filled - have) as u64)
            {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(LogError::io(segment.path.clone(), e)),
            }
        }
        self.buf.truncate(filled);
        if filled < wanted {
            return Err(self.corrupt(format!(
                "segment ends before the durable end {limit}: {filled} of {wanted} bytes readable"
            )));
        }
        Ok(())
    }

    fn corrupt(&self, reason: String) -> LogError {
        let segment = self
            .segment
            .as_ref()
            .map(|s| s.path.clone())
            .unwrap_or_default();
        LogError::Corrupt {
            partition: self.partition,
            segment,
            offset: self.offset,
            reason,
        }
    }

    fn out_of_range(&self, first: u64) -> LogError {
        LogError::OffsetOutOfRange {
            partition: self.partition,
            offset: self.offset,
            first,
            end: self.shared.partitions[self.partition as usize].durable_end(),
        }
    }
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .finish_non_exhaustive()
    }
}
