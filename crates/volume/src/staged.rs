//! The zero-copy path: when the [`crate::SectorCrypt`] leases staging
//! buffers (the keep's shared-memory slots), requests that fit in one are
//! read from the backing store straight into the lease, en/decrypted there
//! by the key holder, and written from it: no copy into or out of shared
//! memory beyond the one every request makes anyway (to or from the
//! caller's buffer).

use crate::engine::Engine;
use crate::io::read_exact;
use crate::{Error, Staging};

impl Engine {
    /// Whether a request spanning `span` bytes of whole sectors goes
    /// through a staging lease.
    pub(crate) fn stages(&self, span: usize) -> bool {
        span <= self.crypt.staging_len()
    }

    /// Reads the `span` bytes of whole sectors starting at `first` into a
    /// staging lease, decrypts them there (keeping all-zero sectors as zeros
    /// when holes read as zeros) and hands the plaintext to `take` while the
    /// lease is held.
    pub(crate) fn read_staged(
        &self,
        first: u64,
        span: usize,
        take: &mut dyn FnMut(&[u8]),
    ) -> Result<(), Error> {
        let pos = self.data_offset + first * self.sector_size as u64;
        self.crypt.with_staging(&mut |st: &mut dyn Staging| {
            self.read_backing(&mut st.buf()[..span], pos)?;
            if self.holes_read_as_zero() {
                self.decrypt_staged_around_holes(st, first, span)?;
            } else {
                st.decrypt(first, 0..span)?;
            }
            take(&st.buf()[..span]);
            Ok(())
        })
    }

    /// Decrypts the sectors of `st.buf()[..span]` whose ciphertext is not
    /// all zeros, one call per run of real ciphertext.
    fn decrypt_staged_around_holes(
        &self,
        st: &mut dyn Staging,
        first: u64,
        span: usize,
    ) -> Result<(), Error> {
        let ss = self.sector_size;
        let n = span / ss;
        let mut run: Option<usize> = None;
        for i in 0..=n {
            let hole = i == n || st.buf()[i * ss..(i + 1) * ss].iter().all(|&b| b == 0);
            match (hole, run) {
                (true, Some(start)) => {
                    st.decrypt(first + start as u64, start * ss..i * ss)?;
                    run = None;
                }
                (false, None) => run = Some(i),
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads the whole sectors at `range` of a staging lease (the first
    /// being data sector `sector`) from the backing store and decrypts them
    /// there, as reads do: the edges of a partial write.
    pub(crate) fn read_edge_staged(
        &self,
        st: &mut dyn Staging,
        sector: u64,
        range: std::ops::Range<usize>,
    ) -> Result<(), Error> {
        let pos = self.data_offset + sector * self.sector_size as u64;
        read_exact(&self.backing, &mut st.buf()[range.clone()], pos)?;
        let ss = self.sector_size;
        if !self.holes_read_as_zero() {
            return st.decrypt(sector, range);
        }
        // One sector at a time: all-zero ciphertext stays zero.
        let mut at = range.start;
        while at < range.end {
            if st.buf()[at..at + ss].iter().any(|&b| b != 0) {
                st.decrypt(sector + ((at - range.start) / ss) as u64, at..at + ss)?;
            }
            at += ss;
        }
        Ok(())
    }
}
