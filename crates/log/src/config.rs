//! Log configuration. The server maps its typed TOML config onto this struct; the log itself has
//! no serde dependency so it stays a plain storage library.

use std::path::PathBuf;
use std::str::FromStr;

use crate::error::LogError;

/// When a record counts as durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `fdatasync` every dirty segment before publishing a commit: an acknowledged record survives
    /// power loss.
    #[default]
    Fsync,
    /// Publish as soon as the batch is written to the OS page cache: an acknowledged record survives
    /// a process crash (kill -9) but not a kernel crash or power loss. Segment rolls and recovery
    /// still sync, once per segment, so the segment chain on disk stays consistent.
    Os,
}

impl FromStr for Durability {
    type Err = LogError;

    /// Parses the config spelling: `"fsync"` or `"os"`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fsync" => Ok(Self::Fsync),
            "os" => Ok(Self::Os),
            other => Err(LogError::Config {
                reason: format!("durability must be \"fsync\" or \"os\", got {other:?}"),
            }),
        }
    }
}

/// Configuration of one ingest log directory.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// Directory holding `p{N}/` partition directories and the `LOCK` file.
    pub dir: PathBuf,
    /// Number of partitions. Must not change for an existing directory: callers hash device ids
    /// onto partitions, so a different count would reorder a device's records.
    pub partition_count: u32,
    /// A segment rolls once appending the next record would make it larger than this.
    pub segment_bytes_max: u64,
    /// Largest accepted record payload.
    pub record_bytes_max: u32,
    /// Bytes of framed records waiting for the writer before `append` blocks (backpressure). The
    /// writer holds one more batch of at most this size while it writes, so the log buffers at
    /// most twice this much.
    pub queue_bytes_max: usize,
    /// See [`Durability`].
    pub durability: Durability,
    /// The least time between the starts of two group commits: a batch that is ready sooner waits
    /// out the rest of this window, gathering more records, so the writer commits (and fsyncs) at
    /// most once per window. The window runs from the previous commit's start, so records that came
    /// in during a commit wait only for what is left of it, and a record that finds the writer idle
    /// for longer than the window is committed at once.
    /// 0 commits as soon as the previous commit ends; batches still form while an fsync runs.
    pub group_commit_max_delay_us: u64,
    /// The nice value the writer thread gives itself when it starts (on Linux a thread has its own), -20 to
    /// 19. Below 0, a writer woken on busy cores (its window over, its `fdatasync` returned) gets a core
    /// sooner, and with it every acknowledgement waiting on the commit. Lowering it needs `CAP_SYS_NICE` or
    /// an `RLIMIT_NICE` that allows it; without either the writer keeps the process's nice value and says so
    /// once. 0 leaves it alone.
    pub writer_nice: i32,
    /// The time slice, in microseconds, the writer thread (and so its `fdatasync` helpers) ask the kernel for
    /// (see [`crate::sched`]): shorter than the default, a writer that wakes on busy cores gets one at once.
    /// 0 leaves the kernel's default.
    pub writer_slice_us: u32,
}

impl LogConfig {
    /// Defaults from DESIGN.md: 4 partitions, 64 MiB segments, 1 MiB records, fsync.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            partition_count: 4,
            segment_bytes_max: 64 * 1024 * 1024,
            record_bytes_max: 1024 * 1024,
            queue_bytes_max: 8 * 1024 * 1024,
            durability: Durability::Fsync,
            group_commit_max_delay_us: 0,
            writer_nice: 0,
            writer_slice_us: 0,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), LogError> {
        let reason = if self.partition_count == 0 {
            "partition_count must be at least 1"
        } else if self.segment_bytes_max == 0 {
            "segment_bytes_max must be positive"
        } else if self.record_bytes_max == 0 {
            "record_bytes_max must be positive"
        } else if self.queue_bytes_max == 0 {
            "queue_bytes_max must be positive"
        } else if !(-20..=19).contains(&self.writer_nice) {
            "writer_nice must be between -20 and 19"
        } else {
            return Ok(());
        };
        Err(LogError::Config {
            reason: reason.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_parses_config_spelling() {
        assert_eq!("fsync".parse::<Durability>().unwrap(), Durability::Fsync);
        assert_eq!("os".parse::<Durability>().unwrap(), Durability::Os);
        assert!("always".parse::<Durability>().is_err());
    }

    #[test]
    fn zero_partitions_is_refused() {
        let mut config = LogConfig::new("/nonexistent");
        assert!(config.validate().is_ok());
        config.partition_count = 0;
        assert!(config.validate().is_err());
    }
}
