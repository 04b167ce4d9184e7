//! Consumers' sequential view of one partition.
//!
//! A reader sees only durable records, so a processor never applies a record that a crash could
//! take back. At the durable end `next_record` returns `Ok(None)`; call it again after
//! `Log::wait_for_data` says there is more. Readers own their file handles and buffer, so each
//! processor thread can hold one without locking against the writer.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{LogError, Result};
use crate::frame::{self, Decoded};
use crate::segment::{segment_path, SEGMENT_HEADER_BYTES};
use crate::writer::Shared;

/// Bytes read from a segment file at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Read bytes of a segment are dropped from the page cache in steps of this many (whole pages).
/// Once a record is read it is needed again only by a replay after a crash, which reads the file
/// from disk anyway; without this the log's cached pages grow to the whole unreclaimed log, and
/// every page the writer writes is a fresh page instead of one just given back.
const DROP_STEP_BYTES: u64 = 1 << 20;
const PAGE_BYTES: u64 = 4096;

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
    /// File position below which the reader has dropped the cached pages.
    dropped_to: u64,
}

impl OpenSegment {
    /// Drops the cached pages of the file below `position` (rounded down to a page) if that frees at
    /// least `min_bytes` more, or to the end of the file when `position` is None. Advice only: a
    /// failure changes nothing the reader relies on. The reader only reads durable (fsync'd, so
    /// clean) bytes, which the kernel can drop at once.
    fn drop_cached(&mut self, position: Option<u64>, min_bytes: u64) {
        // `None` as the length means "to the end of the file" to fadvise: only when asked for.
        let (len, dropped_to) = match position {
            Some(position) => {
                let to = position / PAGE_BYTES * PAGE_BYTES;
                if to < self.dropped_to.saturating_add(min_bytes) {
                    return;
                }
                let Some(len) = std::num::NonZeroU64::new(to - self.dropped_to) else {
                    return;
                };
                (Some(len), to)
            }
            None => (None, self.dropped_to),
        };
        if let Err(e) = rustix::fs::fadvise(
            &self.file,
            self.dropped_to,
            len,
            rustix::fs::Advice::DontNeed,
        ) {
            tracing::debug!(path = %self.path.display(), error = %e, "cannot drop read log pages from the cache");
        }
        self.dropped_to = dropped_to;
    }
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
    /// Offset of the next record `peek_next` looks at (below `offset`: from `offset`).
    peeked_to: u64,
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
            peeked_to: offset,
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

