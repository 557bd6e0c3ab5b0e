//! [`Engine::write_at`]: read-modify-write of partial edge sectors under the
//! stripe lock, encryption into the scratch buffer, one `pwrite`.

use crate::engine::{Dir, Engine};
use crate::io::{read_exact, write_all};
use crate::locks::Claim;
use crate::scratch::with_scratch;
use crate::{Error, Staging};

impl Engine {
    /// Encrypts `buf` and writes it at byte `off` of the data segment.
    /// Returns `buf.len()`. Partial sectors at either end are read,
    /// decrypted, patched and re-encrypted while their stripe is held
    /// exclusively, so concurrent writes to one sector never lose each
    /// other's bytes. `buf` is never modified: ciphertext is built in this
    /// thread's scratch buffer.
    ///
    /// Fails with [`Error::ReadOnly`] on a read-only volume and with
    /// [`Error::OutOfRange`] (nothing written) if the write would reach past
    /// the end of the volume.
    pub fn write_at(&self, buf: &[u8], off: u64) -> Result<usize, Error> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len() as u64;
        if off > self.size || len > self.size - off {
            return Err(Error::OutOfRange {
                offset: off,
                len,
                size: self.size,
            });
        }
        let ss = self.sector_size as u64;
        let first = off / ss;
        let end = off + len;
        let last = end.div_ceil(ss); // exclusive
        let start_b = first * ss;
        let span = ((last - first) * ss) as usize;
        let head_partial =
            !off.is_multiple_of(ss) || (last - first == 1 && !end.is_multiple_of(ss));
        let tail_partial = !end.is_multiple_of(ss);
        let tail_b = (last - 1) * ss;
        let _claim = self.locks.acquire(Claim {
            start: start_b,
            end: last * ss,
            exclusive_at: [
                head_partial.then_some(start_b),
                tail_partial.then_some(tail_b),
            ],
            all_exclusive: false,
        });
        let ss_us = ss as usize;
        let skip = (off - start_b) as usize;
        let pos = self.data_offset + start_b;
        // Edge sectors to read, decrypt and patch: (sector, byte range in span).
        let edges: [Option<(u64, std::ops::Range<usize>)>; 2] =
            if head_partial && tail_partial && span <= 2 * ss_us {
                [Some((first, 0..span)), None]
            } else {
                [
                    head_partial.then_some((first, 0..ss_us)),
                    tail_partial.then_some((last - 1, span - ss_us..span)),
                ]
            };
        if self.stages(span) {
            self.crypt.with_staging(&mut |st: &mut dyn Staging| {
                for (sector, r) in edges.iter().flatten() {
                    self.read_edge_staged(st, *sector, r.clone())?;
                }
                st.buf()[skip..skip + buf.len()].copy_from_slice(buf);
                st.encrypt(first, 0..span)?;
                write_all(&self.backing, &st.buf()[..span], pos)
            })?;
            self.started_writing(pos, span);
            return Ok(buf.len());
        }
        with_scratch(span, |sc| {
            for (sector, r) in edges.iter().flatten() {
                self.read_sectors(*sector, &mut sc[r.clone()])?;
            }
            sc[skip..skip + buf.len()].copy_from_slice(buf);
            self.crypt_run(Dir::Encrypt, first, sc)?;
            write_all(&self.backing, sc, pos)?;
            self.started_writing(pos, span);
            Ok(buf.len())
        })
    }

    /// Has the disk start on `span` bytes just written at `pos` (see
    /// `direct.rs`).
    fn started_writing(&self, pos: u64, span: usize) {
        if let Some(f) = crate::io::as_file(&self.backing) {
            self.direct.start_writeback(f, pos, span);
        }
    }

    /// Reads and decrypts whole sectors starting at `sector` into `buf`.
    fn read_sectors(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        let pos = self.data_offset + sector * self.sector_size as u64;
        read_exact(&self.backing, buf, pos)?;
        self.decrypt_small(sector, buf)
    }
}
