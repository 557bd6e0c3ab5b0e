//! [`BlockStore`]: what the block file serves — a fixed-size array of
//! bytes with block-sized I/O. The volume engine (dm-crypt's formats) is
//! one; an authenticated volume (dm-crypt over dm-integrity) and a
//! standalone integrity device are others.

use cryptkeep_volume::{AuthVolume, Engine};

use crate::ops::{Errno, R};

/// A device the block file can serve. Errors are the errno the kernel's
/// caller sees (`EIO` for crypto and tag failures).
pub trait BlockStore: Send + Sync + 'static {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// The block size in bytes (the loop device's `--sector-size`).
    fn block_size(&self) -> usize;
    /// Whether writes are refused.
    fn read_only(&self) -> bool;
    /// Reads `buf.len()` bytes at `offset`; short only at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> R<usize>;
    /// Reads up to `size` bytes at `offset` and hands them to `send` from
    /// where they were decrypted (the keep's shared slot), with no copy;
    /// `None` (the default) when the store has no such path for the
    /// request and [`BlockStore::read_at`] must serve it.
    fn read_borrowed(
        &self,
        offset: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<R<()>> {
        let _ = (offset, size, send);
        None
    }
    /// Writes `data` at `offset`; answers the bytes written.
    fn write_at(&self, data: &[u8], offset: u64) -> R<usize>;
    /// Makes completed writes durable.
    fn flush(&self) -> R<()>;
    /// Forgets `len` bytes at `offset` (reads then return zeros), where the
    /// store can; `EOPNOTSUPP` otherwise (the default).
    fn discard(&self, offset: u64, len: u64) -> R<()> {
        let _ = (offset, len);
        Err(Errno::EOPNOTSUPP)
    }
    /// Writes `len` zero bytes at `offset`.
    fn write_zeroes(&self, offset: u64, len: u64) -> R<()> {
        let zeros = vec![0u8; (len.min(1 << 20)) as usize];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(zeros.len() as u64) as usize;
            self.write_at(&zeros[..n], offset + done)?;
            done += n as u64;
        }
        Ok(())
    }
    /// Called once at mount when discards are allowed: the loop driver
    /// sends "write zeroes" as hole punches, so holes must read as zeros.
    fn allow_discards(&self) {}
}

/// The errno a FUSE reply carries for an engine error.
fn errno_of(e: &cryptkeep_volume::Error) -> Errno {
    Errno::from_i32(e.errno())
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
    fn read_at(&self, buf: &mut [u8], offset: u64) -> R<usize> {
        Engine::read_at(self, buf, offset).map_err(|e| errno_of(&e))
    }
    fn read_borrowed(
        &self,
        offset: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<R<()>> {
        Engine::read_borrowed(self, offset, size, send).map(|r| r.map_err(|e| errno_of(&e)))
    }
    fn write_at(&self, data: &[u8], offset: u64) -> R<usize> {
        Engine::write_at(self, data, offset).map_err(|e| errno_of(&e))
    }
    fn flush(&self) -> R<()> {
        Engine::flush(self).map_err(|e| errno_of(&e))
    }
    fn discard(&self, offset: u64, len: u64) -> R<()> {
        Engine::discard(self, offset, len).map_err(|e| errno_of(&e))
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> R<()> {
        Engine::write_zeroes(self, offset, len).map_err(|e| errno_of(&e))
    }
    fn allow_discards(&self) {
        self.set_holes_read_as_zero(true);
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
    fn read_at(&self, buf: &mut [u8], offset: u64) -> R<usize> {
        AuthVolume::read_at(self, buf, offset).map_err(|e| errno_of(&e))
    }
    fn write_at(&self, data: &[u8], offset: u64) -> R<usize> {
        AuthVolume::write_at(self, data, offset).map_err(|e| errno_of(&e))?;
        Ok(data.len())
    }
    fn flush(&self) -> R<()> {
        AuthVolume::flush(self).map_err(|e| errno_of(&e))
    }
}
