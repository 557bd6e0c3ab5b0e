//! [`Engine::flush`] and [`Engine::discard`].

use crate::engine::Engine;
use crate::io::{punch_hole, sync_data};
use crate::locks::Claim;
use crate::Error;

impl Engine {
    /// Makes every completed write durable: `fdatasync` of the backing store.
    pub fn flush(&self) -> Result<(), Error> {
        sync_data(&self.file)
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
        punch_hole(&self.file, self.data_offset + first, end - first)
    }
}
