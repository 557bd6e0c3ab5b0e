//! [`Engine::read_at`]: one `pread` (direct where the backing store is a
//! disk), then sector decryption over the cores.

use crate::engine::{Dir, Engine};
use crate::scratch::with_scratch;
use crate::Error;

impl Engine {
    /// Reads decrypted bytes at byte `off` of the data segment into `buf`.
    /// Returns the number of bytes read: `buf.len()` unless the request
    /// reaches the end of the volume (0 at or past the end).
    ///
    /// Sector-aligned requests are read and decrypted in place in `buf`;
    /// others go through this thread's scratch buffer.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize, Error> {
        if off >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(self.size - off) as usize;
        let ss = self.sector_size as u64;
        let first = off / ss;
        let end = off + len as u64;
        let span = (end.div_ceil(ss) - first) * ss;
        if self.stages(span as usize) {
            let skip = (off - first * ss) as usize;
            let out = &mut buf[..len];
            self.read_staged(first, span as usize, &mut |plain| {
                out.copy_from_slice(&plain[skip..skip + len])
            })?;
            return Ok(len);
        }
        if off.is_multiple_of(ss) && end.is_multiple_of(ss) {
            let out = &mut buf[..len];
            self.read_backing(out, self.data_offset + off)?;
            self.crypt_run(Dir::Decrypt, first, out)?;
            return Ok(len);
        }
        with_scratch(span as usize, |sc| {
            self.read_backing(sc, self.data_offset + first * ss)?;
            self.crypt_run(Dir::Decrypt, first, sc)?;
            let skip = (off - first * ss) as usize;
            buf[..len].copy_from_slice(&sc[skip..skip + len]);
            Ok(len)
        })
    }

    /// Reads up to `size` decrypted bytes at byte `off` of the data segment
    /// and hands them to `send` straight from the staging lease they were
    /// decrypted in (the keep's shared slot): the copy [`Engine::read_at`]
    /// makes into the caller's buffer is left to the transport's reply.
    /// `None` when the request does not go through a staging lease (the
    /// caller then uses [`Engine::read_at`]). `send` gets nothing at or
    /// past the end of the volume, a short slice at its end.
    pub fn read_borrowed(
        &self,
        off: u64,
        size: usize,
        send: &mut dyn FnMut(&[u8]),
    ) -> Option<Result<(), Error>> {
        if off >= self.size || size == 0 {
            send(&[]);
            return Some(Ok(()));
        }
        let len = (size as u64).min(self.size - off) as usize;
        let ss = self.sector_size as u64;
        let first = off / ss;
        let span = ((off + len as u64).div_ceil(ss) - first) * ss;
        if !self.stages(span as usize) {
            return None;
        }
        let skip = (off - first * ss) as usize;
        Some(self.read_staged(first, span as usize, &mut |plain| {
            send(&plain[skip..skip + len])
        }))
    }
}
