//! [`Engine::flush`] and [`Engine::discard`].

use crate::engine::Engine;
use crate::io::{punch_hole, sync_data};
use crate::locks::Claim;
use crate::Error;

impl Engine {
    /// Makes every completed write durable: `fdatasync` of the backing store.
    pub fn flush(&self) -> Result<(), Error> {
        sync_data(&self.backing)
    }

    /// Writes zeros (encrypted, like any data) over `[off, off + len)`: what
    /// `fallocate(FALLOC_FL_ZERO_RANGE)` and a block device's "write zeroes"
    /// mean. Same errors as [`Engine::write_at`].
    pub fn write_zeroes(&self, off: u64, len: u64) -> Result<(), Error> {
        /// Zeros in .bss: no allocation per call.
        static ZEROS: [u8; 256 * 1024] = [0; 256 * 1024];
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if off > self.size || len > self.size - off {
            return Err(Error::OutOfRange {
                offset: off,
                len,
                size: self.size,
            });
        }
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(ZEROS.len() as u64) as usize;
            self.write_at(&ZEROS[..n], off + done)?;
            done += n as u64;
        }
        Ok(())
    }

    /// Discards the whole sectors inside `[off, off + len)` by punching a
    /// hole in the backing store (`FALLOC_FL_PUNCH_HOLE | KEEP_SIZE`), like
    /// dm-crypt with `allow_discards` passes discards down. Partial sectors
    /// at either end are left alone. Afterwards the discarded sectors read as
    /// unspecified data (the decryption of zeros). Fails with
    /// [`Error::ReadOnly`] on a read-only volume, [`Error::OutOfRange`] past
    /// the end, and with the backing store's error (e.g. `EOPNOTSUPP`) if it
    /// cannot punch holes.
    pub fn discard(&self, off: u64, len: u64) -> Result<(), Error> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if off > self.size || len > self.size - off {
            return Err(Error::OutOfRange {
                offset: off,
                len,
                size: self.size,
            });
        }
        let ss = self.sector_size as u64;
        let first = off.div_ceil(ss) * ss;
        let end = (off + len) / ss * ss;
        if first >= end {
            return Ok(());
        }
        let _claim = self.locks.acquire(Claim {
            start: first,
            end,
            exclusive_at: [None, None],
            all_exclusive: true,
        });
        let r = punch_hole(&self.backing, self.data_offset + first, end - first);
        // Even a failed punch may have made part of a hole.
        self.data_run.forget();
        r
    }
}
