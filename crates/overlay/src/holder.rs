//! The seam between the I/O side and whoever holds the content and name
//! keys (`held.rs` has what a holder runs).

use crate::error::Result;
use crate::header::FileId;

/// Whoever holds the content and name keys and does that crypto on request.
/// Inputs come from the I/O side and are checked like any other input.
pub trait KeyHolder: Send + Sync {
    /// Seals consecutive plaintext blocks (4096 bytes each, the last may be
    /// shorter) starting at `first_block`, bound to `file_id` (`None` for
    /// unbound data: symlink targets, xattr values), into `out`
    /// (`plaintext.len()` plus one nonce and tag per block). The holder
    /// draws the nonces.
    fn seal_blocks(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<()>;

    /// Opens consecutive cipher blocks into `out` (room for 4096 bytes per
    /// block) and returns the plaintext length. A full-size all-zero block
    /// is a hole. Failure is [`Error::Auth`] naming the first block that
    /// does not authenticate, when the holder can tell.
    fn open_blocks(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        ciphertext: &[u8],
        out: &mut [u8],
    ) -> Result<usize>;

    /// EME-encrypts (`encrypt`) or decrypts `data` (1 to 128 whole 16-byte
    /// blocks) in place under `tweak` with the name key.
    fn eme(&self, encrypt: bool, tweak: &[u8; 16], data: &mut [u8]) -> Result<()>;

    /// [`KeyHolder::eme`] on several names under one tweak (a directory's
    /// listing); a holder across a process boundary does it in as few
    /// requests as fit. Fails as a whole if one name fails.
    fn eme_many(&self, encrypt: bool, tweak: &[u8; 16], names: &mut [&mut [u8]]) -> Result<()> {
        names
            .iter_mut()
            .try_for_each(|n| self.eme(encrypt, tweak, n))
    }
}
