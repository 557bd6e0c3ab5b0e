//! [`BlockStore`]: what a transport (the FUSE block file, the NBD server)
//! serves — a fixed-size array of bytes with block-sized I/O. The volume
//! engine (dm-crypt's formats) is one; an authenticated volume (dm-crypt
//! over dm-integrity) and a standalone integrity device are others.
//! Errors are [`Error`]s; [`Error::errno`] is what a transport reports.

use std::io;

use crate::extent::Extent;
use crate::{AuthVolume, Engine, Error};

/// A device a transport can serve. Every method may run concurrently from
/// many threads.
pub trait BlockStore: Send + Sync + 'static {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// The block size in bytes (the loop device's `--sector-size`, the NBD
    /// export's minimum block size).
    fn block_size(&self) -> usize;
    /// Whether writes are refused.
    fn read_only(&self) -> bool;
    /// Reads `buf.len()` bytes at `offset`; short only at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error>;
    /// Reads up to `size` bytes at `offset` and hands them to `send`, once,
    /// from where they were decrypted (the keep's shared slot), with no
    /// copy;
    /// `None` (the default) when the store has no such path for the
    /// request and [`BlockStore::read_at`] must serve it.
    fn read_borrowed(
        &self,
        offset: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), Error>> {
        let _ = (offset, size, send);
        None
    }
    /// Writes `data` at `offset`; answers the bytes written.
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, Error>;
    /// Makes completed writes durable.
    fn flush(&self) -> Result<(), Error>;
    /// Forgets `len` bytes at `offset` (reads then return zeros), where the
    /// store can; an `EOPNOTSUPP` error otherwise (the default).
    fn discard(&self, offset: u64, len: u64) -> Result<(), Error> {
        let _ = len;
        Err(unsupported("discard", offset))
    }
    /// Writes `len` zero bytes at `offset`.
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), Error> {
        let zeros = vec![0u8; (len.min(1 << 20)) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.write_at(&zeros[..n], offset + done)?;
            done += n as u64;
        }
        Ok(())
    }
    /// Called once when discards are allowed: the loop driver sends "write
    /// zeroes" as hole punches, so holes must read as zeros.
    fn allow_discards(&self) {}
    /// The allocation map of `[offset, offset + len)` (inside the store),
    /// in order, covering at least one byte and at most `len`. The default
    /// is one extent of data.
    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>, Error> {
        let _ = offset;
        Ok(vec![Extent {
            len,
            hole: false,
            zero: false,
        }])
    }
}

/// The error of an operation the store does not do (`EOPNOTSUPP`).
pub fn unsupported(what: &'static str, offset: u64) -> Error {
    Error::Io {
        what,
        offset,
        source: io::Error::from_raw_os_error(libc::EOPNOTSUPP),
    }
}

impl BlockStore for Engine {
    fn size(&self) -> u64 {
        Engine::size(self)
    }
    fn block_size(&self) -> usize {
        self.sector_size()
    }
    fn read_only(&self) -> bool {
        Engine::read_only(self)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        Engine::read_at(self, buf, offset)
    }
    fn read_borrowed(
        &self,
        offset: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), Error>> {
        Engine::read_borrowed(self, offset, size, send)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, Error> {
        Engine::write_at(self, data, offset)
    }
    fn flush(&self) -> Result<(), Error> {
        Engine::flush(self)
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), Error> {
        Engine::discard(self, offset, len)
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), Error> {
        Engine::write_zeroes(self, offset, len)
    }
    fn allow_discards(&self) {
        self.set_holes_read_as_zero(true);
    }
    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>, Error> {
        crate::holes::extents(self, offset, len)
    }
}

/// An authenticated volume: a sector whose tag fails reads as `EIO`;
/// discards are refused (`EOPNOTSUPP`), as dm-crypt does in authenticated
/// modes.
impl BlockStore for AuthVolume {
    fn size(&self) -> u64 {
        AuthVolume::size(self)
    }
    fn block_size(&self) -> usize {
        self.sector_size()
    }
    fn read_only(&self) -> bool {
        AuthVolume::read_only(self)
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        AuthVolume::read_at(self, buf, offset)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, Error> {
        AuthVolume::write_at(self, data, offset)?;
        Ok(data.len())
    }
    fn flush(&self) -> Result<(), Error> {
        AuthVolume::flush(self)
    }
}
