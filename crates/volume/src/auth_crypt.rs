//! The seam between an authenticated volume and whoever holds its key:
//! [`AuthCrypt`], dm-crypt's per-sector AEAD over dm-integrity's tags.

use crate::Error;

/// Seals and opens runs of whole sectors of an authenticated data segment
/// (LUKS2 `--integrity`): each sector is encrypted and authenticated on its
/// own, and its metadata tuple (the authentication tag, then any stored IV,
/// as dm-crypt lays it out in dm-integrity's per-sector tag) travels beside
/// it. The caller never sees the key: an in-process implementation holds it,
/// or the keep (a separate key process) does.
pub trait AuthCrypt: Send + Sync {
    /// Sector size in bytes (512 … 4096), as in the LUKS2 segment.
    fn sector_size(&self) -> usize;
    /// Metadata bytes per sector (tag + stored IV): the integrity device's
    /// tag size.
    fn tuple_size(&self) -> usize;
    /// Encrypts `data` in place and writes one tuple per sector to
    /// `tuples`. `sector` is the index of data's first sector, in
    /// `sector_size` units from the start of the data segment; `data` is
    /// whole sectors and `tuples` is `tuple_size` bytes for each.
    fn seal(&self, sector: u64, data: &mut [u8], tuples: &mut [u8]) -> Result<(), Error>;
    /// Checks and decrypts `data` in place against `tuples`; same
    /// conventions as [`AuthCrypt::seal`]. Answers the indices (within this
    /// batch) of the sectors whose tag failed; their bytes are zeros, never
    /// unauthenticated plaintext.
    fn open(&self, sector: u64, data: &mut [u8], tuples: &[u8]) -> Result<Vec<usize>, Error>;
}
