//! Free space on the backing file system, for the one choice that
//! depends on it: with the kernel's write cache, `write()` returns before
//! the data reaches the cipher file, so a full disk shows only at
//! write-back, then at `close()` and `fsync()`. While space is low, files
//! opened for writing bypass the cache (`FOPEN_DIRECT_IO`): each
//! `write()` reaches the cipher file before it returns, and fails with
//! ENOSPC itself, as on gocryptfs or any local file system.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cryptkeep_overlay::at;

/// Below this much free space (or an eighth of the file system, on small
/// ones) writes go through: more than the kernel keeps dirty for one FUSE
/// mount (1 % of its dirty limit, a few tens of MiB) plus the cipher
/// overhead.
pub(crate) const LOW_SPACE: u64 = 128 << 20;

/// How long one `statvfs` answer is used.
const RECHECK: Duration = Duration::from_millis(100);

/// The last free-space reading of one mount.
#[derive(Debug)]
pub(crate) struct Space {
    epoch: Instant,
    /// Milliseconds since `epoch` of the last reading, `u64::MAX` for none.
    checked_ms: AtomicU64,
    low: AtomicBool,
}

impl Default for Space {
    fn default() -> Space {
        Space {
            epoch: Instant::now(),
            checked_ms: AtomicU64::new(u64::MAX),
            low: AtomicBool::new(false),
        }
    }
}

/// Whether `free` of `total` bytes is low (see [`LOW_SPACE`]).
pub(crate) fn is_low(free: u64, total: u64) -> bool {
    free < LOW_SPACE.min(total / 8)
}

impl Space {
    /// Whether the file system holding `root` is low on space (for an
    /// unprivileged writer: `f_bavail`); read at most every 100 ms.
    pub(crate) fn low(&self, root: &OwnedFd) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.checked_ms.load(Ordering::Acquire);
        if last != u64::MAX && now.saturating_sub(last) < RECHECK.as_millis() as u64 {
            return self.low.load(Ordering::Acquire);
        }
        let low = match at::statvfs_fd(root) {
            Ok(s) => {
                let unit = s.f_frsize.max(1);
                is_low(
                    s.f_bavail.saturating_mul(unit),
                    s.f_blocks.saturating_mul(unit),
                )
            }
            Err(_) => false,
        };
        self.low.store(low, Ordering::Release);
        self.checked_ms.store(now, Ordering::Release);
        low
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_is_a_fixed_floor_or_an_eighth_of_small_file_systems() {
        assert!(is_low(100 << 20, 100 << 30));
        assert!(!is_low(200 << 20, 100 << 30));
        // A 40 MiB tmpfs: low below 5 MiB.
        assert!(!is_low(6 << 20, 40 << 20));
        assert!(is_low(4 << 20, 40 << 20));
        assert!(is_low(0, 1 << 30));
    }
}
