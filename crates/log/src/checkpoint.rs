//! Consumer checkpoints: one small file per partition saying "everything before this offset is
//! persisted downstream". Replaced atomically (write temp, fsync, rename, fsync dir), so a crash
//! leaves either the old or the new checkpoint, never a torn one.
//!
//! Layout (16 bytes): magic `FWCK` | offset u64 LE | CRC32C of the first 12 bytes, u32 LE.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{LogError, Result};
use crate::segment::{segment_path, sync_dir};

const CHECKPOINT_MAGIC: [u8; 4] = *b"FWCK";
const CHECKPOINT_BYTES: usize = 16;
/// Name of the checkpoint file inside a partition directory.
pub const CHECKPOINT_FILE_NAME: &str = "checkpoint";
const CHECKPOINT_TMP_FILE_NAME: &str = "checkpoint.tmp";

/// Path of the checkpoint file in `partition_dir`.
pub fn checkpoint_path(partition_dir: &Path) -> PathBuf {
    partition_dir.join(CHECKPOINT_FILE_NAME)
}

fn encode(offset: u64) -> [u8; CHECKPOINT_BYTES] {
    let mut bytes = [0u8; CHECKPOINT_BYTES];
    bytes[..4].copy_from_slice(&CHECKPOINT_MAGIC);
    bytes[4..12].copy_from_slice(&offset.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..12]);
    bytes[12..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

fn decode(bytes: &[u8]) -> std::result::Result<u64, String> {
    let Ok(bytes) = <&[u8; CHECKPOINT_BYTES]>::try_from(bytes) else {
        return Err(format!("checkpoint is {} bytes, expected 16", bytes.len()));
    };
    if bytes[..4] != CHECKPOINT_MAGIC {
        return Err(format!("bad checkpoint magic {:02x?}", &bytes[..4]));
    }
    let stored = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    let computed = crc32c::crc32c(&bytes[..12]);
    if stored != computed {
        return Err(format!(
            "checkpoint checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&bytes[4..12]);
    Ok(u64::from_le_bytes(offset))
}

/// Reads the partition's checkpoint; None when none was ever written.
pub fn read_checkpoint(partition: u32, partition_dir: &Path) -> Result<Option<u64>> {
    let path = checkpoint_path(partition_dir);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LogError::io(path, e)),
    };
    // The file is only ever replaced by rename, so damage here is media corruption, not a torn
    // write: refuse rather than guess, since a wrong checkpoint either skips or replays records.
    decode(&bytes)
        .map(Some)
        .map_err(|reason| LogError::Corrupt {
            partition,
            segment: path,
            offset: 0,
            reason,
        })
}

/// Durably replaces the partition's checkpoint with `offset`.
pub fn write_checkpoint(partition_dir: &Path, offset: u64) -> Result<()> {
    let tmp = partition_dir.join(CHECKPOINT_TMP_FILE_NAME);
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|e| LogError::io(&tmp, e))?;
    file.write_all(&encode(offset))
        .and_then(|()| file.sync_data())
        .map_err(|e| LogError::io(&tmp, e))?;
    drop(file);
    let path = checkpoint_path(partition_dir);
    fs::rename(&tmp, &path).map_err(|e| LogError::io(&path, e))?;
    sync_dir(partition_dir).map_err(|e| LogError::io(partition_dir, e))
}

/// Deletes the segments that lie entirely below `checkpoint` (the next segment starts at or
/// before it), never the last one, which the writer appends to. `segments` is ascending and is
/// updated in place; returns how many were deleted.
pub fn reclaim_segments(
    partition_dir: &Path,
    segments: &mut Vec<u64>,
    checkpoint: u64,
) -> Result<usize> {
    let reclaimed = take_reclaimable(segments, checkpoint);
    delete_segments(partition_dir, &reclaimed)
}

/// Takes out of `segments` (ascending) the bases of the segments that lie entirely below `checkpoint`,
/// never the last one. The files stay: [`delete_segments`] removes them, and a caller that holds the
/// partition's segment list locked calls it after letting go, so that the writer's next roll, which
/// needs the list, does not wait for the disk.
pub fn take_reclaimable(segments: &mut Vec<u64>, checkpoint: u64) -> Vec<u64> {
    let reclaimable = segments
        .windows(2)
        .take_while(|pair| pair[1] <= checkpoint)
        .count();
    segments.drain(..reclaimable).collect()
}

/// Deletes the segment files with these bases (ones already gone are fine), then syncs the
/// directory; returns how many there were.
pub fn delete_segments(partition_dir: &Path, bases: &[u64]) -> Result<usize> {
    if bases.is_empty() {
        return Ok(0);
    }
    for &base in bases {
        let path = segment_path(partition_dir, base);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(LogError::io(path, e))
            }
            _ => {}
        }
    }
    // Deletions are synced so a crash cannot bring back an older segment while a newer deletion
    // stuck, which would leave a gap in the chain.
    sync_dir(partition_dir).map_err(|e| LogError::io(partition_dir, e))?;
    Ok(bases.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_checkpoint_reads_as_none_then_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_checkpoint(0, dir.path()).unwrap(), None);
        write_checkpoint(dir.path(), 12_345).unwrap();
        assert_eq!(read_checkpoint(0, dir.path()).unwrap(), Some(12_345));
        write_checkpoint(dir.path(), 99).unwrap();
        assert_eq!(read_checkpoint(0, dir.path()).unwrap(), Some(99));
        assert!(!dir.path().join(CHECKPOINT_TMP_FILE_NAME).exists());
    }

    #[test]
    fn damaged_checkpoint_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        write_checkpoint(dir.path(), 7).unwrap();
        let path = checkpoint_path(dir.path());
        let mut bytes = fs::read(&path).unwrap();
        bytes[5] ^= 0x10;
        fs::write(&path, &bytes).unwrap();
        let err = read_checkpoint(3, dir.path()).unwrap_err();
        assert!(
            matches!(err, LogError::Corrupt { partition: 3, .. }),
            "{err}"
        );
        fs::write(&path, &bytes[..10]).unwrap();
        assert!(read_checkpoint(3, dir.path()).is_err());
    }

    #[test]
    fn reclaim_keeps_the_segment_holding_the_checkpoint_and_the_last() {
        let dir = tempfile::tempdir().unwrap();
        for base in [0u64, 100, 200] {
            fs::write(segment_path(dir.path(), base), b"FWLG").unwrap();
        }
        let mut segments = vec![0, 100, 200];
        assert_eq!(reclaim_segments(dir.path(), &mut segments, 99).unwrap(), 0);
        assert_eq!(reclaim_segments(dir.path(), &mut segments, 150).unwrap(), 1);
        assert_eq!(segments, vec![100, 200]);
        assert!(!segment_path(dir.path(), 0).exists());
        assert!(segment_path(dir.path(), 100).exists());
        // Even a checkpoint at the very end keeps the last segment.
        assert_eq!(
            reclaim_segments(dir.path(), &mut segments, 10_000).unwrap(),
            1
        );
        assert_eq!(segments, vec![200]);
        assert!(segment_path(dir.path(), 200).exists());
    }

    #[test]
    fn taking_reclaimable_segments_leaves_their_files_to_delete_later() {
        let dir = tempfile::tempdir().unwrap();
        for base in [0u64, 100, 200, 300] {
            fs::write(segment_path(dir.path(), base), b"FWLG").unwrap();
        }
        let mut segments = vec![0, 100, 200, 300];
        let taken = take_reclaimable(&mut segments, 250);
        assert_eq!(taken, vec![0, 100]);
        assert_eq!(segments, vec![200, 300]);
        assert!(segment_path(dir.path(), 0).exists(), "not deleted yet");
        assert_eq!(delete_segments(dir.path(), &taken).unwrap(), 2);
        assert!(!segment_path(dir.path(), 0).exists());
        assert!(!segment_path(dir.path(), 100).exists());
        assert!(segment_path(dir.path(), 200).exists());
        // Already gone is fine; nothing to take is nothing to delete.
        assert_eq!(delete_segments(dir.path(), &taken).unwrap(), 2);
        assert!(take_reclaimable(&mut segments, 250).is_empty());
        assert_eq!(delete_segments(dir.path(), &[]).unwrap(), 0);
    }
}
