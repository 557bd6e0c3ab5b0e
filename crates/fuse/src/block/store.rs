//! The store behind the block file: [`BlockStore`] (shared with the NBD
//! server, defined by the volume crate), seen through [`Errnos`] so that
//! its errors reach the kernel as errno values.

use std::sync::Arc;

pub use cryptkeep_volume::BlockStore;

use crate::ops::{Errno, R};

/// A store whose errors are errno values (`EIO` for crypto and tag
/// failures, the OS error for I/O failures).
pub(crate) struct Errnos<S>(pub(crate) Arc<S>);

/// The errno a FUSE reply carries for a store error.
fn errno_of(e: cryptkeep_volume::Error) -> Errno {
    Errno::from_i32(e.errno())
}

impl<S: BlockStore> Errnos<S> {
    pub(crate) fn size(&self) -> u64 {
        self.0.size()
    }
    pub(crate) fn block_size(&self) -> usize {
        self.0.block_size()
    }
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> R<usize> {
        self.0.read_at(buf, offset).map_err(errno_of)
    }
    pub(crate) fn read_borrowed(
        &self,
        offset: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<R<()>> {
        self.0
            .read_borrowed(offset, size, send)
            .map(|r| r.map_err(errno_of))
    }
    pub(crate) fn write_at(&self, data: &[u8], offset: u64) -> R<usize> {
        self.0.write_at(data, offset).map_err(errno_of)
    }
    pub(crate) fn flush(&self) -> R<()> {
        self.0.flush().map_err(errno_of)
    }
    pub(crate) fn discard(&self, offset: u64, len: u64) -> R<()> {
        self.0.discard(offset, len).map_err(errno_of)
    }
    pub(crate) fn write_zeroes(&self, offset: u64, len: u64) -> R<()> {
        self.0.write_zeroes(offset, len).map_err(errno_of)
    }
}
