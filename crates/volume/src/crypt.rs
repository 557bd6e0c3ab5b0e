//! The seam between the engine and whoever holds the key: [`SectorCrypt`].

use std::ops::Range;

use crate::Error;

/// Encrypts and decrypts runs of whole sectors of a data segment.
///
/// The engine never sees the key: it hands `(first sector, buffer)` batches
/// to an implementation of this trait. [`crate::InlineCrypt`] holds the key
/// in this process; the keep (a separate key process) implements it too.
pub trait SectorCrypt: Send + Sync {
    /// Sector size in bytes (512, 1024, 2048 or 4096), as in the LUKS segment.
    fn sector_size(&self) -> usize;
    /// Encrypts `buf` in place. `sector` is the index of buf's first sector,
    /// in `sector_size` units, counted from the start of the data segment;
    /// `buf.len()` is a multiple of `sector_size`.
    fn encrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error>;
    /// Decrypts `buf` in place; same conventions as [`SectorCrypt::encrypt`].
    fn decrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error>;

    /// Length of the buffers [`SectorCrypt::with_staging`] leases; 0 (the
    /// default) when this implementation has none and every request goes
    /// through [`SectorCrypt::encrypt`] / [`SectorCrypt::decrypt`].
    fn staging_len(&self) -> usize {
        0
    }

    /// Leases a staging buffer for the duration of `f`: memory this
    /// implementation en/decrypts in place without copying it (the keep's
    /// shared-memory slot), so the engine can `pread` into it and `pwrite`
    /// from it directly. Only called when [`SectorCrypt::staging_len`] is
    /// not 0.
    fn with_staging(
        &self,
        f: &mut dyn FnMut(&mut dyn Staging) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let _ = f;
        Err(Error::Crypt(
            "this sector crypt has no staging buffers".into(),
        ))
    }
}

/// A leased staging buffer (see [`SectorCrypt::with_staging`]).
pub trait Staging {
    /// The whole buffer, [`SectorCrypt::staging_len`] bytes.
    fn buf(&mut self) -> &mut [u8];
    /// Encrypts `buf()[range]` in place: whole sectors, the first being
    /// data sector `sector`.
    fn encrypt(&mut self, sector: u64, range: Range<usize>) -> Result<(), Error>;
    /// Decrypts `buf()[range]` in place; as [`Staging::encrypt`].
    fn decrypt(&mut self, sector: u64, range: Range<usize>) -> Result<(), Error>;
}
