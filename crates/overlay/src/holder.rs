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

    /// The most ciphertext bytes [`KeyHolder::read_and_open`] takes in one
    /// call; 0 (the default) when the holder has no buffer of its own to
    /// read into.
    fn read_open_max(&self) -> usize {
        0
    }

    /// Opens consecutive cipher blocks that `read` puts straight into the
    /// holder's own buffer (the keep's shared slot): `read` gets room for
    /// `clen` bytes (at most [`KeyHolder::read_open_max`]) and answers how
    /// many it filled (fewer at the end of the file). `file_off` is the
    /// cipher file offset `read` reads from: the holder places the room
    /// for it ([`crate::copy_align`]). One copy fewer than reading the
    /// ciphertext first and handing it to [`KeyHolder::open_blocks`],
    /// which the default does.
    fn read_and_open(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        clen: usize,
        file_off: u64,
        read: &mut dyn FnMut(&mut [u8]) -> Result<usize>,
        out: &mut [u8],
    ) -> Result<usize> {
        let mut c = vec![0u8; clen + crate::copy_align::COPY_ALIGN];
        let c = crate::copy_align::file_aligned(&mut c, file_off, clen);
        let got = read(c)?;
        self.open_blocks(first_block, file_id, &c[..got.min(clen)], out)
    }

    /// The most plaintext bytes [`KeyHolder::seal_and_write`] takes in one
    /// call, after a prefix of `prefix_len` bytes; 0 (the default) when
    /// the holder has no buffer of its own to seal in.
    fn seal_max(&self, prefix_len: usize) -> usize {
        let _ = prefix_len;
        0
    }

    /// Seals consecutive plaintext blocks (as [`KeyHolder::seal_blocks`],
    /// at most [`KeyHolder::seal_max`] bytes) in the holder's own buffer
    /// (the keep's shared slot), after `prefix`, and hands `prefix` and
    /// the sealed blocks to `write` in one call, from there: one copy
    /// fewer than sealing into the caller's buffer. `file_off` is the
    /// cipher file offset `write` writes `prefix` to: the holder places
    /// the bytes for it ([`crate::copy_align`]). A holder without such a
    /// buffer (the default) refuses.
    fn seal_and_write(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        prefix: &[u8],
        plaintext: &[u8],
        file_off: u64,
        write: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let _ = (first_block, file_id, prefix, file_off, write);
        Err(crate::error::Error::InvalidArgument(format!(
            "this key holder has no buffer to seal {} bytes in",
            plaintext.len()
        )))
    }

    /// EME-encrypts (`encrypt`) or decrypts `data` (1 to 128 whole 16-byte
    /// blocks) in place under `tweak` with the name key.
    fn eme(&self, encrypt: bool, tweak: &[u8; 16], data: &mut [u8]) -> Result<()>;

    /// [`KeyHolder::eme`] on several names, each under its own tweak (one
    /// or several directories' listings, in order); a holder across a
    /// process boundary does it in as few requests as fit. Fails as a
    /// whole if one name fails.
    fn eme_many(&self, encrypt: bool, names: &mut [(&[u8; 16], &mut [u8])]) -> Result<()> {
        names
            .iter_mut()
            .try_for_each(|(tweak, n)| self.eme(encrypt, tweak, n))
    }
}
