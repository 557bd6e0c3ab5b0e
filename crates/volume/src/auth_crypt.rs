//! The seam between an authenticated volume and whoever holds its key:
//! [`AuthCrypt`], dm-crypt's per-sector AEAD over dm-integrity's tags.

use crate::Error;

/// Writes the stored data and tuples of a run of sectors into the buffers
/// it is given: `(index of the run's first sector in the batch, data,
/// tuples)` (see [`AuthCrypt::open_from`]).
pub type SectorFill<'a> = dyn FnMut(usize, &mut [u8], &mut [u8]) -> Result<(), Error> + 'a;

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

    /// Seals `src` into `dst` (the same length) and writes the tuples; as
    /// [`AuthCrypt::seal`]. An implementation with its own buffers (the
    /// keep's shared memory) copies `src` in and the result out once.
    fn seal_into(
        &self,
        sector: u64,
        src: &[u8],
        dst: &mut [u8],
        tuples: &mut [u8],
    ) -> Result<(), Error> {
        dst.copy_from_slice(src);
        self.seal(sector, dst, tuples)
    }

    /// Opens the sectors `fill` reads into `out`, as [`AuthCrypt::open`]:
    /// `fill(i, data, tuples)` writes the stored data and tuples of the
    /// sectors from index `i` of this batch (as many as `data` holds) into
    /// the buffers it is given. An implementation with its own buffers
    /// (the keep's shared memory) hands those, so the device read lands
    /// where the crypto runs and only the plaintext is copied out.
    fn open_from(
        &self,
        sector: u64,
        out: &mut [u8],
        fill: &mut SectorFill<'_>,
    ) -> Result<Vec<usize>, Error> {
        let n = out.len() / self.sector_size().max(1);
        let mut tuples = vec![0u8; n * self.tuple_size()];
        fill(0, out, &mut tuples)?;
        self.open(sector, out, &tuples)
    }
}