    /// The payload of the next record after those already peeked (from the next record `next_record`
    /// returns), and its offset, if it is already in the reader's buffer; `None` otherwise, without reading.
    ///
    /// For looking ahead (to start loading what a record will touch before it is applied), not for
    /// applying: the payload's checksum is not verified, and a record not yet buffered is not read.
    pub fn peek_next(&mut self) -> Option<(u64, &[u8])> {
        let offset = self.peeked_to.max(self.offset);
        let cursor = usize::try_from(offset - self.buf_offset).ok()?;
        let payload = frame::payload_unchecked(self.buf.get(cursor..)?)?;
        self.peeked_to = offset + frame::frame_bytes(payload.len()) as u64;
        Some((offset, payload))
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
            // Leaving a segment read to its end.
            segment.drop_cached(None, 0);
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
        let file = match open_for_reading(&path) {
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
            dropped_to: 0,
        });
        self.buf.clear();
        self.buf_offset = self.offset;
        Ok(())
    }

    /// Reads so that the buffer holds at least `wanted` bytes from `self.offset`, and up to a chunk
    /// more, never past `limit`.
    fn refill(&mut self, wanted: usize, limit: u64) -> Result<()> {
        let Some(segment) = &mut self.segment else {
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
        // File position of `self.offset`: everything before it has been returned.
        let returned_to = self.offset - segment.base + SEGMENT_HEADER_BYTES;
        let position = returned_to + have as u64;
        segment.drop_cached(Some(returned_to), DROP_STEP_BYTES);
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

/// Opens a segment to read without updating its access time (`O_NOATIME`), falling back to a plain open
/// where the flag is not allowed (a file the process does not own).
///
/// The active segment is read right behind the writer, so with `relatime` nearly every read after a write
/// would update the access time. On ext4 without a journal an inode change is written by the next
/// `fdatasync` of that file, so those reads cost the commits that followed them an extra write request
/// each (measured on this project's VM: a third of the commits at 50,000 msg/s).
fn open_for_reading(path: &Path) -> std::io::Result<File> {
    let noatime = rustix::fs::OFlags::NOATIME.bits() as i32;
    match OpenOptions::new()
        .read(true)
        .custom_flags(noatime)
        .open(path)
    {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => {
            File::open(path)
        }
        opened => opened,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Log, LogConfig};

    fn one_partition_log(dir: &Path) -> Log {
        let mut config = LogConfig::new(dir);
        config.partition_count = 1;
        Log::open(config).unwrap()
    }

    #[test]
    fn read_pages_are_dropped_from_the_cache_in_whole_steps_and_stay_readable_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let log = one_partition_log(dir.path());
        let record = [5u8; 1000];
        let mut last = 0;
        for _ in 0..3000 {
            last = log.append(0, &record).unwrap();
        }
        log.wait_durable(last, Duration::from_secs(10)).unwrap();

        // Reads every record, checking each is `record`; returns how many there were.
        let read_all = |reader: &mut Reader| {
            let mut read = 0;
            while let Some(r) = reader.next_record().unwrap() {
                assert_eq!(r.payload, record);
                read += 1;
            }
            read
        };

        let mut reader = log.reader(0, 0).unwrap();
        assert_eq!(read_all(&mut reader), 3000);
        let segment = reader.segment.as_ref().unwrap();
        let read_to = reader.offset - segment.base + SEGMENT_HEADER_BYTES;
        // ~3 MB read from one segment: the pages below the last refill went in 1 MiB steps.
        assert!(
            segment.dropped_to >= 2 * DROP_STEP_BYTES,
            "{}",
            segment.dropped_to
        );
        assert_eq!(segment.dropped_to % PAGE_BYTES, 0);
        assert!(segment.dropped_to <= read_to);

        // Dropping is only about the cache: the records are read again, from disk.
        let mut again = log.reader(0, 0).unwrap();
        assert_eq!(read_all(&mut again), 3000);
    }

    #[test]
    fn peeking_runs_ahead_of_reading_over_what_is_buffered_only() {
        let dir = tempfile::tempdir().unwrap();
        let log = one_partition_log(dir.path());
        let payloads: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let mut last = 0;
        for payload in &payloads {
            last = log.append(0, payload).unwrap();
        }
        log.wait_durable(last, Duration::from_secs(10)).unwrap();

        let mut reader = log.reader(0, 0).unwrap();
        // Nothing is buffered before the first read: a peek does not read.
        assert_eq!(reader.peek_next(), None);
        let first = reader.next_record().unwrap().unwrap();
        assert_eq!(first.payload, payloads[0]);
        let second_offset = first.next_offset;
        // The rest came in with the first read; peeks walk it in order without moving the reader.
        let (at, payload) = reader.peek_next().unwrap();
        assert_eq!((at, payload), (second_offset, &payloads[1][..]));
        let (third_offset, payload) = reader.peek_next().unwrap();
        assert_eq!(payload, payloads[2]);
        assert_eq!(reader.offset(), second_offset);
        // Reading catches up with the peeks, and peeking goes on after them.
        let second = reader.next_record().unwrap().unwrap();
        assert_eq!(
            (second.offset, second.payload),
            (second_offset, &payloads[1][..])
        );
        let third = reader.next_record().unwrap().unwrap();
        assert_eq!(third.offset, third_offset);
        let fourth = reader.next_record().unwrap().unwrap();
        assert_eq!(fourth.payload, payloads[3]);
        // Reading past the peeks: peeking starts again from the next record to read.
        assert_eq!(reader.peek_next().unwrap().1, payloads[4]);
        assert_eq!(reader.peek_next(), None);
        assert_eq!(reader.next_record().unwrap().unwrap().payload, payloads[4]);
        assert!(reader.next_record().unwrap().is_none());
        assert_eq!(reader.peek_next(), None);
    }

    #[test]
    fn reading_a_segment_leaves_its_access_time_alone() {
        let dir = tempfile::tempdir().unwrap();
        let log = one_partition_log(dir.path());
        let first = log.append(0, b"one").unwrap();
        log.wait_durable(first, Duration::from_secs(10)).unwrap();
        let mut reader = log.reader(0, 0).unwrap();
        assert!(reader.next_record().unwrap().is_some());
        let path = reader.segment.as_ref().unwrap().path.clone();

        // An access time older than the last write: with `relatime` (or `strictatime`) a read would update it.
        let long_ago = std::time::UNIX_EPOCH + Duration::from_secs(86_400);
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_times(std::fs::FileTimes::new().set_accessed(long_ago))
            .unwrap();
        let second = log.append(0, b"two").unwrap();
        log.wait_durable(second, Duration::from_secs(10)).unwrap();
        let mut fresh = log.reader(0, 0).unwrap();
        assert_eq!(fresh.next_record().unwrap().unwrap().payload, b"one");
        assert_eq!(fresh.next_record().unwrap().unwrap().payload, b"two");
        assert_eq!(
            std::fs::metadata(&path).unwrap().accessed().unwrap(),
            long_ago
        );
    }
}
