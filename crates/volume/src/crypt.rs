//! The seam between the engine and whoever holds the key: [`SectorCrypt`].

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
}
