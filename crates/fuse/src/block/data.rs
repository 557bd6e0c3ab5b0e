//! Data operations of the block file: read, write, flush/fsync, fallocate.

use super::fs::BlockFs;
use super::store::BlockStore;
use crate::ops::{Errno, R};

impl<S: BlockStore> BlockFs<S> {
    /// Decrypts `out.len()` bytes at `offset` into `out`; answers how many
    /// (short at the end of the volume).
    pub(crate) fn read_data(&self, offset: u64, out: &mut [u8]) -> R<usize> {
        super::flusher::mark_thread();
        self.engine.read_at(out, offset)
    }

    /// Encrypts and writes `data` at `offset`; `EROFS` on a read-only volume.
    pub(crate) fn write_data(&self, offset: u64, data: &[u8]) -> R<u32> {
        super::flusher::mark_thread();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        self.engine.write_at(data, offset).map(|n| n as u32)
    }

    /// flush and fsync: `fdatasync` of the backing store.
    pub(crate) fn sync(&self) -> R<()> {
        super::flusher::mark_thread();
        if self.read_only {
            return Ok(());
        }
        self.engine.flush()
    }

    /// `fallocate`, as the loop driver uses it:
    /// - `PUNCH_HOLE | KEEP_SIZE` (discard, and "write zeroes" that may
    ///   unmap) → [`Engine::discard`](cryptkeep_volume::Engine::discard) when
    ///   discards are allowed (holes then read as zeros), else `EOPNOTSUPP`
    ///   so the block layer writes real zeros instead;
    /// - `ZERO_RANGE [| KEEP_SIZE]` ("write zeroes", no unmap) →
    ///   [`Engine::write_zeroes`](cryptkeep_volume::Engine::write_zeroes);
    /// - plain allocation inside the volume → nothing to do;
    /// - anything else → `EOPNOTSUPP`.
    pub(crate) fn allocate(&self, offset: u64, length: u64, mode: i32) -> R<()> {
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        super::flusher::mark_thread();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        if mode == PUNCH {
            if !self.allow_discards {
                return Err(Errno::EOPNOTSUPP);
            }
            return self.engine.discard(offset, length);
        }
        if mode & !libc::FALLOC_FL_KEEP_SIZE == libc::FALLOC_FL_ZERO_RANGE {
            return self.engine.write_zeroes(offset, length);
        }
        let inside = offset
            .checked_add(length)
            .is_some_and(|end| end <= self.engine.size());
        if mode & !libc::FALLOC_FL_KEEP_SIZE == 0 && inside {
            return Ok(());
        }
        Err(Errno::EOPNOTSUPP)
    }
}
