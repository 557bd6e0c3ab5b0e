//! Data operations of the block file: read, write, flush/fsync, fallocate.

use std::cell::RefCell;

use fuser::{Errno, ReplyData, ReplyEmpty, ReplyWrite};

use super::fs::{errno_of, BlockFs};

thread_local! {
    /// Each dispatch thread's read buffer, grown to the largest read seen.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl BlockFs {
    /// Decrypts `size` bytes at `offset` into this thread's buffer and
    /// replies with them (short at the end of the volume).
    pub(crate) fn read_data(&self, offset: u64, size: u32, reply: ReplyData) {
        super::flusher::mark_thread();
        READ_BUF.with(|cell| {
            let mut buf = cell.borrow_mut();
            let size = size as usize;
            if buf.len() < size {
                buf.resize(size, 0);
            }
            match self.engine.read_at(&mut buf[..size], offset) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(errno_of(&e)),
            }
        })
    }

    /// Encrypts and writes `data` at `offset`; `EROFS` on a read-only volume.
    pub(crate) fn write_data(&self, offset: u64, data: &[u8], reply: ReplyWrite) {
        super::flusher::mark_thread();
        if self.read_only {
            return reply.error(Errno::EROFS);
        }
        match self.engine.write_at(data, offset) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno_of(&e)),
        }
    }

    /// flush and fsync: `fdatasync` of the backing store.
    pub(crate) fn sync(&self, reply: ReplyEmpty) {
        if self.read_only {
            return reply.ok();
        }
        match self.engine.flush() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno_of(&e)),
        }
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
    pub(crate) fn allocate(&self, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        if self.read_only {
            return reply.error(Errno::EROFS);
        }
        if mode == PUNCH {
            if !self.allow_discards {
                return reply.error(Errno::EOPNOTSUPP);
            }
            return match self.engine.discard(offset, length) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno_of(&e)),
            };
        }
        if mode & !libc::FALLOC_FL_KEEP_SIZE == libc::FALLOC_FL_ZERO_RANGE {
            return match self.engine.write_zeroes(offset, length) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno_of(&e)),
            };
        }
        let inside = offset
            .checked_add(length)
            .is_some_and(|end| end <= self.engine.size());
        if mode & !libc::FALLOC_FL_KEEP_SIZE == 0 && inside {
            return reply.ok();
        }
        reply.error(Errno::EOPNOTSUPP)
    }
}
