//! File contents: 4096-byte plaintext blocks, each sealed as
//! `nonce ‖ AEAD(block)` with associated data `be64(block number) ‖ file ID`
//! (gocryptfs `contentenc`).
//!
//! * AES-256-GCM: 16-byte nonce, `ciphertext ‖ tag16` → 4128 bytes per full block.
//! * AES-SIV: 16-byte nonce, `SIV16 ‖ ciphertext` → 4128 bytes.
//! * XChaCha20-Poly1305: 24-byte nonce, `ciphertext ‖ tag16` → 4136 bytes.
//!
//! A full-length all-zero cipher block is a hole and reads as 4096 zeros; an
//! all-zero nonce is refused. Symlink targets and xattr values are sealed as
//! block 0 with no file ID ("unbound").

use crate::config::ContentAlg;
use crate::error::{Error, Result};
use crate::header::{FileHeader, FileId, HEADER_LEN};
use crate::holder::KeyHolder;
use cryptkeep_crypto::aead::{new_aead, Aead, AeadAlg, TAG_LEN};
use cryptkeep_crypto::Backend;
use std::sync::Arc;

/// Plaintext block size. Part of the on-disk format.
pub const PLAIN_BS: usize = 4096;

/// The longest content nonce (XChaCha20-Poly1305's).
const MAX_NONCE_LEN: usize = 24;

/// The room [`ContentCipher::seal_run_in_place`] works in: one plaintext
/// block and one cipher block of the longest nonce.
pub const SEAL_WORK_LEN: usize = PLAIN_BS + PLAIN_BS + MAX_NONCE_LEN + TAG_LEN;

/// Seals and opens content blocks for one file system.
pub struct ContentCipher {
    engine: Engine,
    alg: ContentAlg,
    nonce_len: usize,
}

/// What a cipher block holds ([`ContentCipher::stored`]).
enum Stored<'a> {
    /// Plaintext already in the output: this many bytes (0 for an empty
    /// block, 4096 zeros for a hole).
    Plain(usize),
    /// A nonce and the sealed block after it.
    Sealed(&'a [u8], &'a [u8]),
}

/// Where the content key is.
enum Engine {
    /// In this process.
    Local(Box<dyn Aead>),
    /// With a key holder (the keep); runs of blocks go there whole.
    Held(Arc<dyn KeyHolder>),
}

impl std::fmt::Debug for ContentCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.engine {
            Engine::Local(a) => write!(f, "ContentCipher({:?}, {})", self.alg, a.backend()),
            Engine::Held(_) => write!(f, "ContentCipher({:?}, key holder)", self.alg),
        }
    }
}

/// `be64(block_no) ‖ file_id` (the file ID is absent for unbound data).
fn assoc_data(block_no: u64, file_id: Option<&FileId>) -> ([u8; 24], usize) {
    let mut ad = [0u8; 24];
    ad[..8].copy_from_slice(&block_no.to_be_bytes());
    match file_id {
        Some(id) => {
            ad[8..].copy_from_slice(id);
            (ad, 24)
        }
        None => (ad, 8),
    }
}

impl ContentCipher {
    /// Keys the content AEAD (`key` is the derived content key: 32 bytes, or
    /// 64 for AES-SIV).
    pub fn new(alg: ContentAlg, key: &[u8], backend: Backend) -> Result<ContentCipher> {
        let (a, nonce_len) = match alg {
            ContentAlg::AesGcm => (AeadAlg::Aes256Gcm, 16),
            ContentAlg::AesSiv => (AeadAlg::Aes256Siv, 16),
            ContentAlg::XChaCha20Poly1305 => (AeadAlg::XChaCha20Poly1305, 24),
        };
        Ok(ContentCipher {
            engine: Engine::Local(new_aead(a, key, backend)?),
            alg,
            nonce_len,
        })
    }

    /// A content cipher for `alg` whose key stays with `holder`: every
    /// block is sealed and opened there (see [`crate::held`]).
    pub fn held(alg: ContentAlg, holder: Arc<dyn KeyHolder>) -> ContentCipher {
        let nonce_len = match alg {
            ContentAlg::XChaCha20Poly1305 => 24,
            ContentAlg::AesGcm | ContentAlg::AesSiv => 16,
        };
        ContentCipher {
            engine: Engine::Held(holder),
            alg,
            nonce_len,
        }
    }

    /// Whether the key is with a key holder rather than in this process.
    pub fn is_held(&self) -> bool {
        matches!(self.engine, Engine::Held(_))
    }

    /// The content algorithm.
    pub fn alg(&self) -> ContentAlg {
        self.alg
    }

    /// The crypto backend actually in use (the holder chooses its own;
    /// a held cipher reports the default).
    pub fn backend(&self) -> Backend {
        match &self.engine {
            Engine::Local(a) => a.backend(),
            Engine::Held(_) => Backend::default(),
        }
    }

    /// Nonce length in bytes (16, or 24 for XChaCha20-Poly1305).
    pub fn nonce_len(&self) -> usize {
        self.nonce_len
    }

    /// Bytes added to each block: nonce + tag.
    pub fn block_overhead(&self) -> usize {
        self.nonce_len + TAG_LEN
    }

    /// The most plaintext a run of `cipher_len` bytes of cipher blocks can
    /// open to: 4096 per full block (a hole included), the last partial
    /// block less its nonce and tag.
    pub fn open_room(&self, cipher_len: usize) -> usize {
        let cbs = self.cipher_bs();
        let last = cipher_len % cbs;
        cipher_len / cbs * PLAIN_BS + last.saturating_sub(self.block_overhead())
    }

    /// Size of a full cipher block (4128, or 4136 for XChaCha20-Poly1305).
    pub fn cipher_bs(&self) -> usize {
        PLAIN_BS + self.block_overhead()
    }

    /// Seals one block (1..=4096 bytes; an empty block stays empty) into
    /// `out`, which must be `plaintext.len() + block_overhead()` bytes, with
    /// a fresh random nonce.
    pub fn encrypt_block_into(
        &self,
        block_no: u64,
        file_id: Option<&FileId>,
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        let (n_out, rest) = self.split_out(plaintext, out)?;
        match &self.engine {
            Engine::Local(aead) => {
                // Drawn here and copied out: never read back from `out`,
                // which may be memory another process can write.
                let mut nonce = [0u8; MAX_NONCE_LEN];
                let nonce = &mut nonce[..n_out.len()];
                cryptkeep_crypto::rand::fill_random(nonce)?;
                n_out.copy_from_slice(nonce);
                let (ad, n) = assoc_data(block_no, file_id);
                Ok(aead.seal(nonce, &ad[..n], plaintext, rest)?)
            }
            Engine::Held(h) => h.seal_blocks(block_no, file_id, plaintext, out),
        }
    }

    /// Like [`ContentCipher::encrypt_block_into`] with a caller-chosen nonce.
    /// Only AES-SIV is safe with deterministic nonces (reverse mode), so the
    /// other algorithms refuse.
    pub fn encrypt_block_with_nonce(
        &self,
        block_no: u64,
        file_id: Option<&FileId>,
        nonce: &[u8],
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        if self.alg != ContentAlg::AesSiv {
            return Err(Error::InvalidArgument(
                "caller-chosen nonces are only safe with AES-SIV".into(),
            ));
        }
        let Engine::Local(aead) = &self.engine else {
            return Err(Error::InvalidArgument(
                "the key holder draws every nonce itself; reverse mode needs the key here".into(),
            ));
        };
        let (n_out, rest) = self.split_out(plaintext, out)?;
        if nonce.len() != n_out.len() {
            return Err(Error::InvalidArgument(format!(
                "nonce of {} bytes",
                nonce.len()
            )));
        }
        n_out.copy_from_slice(nonce);
        let (ad, n) = assoc_data(block_no, file_id);
        Ok(aead.seal(nonce, &ad[..n], plaintext, rest)?)
    }

    fn split_out<'a>(
        &self,
        plaintext: &[u8],
        out: &'a mut [u8],
    ) -> Result<(&'a mut [u8], &'a mut [u8])> {
        if plaintext.is_empty() || plaintext.len() > PLAIN_BS {
            return Err(Error::InvalidArgument(format!(
                "a content block holds 1..={PLAIN_BS} bytes, got {}",
                plaintext.len()
            )));
        }
        if out.len() != plaintext.len() + self.block_overhead() {
            return Err(Error::InvalidArgument(format!(
                "cipher block buffer of {} bytes, expected {}",
                out.len(),
                plaintext.len() + self.block_overhead()
            )));
        }
        Ok(out.split_at_mut(self.nonce_len))
    }

    /// Seals one block bound to `file_id` into a new vector.
    pub fn encrypt_block(
        &self,
        block_no: u64,
        file_id: &FileId,
        plaintext: &[u8],
    ) -> Result<Vec<u8>> {
        if plaintext.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; plaintext.len() + self.block_overhead()];
        self.encrypt_block_into(block_no, Some(file_id), plaintext, &mut out)?;
        Ok(out)
    }

    /// Opens one cipher block into `out` (at least `ciphertext.len() -
    /// block_overhead()` bytes, or 4096 for a hole) and returns the plaintext
    /// length. A full-size all-zero block is a hole (4096 zeros); an empty
    /// block is empty. Anything that does not authenticate — including a
    /// block too short for nonce and tag, or an all-zero nonce — is
    /// [`Error::Auth`] naming the block.
    pub fn decrypt_block_into(
        &self,
        block_no: u64,
        file_id: Option<&FileId>,
        ciphertext: &[u8],
        out: &mut [u8],
    ) -> Result<usize> {
        let (nonce, sealed) = match self.stored(block_no, ciphertext, out)? {
            Stored::Plain(n) => return Ok(n),
            Stored::Sealed(nonce, sealed) => (nonce, sealed),
        };
        let n = sealed.len() - TAG_LEN;
        let o = out.get_mut(..n).ok_or_else(|| short_buf(n))?;
        match &self.engine {
            Engine::Local(aead) => {
                let (ad, adn) = assoc_data(block_no, file_id);
                aead.open(nonce, &ad[..adn], sealed, o)
                    .map_err(|_| block_auth(block_no))?;
            }
            Engine::Held(h) => {
                if h.open_blocks(block_no, file_id, ciphertext, o)? != n {
                    return Err(block_auth(block_no));
                }
            }
        }
        Ok(n)
    }

    /// What cipher block `block_no` holds: nothing (empty), a hole (a
    /// full block of zeros, whose 4096 zero bytes go into `out` at once),
    /// or a nonce and a sealed block; anything shorter than one block's
    /// overhead, or a zero nonce on anything but a hole, fails to
    /// authenticate.
    fn stored<'a>(
        &self,
        block_no: u64,
        ciphertext: &'a [u8],
        out: &mut [u8],
    ) -> Result<Stored<'a>> {
        if ciphertext.is_empty() {
            return Ok(Stored::Plain(0));
        }
        if ciphertext.len() < self.block_overhead() {
            return Err(block_auth(block_no));
        }
        let (nonce, sealed) = ciphertext.split_at(self.nonce_len);
        // A zero nonce is never drawn: the block is a hole (a full block of
        // zeros) or damaged. Only then is the whole block scanned.
        if nonce.iter().all(|&b| b == 0) {
            if ciphertext.len() == self.cipher_bs() && sealed.iter().all(|&b| b == 0) {
                let o = out.get_mut(..PLAIN_BS).ok_or_else(|| short_buf(PLAIN_BS))?;
                o.fill(0);
                return Ok(Stored::Plain(PLAIN_BS));
            }
            return Err(block_auth(block_no));
        }
        Ok(Stored::Sealed(nonce, sealed))
    }

    /// Opens one block as [`ContentCipher::decrypt_block_into`] does, but
    /// writes `out` only once the block authenticated (the tag checked
    /// first, then the block decrypted into `out`): for an `out` another
    /// process reads (the keep's shared slot). `ciphertext` is read twice,
    /// so it must be memory no one else writes. `None` where the cipher
    /// opens in one pass only (AES-SIV, XChaCha20-Poly1305, the portable
    /// and aws-lc AES-GCM: all but the VAES one) or the keys are held
    /// elsewhere: the caller then opens into memory of its own and copies.
    pub fn open_block_verified_into(
        &self,
        block_no: u64,
        file_id: Option<&FileId>,
        ciphertext: &[u8],
        out: &mut [u8],
    ) -> Option<Result<usize>> {
        let Engine::Local(aead) = &self.engine else {
            return None;
        };
        let (nonce, sealed) = match self.stored(block_no, ciphertext, out) {
            Ok(Stored::Plain(n)) => return Some(Ok(n)),
            Ok(Stored::Sealed(nonce, sealed)) => (nonce, sealed),
            Err(e) => return Some(Err(e)),
        };
        let n = sealed.len() - TAG_LEN;
        let Some(o) = out.get_mut(..n) else {
            return Some(Err(short_buf(n)));
        };
        let (ad, adn) = assoc_data(block_no, file_id);
        let opened = aead.open_verified(nonce, &ad[..adn], sealed, o)?;
        Some(opened.map(|()| n).map_err(|_| block_auth(block_no)))
    }

    /// Opens one block bound to `file_id` into a new vector.
    pub fn decrypt_block(
        &self,
        block_no: u64,
        file_id: &FileId,
        ciphertext: &[u8],
    ) -> Result<Vec<u8>> {
        let mut out = vec![0u8; PLAIN_BS.max(ciphertext.len())];
        let n = self.decrypt_block_into(block_no, Some(file_id), ciphertext, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// Seals consecutive plaintext blocks (the last may be partial) into
    /// `out` (`plaintext.len()` + one overhead per block): all nonces come
    /// from one `getrandom` call, and large runs are split over two threads.
    pub fn encrypt_blocks_into(
        &self,
        first_block: u64,
        file_id: &FileId,
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        let nblocks = plaintext.len().div_ceil(PLAIN_BS);
        if out.len() != plaintext.len() + nblocks * self.block_overhead() {
            return Err(short_buf(plaintext.len() + nblocks * self.block_overhead()));
        }
        if nblocks >= PARALLEL_MIN_BLOCKS && parallel() {
            let half = nblocks / 2;
            let (p1, p2) = plaintext.split_at(half * PLAIN_BS);
            let (o1, o2) = out.split_at_mut(half * self.cipher_bs());
            let (r1, r2) = std::thread::scope(|s| {
                let h = s.spawn(|| self.seal_run(first_block, Some(file_id), p1, o1));
                let r2 = self.seal_run(first_block + half as u64, Some(file_id), p2, o2);
                (h.join(), r2)
            });
            r1.map_err(|_| Error::InvalidArgument("encryption thread panicked".into()))??;
            return r2;
        }
        self.seal_run(first_block, Some(file_id), plaintext, out)
    }

    /// Seals a run of blocks into `out` (the caller checked the lengths):
    /// here with nonces from one `getrandom` call, or with the key holder.
    pub(crate) fn seal_run(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        plaintext: &[u8],
        out: &mut [u8],
    ) -> Result<()> {
        let aead = match &self.engine {
            Engine::Local(a) => a,
            Engine::Held(h) => return h.seal_blocks(first_block, file_id, plaintext, out),
        };
        let nblocks = plaintext.len().div_ceil(PLAIN_BS);
        let nl = self.nonce_len;
        let mut nonces = vec![0u8; nblocks * nl];
        cryptkeep_crypto::rand::fill_random(&mut nonces)?;
        let mut pos = 0;
        for (i, chunk) in plaintext.chunks(PLAIN_BS).enumerate() {
            let len = chunk.len() + self.block_overhead();
            let (n_out, rest) = out[pos..pos + len].split_at_mut(nl);
            // The nonce is sealed with from `nonces`, never read back from
            // `out` (which may be memory another process can write).
            let nonce = &nonces[i * nl..(i + 1) * nl];
            n_out.copy_from_slice(nonce);
            let (ad, adn) = assoc_data(first_block.wrapping_add(i as u64), file_id);
            aead.seal(nonce, &ad[..adn], chunk, rest)?;
            pos += len;
        }
        Ok(())
    }

    /// Seals the plaintext in `buf[from..from + len]` into cipher blocks at
    /// the start of `buf`, in place, last block first, and returns their
    /// length: the key holder's seal in its shared slot, one block at a
    /// time. Each block is sealed into `work` (the holder's own memory, at
    /// least [`SEAL_WORK_LEN`] bytes) under a nonce drawn into the
    /// holder's memory, and only the finished block is copied to the slot:
    /// the nonce and the ciphertext the tag is computed over are the
    /// holder's, whatever else writes `buf` meanwhile. AES-GCM and
    /// XChaCha20-Poly1305 read the plaintext once, where it lies (what
    /// another writer changes meanwhile is sealed as if it had been sent);
    /// AES-SIV reads it twice (S2V, then CTR), so its block is copied into
    /// `work` first and both passes see the same bytes. `from` is at most
    /// one block's overhead, so block `i`'s output, at
    /// `i · cipher_bs() ≥ from + i · 4096`, starts past the plaintext of
    /// the blocks still to seal. In-process keys only.
    pub fn seal_run_in_place(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        buf: &mut [u8],
        from: usize,
        len: usize,
        work: &mut [u8],
    ) -> Result<usize> {
        let Engine::Local(aead) = &self.engine else {
            return Err(Error::InvalidArgument(
                "a key holder seals in its own memory".into(),
            ));
        };
        let (nl, ov, cbs) = (self.nonce_len, self.block_overhead(), self.cipher_bs());
        let nblocks = len.div_ceil(PLAIN_BS);
        let total = nblocks.checked_mul(ov).and_then(|o| o.checked_add(len));
        let plain_end = from.checked_add(len);
        if nblocks == 0
            || from > ov
            || work.len() < SEAL_WORK_LEN
            || plain_end.is_none_or(|e| e > buf.len())
            || total.is_none_or(|t| t > buf.len())
        {
            return Err(Error::InvalidArgument(format!(
                "{len} bytes of plaintext at {from} do not seal in place in {} bytes",
                buf.len()
            )));
        }
        // Nonces for up to this many blocks come from one getrandom call.
        const BATCH: usize = 32;
        let mut nonces = [0u8; BATCH * MAX_NONCE_LEN];
        let read_once = matches!(aead.alg(), AeadAlg::Aes256Gcm | AeadAlg::XChaCha20Poly1305);
        for (done, i) in (0..nblocks).rev().enumerate() {
            let k = done % BATCH;
            if k == 0 {
                cryptkeep_crypto::rand::fill_random(&mut nonces[..BATCH * nl])?;
            }
            let start = i * PLAIN_BS;
            let plen = (len - start).min(PLAIN_BS);
            let src = from + start..from + start + plen;
            let (copy, sealed) = work.split_at_mut(PLAIN_BS);
            let sealed = &mut sealed[..plen + ov];
            let plain: &[u8] = if read_once {
                &buf[src]
            } else {
                copy[..plen].copy_from_slice(&buf[src]);
                &copy[..plen]
            };
            let (n_out, rest) = sealed.split_at_mut(nl);
            let nonce = &nonces[k * nl..(k + 1) * nl];
            n_out.copy_from_slice(nonce);
            let (ad, adn) = assoc_data(first_block.wrapping_add(i as u64), file_id);
            aead.seal(nonce, &ad[..adn], plain, rest)?;
            buf[i * cbs..i * cbs + plen + ov].copy_from_slice(sealed);
        }
        Ok(len + nblocks * ov)
    }

    /// Opens consecutive cipher blocks into `out` (room for 4096 bytes per
    /// block); returns the plaintext length. Large runs use two threads;
    /// the error names the first failing block.
    pub fn decrypt_blocks_into(
        &self,
        first_block: u64,
        file_id: &FileId,
        ciphertext: &[u8],
        out: &mut [u8],
    ) -> Result<usize> {
        let cbs = self.cipher_bs();
        let nblocks = ciphertext.len().div_ceil(cbs);
        if out.len() < nblocks * PLAIN_BS {
            return Err(short_buf(nblocks * PLAIN_BS));
        }
        if nblocks >= PARALLEL_MIN_BLOCKS && parallel() {
            // The first half is all full blocks: exactly half * 4096 bytes of plaintext.
            let half = nblocks / 2;
            let (c1, c2) = ciphertext.split_at(half * cbs);
            let (o1, o2) = out.split_at_mut(half * PLAIN_BS);
            let (r1, r2) = std::thread::scope(|s| {
                let h = s.spawn(|| self.open_run(first_block, Some(file_id), c1, o1));
                let r2 = self.open_run(first_block + half as u64, Some(file_id), c2, o2);
                (h.join(), r2)
            });
            let n1 =
                r1.map_err(|_| Error::InvalidArgument("decryption thread panicked".into()))??;
            return Ok(n1 + r2?);
        }
        self.open_run(first_block, Some(file_id), ciphertext, out)
    }

    /// With a key holder that reads into its own buffer: opens the blocks
    /// of the `clen` ciphertext bytes starting at block `first_block`,
    /// which `read(buf, at)` reads (`at`: the byte offset into those
    /// `clen`), straight in the holder's buffer; large runs in two halves
    /// on two threads, as [`ContentCipher::decrypt_blocks_into`].
    /// `file_off` is the cipher file offset of the first of those bytes.
    /// `None` when the blocks are opened here, or a piece would not fit
    /// the holder's buffer: the caller then reads and decrypts as usual.
    pub fn read_and_open(
        &self,
        first_block: u64,
        file_id: &FileId,
        clen: usize,
        file_off: u64,
        read: &(dyn Fn(&mut [u8], usize) -> Result<usize> + Sync),
        out: &mut [u8],
    ) -> Option<Result<usize>> {
        let Engine::Held(h) = &self.engine else {
            return None;
        };
        let cbs = self.cipher_bs();
        let nblocks = clen.div_ceil(cbs);
        if out.len() < nblocks * PLAIN_BS {
            return Some(Err(short_buf(nblocks * PLAIN_BS)));
        }
        let max = h.read_open_max();
        let piece = |b0: usize, c: usize, o: &mut [u8]| {
            let at = b0 * cbs;
            h.read_and_open(
                first_block + b0 as u64,
                Some(file_id),
                c,
                file_off + at as u64,
                &mut |buf: &mut [u8]| read(buf, at),
                o,
            )
        };
        if nblocks >= PARALLEL_MIN_BLOCKS && parallel() {
            let half = nblocks / 2;
            let (c1, c2) = (half * cbs, clen - half * cbs);
            if c1.max(c2) > max {
                return None;
            }
            let (o1, o2) = out.split_at_mut(half * PLAIN_BS);
            let (r1, r2) = std::thread::scope(|s| {
                let t = s.spawn(|| piece(0, c1, o1));
                let r2 = piece(half, c2, o2);
                (t.join(), r2)
            });
            let n1 = match r1 {
                Ok(r) => r,
                Err(_) => Err(Error::InvalidArgument("decryption thread panicked".into())),
            };
            return Some(n1.and_then(|n1| {
                // A short first half (the file ended in it) ends the run.
                if n1 < half * PLAIN_BS {
                    Ok(n1)
                } else {
                    Ok(n1 + r2?)
                }
            }));
        }
        if clen > max {
            return None;
        }
        Some(piece(0, clen, out))
    }

    /// With a key holder that seals in its own buffer: seals `plaintext`
    /// (consecutive blocks from `first_block`, the last may be partial)
    /// there and hands the bytes to `write(bytes, at)`, `at` their offset
    /// from the start of `prefix`, which goes first, at cipher file offset
    /// `file_off`. With `split`, large
    /// runs go in two halves on two threads (two writes, in either order),
    /// as [`ContentCipher::encrypt_blocks_into`]; the caller allows that
    /// only where a crash between the two cannot leave a block or the
    /// header torn. `None` when the blocks are sealed here, or a piece
    /// would not fit the holder's buffer: the caller then seals into a
    /// buffer of its own.
    #[allow(clippy::too_many_arguments)]
    pub fn seal_and_write(
        &self,
        first_block: u64,
        file_id: &FileId,
        prefix: &[u8],
        plaintext: &[u8],
        file_off: u64,
        split: bool,
        write: &(dyn Fn(&[u8], usize) -> Result<()> + Sync),
    ) -> Option<Result<()>> {
        let Engine::Held(h) = &self.engine else {
            return None;
        };
        let nblocks = plaintext.len().div_ceil(PLAIN_BS);
        if nblocks == 0 {
            return None;
        }
        if split && nblocks >= PARALLEL_MIN_BLOCKS && parallel() {
            let half = nblocks / 2;
            let (p1, p2) = plaintext.split_at(half * PLAIN_BS);
            if p1.len() > h.seal_max(prefix.len()) || p2.len() > h.seal_max(0) {
                return None;
            }
            let at2 = prefix.len() + half * self.cipher_bs();
            let (r1, r2) = std::thread::scope(|s| {
                let t = s.spawn(|| {
                    h.seal_and_write(first_block, Some(file_id), prefix, p1, file_off, &mut |b| {
                        write(b, 0)
                    })
                });
                let r2 = h.seal_and_write(
                    first_block + half as u64,
                    Some(file_id),
                    &[],
                    p2,
                    file_off + at2 as u64,
                    &mut |b| write(b, at2),
                );
                (t.join(), r2)
            });
            let r1 = r1.unwrap_or_else(|_| {
                Err(Error::InvalidArgument("encryption thread panicked".into()))
            });
            return Some(r1.and(r2));
        }
        if plaintext.len() > h.seal_max(prefix.len()) {
            return None;
        }
        Some(h.seal_and_write(
            first_block,
            Some(file_id),
            prefix,
            plaintext,
            file_off,
            &mut |b| write(b, 0),
        ))
    }

    /// Opens a run of blocks into `out`: here block by block, or with the
    /// key holder in one request.
    pub(crate) fn open_run(
        &self,
        first_block: u64,
        file_id: Option<&FileId>,
        ciphertext: &[u8],
        out: &mut [u8],
    ) -> Result<usize> {
        if let Engine::Held(h) = &self.engine {
            return h.open_blocks(first_block, file_id, ciphertext, out);
        }
        let mut pos = 0;
        for (i, chunk) in ciphertext.chunks(self.cipher_bs()).enumerate() {
            let o = out.get_mut(pos..).ok_or_else(|| short_buf(pos))?;
            pos += self.decrypt_block_into(first_block + i as u64, file_id, chunk, o)?;
        }
        Ok(pos)
    }

    /// Seals consecutive plaintext blocks starting at `first_block` (the last
    /// one may be partial) and returns the concatenated cipher blocks.
    pub fn encrypt_blocks(
        &self,
        first_block: u64,
        file_id: &FileId,
        plaintext: &[u8],
    ) -> Result<Vec<u8>> {
        let nblocks = plaintext.len().div_ceil(PLAIN_BS);
        let mut out = vec![0u8; plaintext.len() + nblocks * self.block_overhead()];
        self.encrypt_blocks_into(first_block, file_id, plaintext, &mut out)?;
        Ok(out)
    }

    /// Opens consecutive cipher blocks starting at `first_block`; the error
    /// names the first block that fails.
    pub fn decrypt_blocks(
        &self,
        first_block: u64,
        file_id: &FileId,
        ciphertext: &[u8],
    ) -> Result<Vec<u8>> {
        let mut out = vec![0u8; ciphertext.len().div_ceil(self.cipher_bs()) * PLAIN_BS];
        let n = self.decrypt_blocks_into(first_block, file_id, ciphertext, &mut out)?;
        out.truncate(n);
        Ok(out)
    }

    /// A whole cipher file for `plaintext`: nothing for an empty file, else a
    /// random header and the blocks.
    pub fn encrypt_file(&self, plaintext: &[u8]) -> Result<Vec<u8>> {
        if plaintext.is_empty() {
            return Ok(Vec::new());
        }
        let h = FileHeader::random()?;
        let mut out = h.to_bytes().to_vec();
        out.extend(self.encrypt_blocks(0, &h.id, plaintext)?);
        Ok(out)
    }

    /// Decrypts a whole cipher file. An empty file (or a bare header, left by
    /// an interrupted write) is empty.
    pub fn decrypt_file(&self, ciphertext: &[u8]) -> Result<Vec<u8>> {
        if ciphertext.len() <= HEADER_LEN {
            if ciphertext.len() == HEADER_LEN || ciphertext.is_empty() {
                if !ciphertext.is_empty() {
                    FileHeader::parse(ciphertext)?;
                }
                return Ok(Vec::new());
            }
            return Err(Error::BadHeader {
                path: None,
                detail: format!(
                    "file of {} bytes is shorter than the header",
                    ciphertext.len()
                ),
            });
        }
        let h = FileHeader::parse(&ciphertext[..HEADER_LEN])?;
        self.decrypt_blocks(0, &h.id, &ciphertext[HEADER_LEN..])
    }

    /// Seals unbound data (block 0, no file ID): symlink targets and xattr
    /// values. Empty stays empty. Longer than 4096 bytes is refused.
    pub fn encrypt_unbound(&self, plaintext: &[u8]) -> Result<Vec<u8>> {
        if plaintext.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; plaintext.len() + self.block_overhead()];
        self.encrypt_block_into(0, None, plaintext, &mut out)?;
        Ok(out)
    }

    /// Opens unbound data (see [`ContentCipher::encrypt_unbound`]).
    pub fn decrypt_unbound(&self, ciphertext: &[u8]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; PLAIN_BS.max(ciphertext.len())];
        let n = self
            .decrypt_block_into(0, None, ciphertext, &mut out)
            .map_err(|_| Error::Auth {
                path: None,
                block: None,
            })?;
        out.truncate(n);
        Ok(out)
    }

    /// The plaintext size of a cipher file of `cipher_size` bytes
    /// (gocryptfs's rules: a bare header or a short file is 0; a last block
    /// too short to hold any data counts as one byte of data).
    pub fn plain_size(&self, cipher_size: u64) -> u64 {
        let hl = HEADER_LEN as u64;
        if cipher_size <= hl {
            return 0;
        }
        let cbs = self.cipher_bs() as u64;
        let ovh = self.block_overhead() as u64;
        let mut size = cipher_size;
        let last = (size - hl) % cbs;
        if last > 0 && last <= ovh {
            size = size - last + ovh + 1;
        }
        let blocks = (size - hl).div_ceil(cbs);
        (size - hl).saturating_sub(blocks * ovh)
    }

    /// The cipher file size for `plain_size` bytes of plaintext.
    pub fn cipher_size(&self, plain_size: u64) -> u64 {
        if plain_size == 0 {
            return 0;
        }
        let blocks = plain_size.div_ceil(PLAIN_BS as u64);
        HEADER_LEN as u64 + plain_size + blocks * self.block_overhead() as u64
    }
}

/// Runs of at least this many blocks are split over two threads.
const PARALLEL_MIN_BLOCKS: usize = 64;

/// Whether more than one CPU is available to the calling thread, decided
/// by the first run long enough to ask. A mount over FUSE-over-io_uring
/// asks from its queue threads, each pinned to one CPU, so there runs are
/// never split: the read helper already runs beside the reader, and a
/// second thread per run measured slower (a stream read through
/// `fs mount --keep` took 1.15× as long split, writes 1.03×; without the
/// keep 1.01× and 1.06×).
fn parallel() -> bool {
    static P: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *P.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Block `block_no` did not authenticate.
fn block_auth(block_no: u64) -> Error {
    Error::Auth {
        path: None,
        block: Some(block_no),
    }
}

fn short_buf(n: usize) -> Error {
    Error::InvalidArgument(format!("output buffer shorter than {n} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn ciphers() -> Vec<ContentCipher> {
        let mut v = Vec::new();
        for b in Backend::ALL {
            v.push(ContentCipher::new(ContentAlg::AesGcm, &[1u8; 32], b).unwrap());
            v.push(ContentCipher::new(ContentAlg::XChaCha20Poly1305, &[2u8; 32], b).unwrap());
        }
        v.push(ContentCipher::new(ContentAlg::AesSiv, &[3u8; 64], Backend::Portable).unwrap());
        v
    }

    /// The sizes of gocryptfs's file-format.md examples; changing them changes the format.
    #[test]
    fn sizes_match_the_format_document() {
        let gcm = ContentCipher::new(ContentAlg::AesGcm, &[1u8; 32], Backend::Portable).unwrap();
        let x = ContentCipher::new(ContentAlg::XChaCha20Poly1305, &[1u8; 32], Backend::Portable)
            .unwrap();
        assert_eq!(gcm.cipher_bs(), 4128);
        assert_eq!(x.cipher_bs(), 4136);
        assert_eq!(gcm.cipher_size(0), 0);
        assert_eq!(gcm.cipher_size(1), 51);
        assert_eq!(gcm.cipher_size(5000), 5082);
        assert_eq!(x.cipher_size(1), 59);
        assert_eq!(x.cipher_size(5000), 5098);
        for c in [&gcm, &x] {
            for p in [0u64, 1, 4095, 4096, 4097, 5000, 1 << 20, (1 << 20) + 3] {
                assert_eq!(c.plain_size(c.cipher_size(p)), p);
            }
        }
        assert_eq!(gcm.plain_size(18), 0);
        assert_eq!(gcm.plain_size(18 + 10), 1);
        assert_eq!(gcm.encrypt_file(&[7u8; 5000]).unwrap().len(), 5082);
    }

    #[test]
    fn round_trip_and_holes() {
        for c in ciphers() {
            for len in [0usize, 1, 4095, 4096, 4097, 3 * 4096 + 5] {
                let p: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                let ct = c.encrypt_file(&p).unwrap();
                assert_eq!(ct.len() as u64, c.cipher_size(len as u64));
                assert_eq!(c.decrypt_file(&ct).unwrap(), p, "{c:?} {len}");
            }
            // A hole in the middle: an all-zero full cipher block.
            let p = vec![9u8; 3 * PLAIN_BS];
            let mut ct = c.encrypt_file(&p).unwrap();
            let s = HEADER_LEN + c.cipher_bs();
            ct[s..s + c.cipher_bs()].fill(0);
            let d = c.decrypt_file(&ct).unwrap();
            assert!(d[PLAIN_BS..2 * PLAIN_BS].iter().all(|&b| b == 0));
            assert_eq!(&d[..PLAIN_BS], &p[..PLAIN_BS]);
        }
    }

    #[test]
    fn tampering_names_the_block() {
        for c in ciphers() {
            let p = vec![5u8; 3 * PLAIN_BS];
            let ct = c.encrypt_file(&p).unwrap();
            let h = FileHeader::parse(&ct[..HEADER_LEN]).unwrap();
            for k in 0..3u64 {
                let mut bad = ct.clone();
                bad[HEADER_LEN + k as usize * c.cipher_bs() + 100] ^= 0x40;
                match c.decrypt_file(&bad) {
                    Err(Error::Auth { block: Some(b), .. }) => assert_eq!(b, k),
                    other => panic!("{other:?}"),
                }
                for j in 0..3u64 {
                    let s = HEADER_LEN + j as usize * c.cipher_bs();
                    let r = c.decrypt_block(j, &h.id, &bad[s..s + c.cipher_bs()]);
                    assert_eq!(r.is_ok(), j != k);
                }
            }
            // Blocks are bound to their position and their file.
            let b0 = &ct[HEADER_LEN..HEADER_LEN + c.cipher_bs()];
            assert!(c.decrypt_block(1, &h.id, b0).is_err());
            assert!(c.decrypt_block(0, &[1u8; 16], b0).is_err());
            // An all-zero nonce is refused even with a valid-looking rest.
            let mut z = b0.to_vec();
            z[..c.nonce_len()].fill(0);
            assert!(c.decrypt_block(0, &h.id, &z).is_err());
            assert!(c.decrypt_block(0, &h.id, &b0[..10]).is_err());
        }
    }

    /// Long runs take the two-thread path; results and block numbers in
    /// errors are the same as block by block.
    #[test]
    fn parallel_runs() {
        for c in ciphers() {
            let p: Vec<u8> = (0..200 * PLAIN_BS + 77).map(|i| (i % 253) as u8).collect();
            let id = [9u8; 16];
            let ct = c.encrypt_blocks(5, &id, &p).unwrap();
            assert_eq!(ct.len(), p.len() + 201 * c.block_overhead());
            for (k, chunk) in ct.chunks(c.cipher_bs()).enumerate().step_by(37) {
                let want = &p[k * PLAIN_BS..((k + 1) * PLAIN_BS).min(p.len())];
                assert_eq!(c.decrypt_block(5 + k as u64, &id, chunk).unwrap(), want);
            }
            assert_eq!(c.decrypt_blocks(5, &id, &ct).unwrap(), p);
            let mut bad = ct.clone();
            bad[150 * c.cipher_bs() + 40] ^= 1;
            match c.decrypt_blocks(5, &id, &bad) {
                Err(Error::Auth {
                    block: Some(155), ..
                }) => {}
                other => panic!("{other:?}"),
            }
        }
    }

    /// Sealing in place, the plaintext after a header of up to one block's
    /// overhead, gives blocks that open to the plaintext, bound to their
    /// numbers and file ID (or to none), each under its own nonce; a
    /// header longer than the overhead, or output that does not fit, is
    /// refused.
    #[test]
    fn seal_in_place_round_trips() {
        for c in ciphers() {
            let ov = c.block_overhead();
            for len in [
                1,
                100,
                PLAIN_BS,
                PLAIN_BS + 1,
                3 * PLAIN_BS + 100,
                256 * PLAIN_BS,
            ] {
                for from in [0, 32, ov] {
                    let p: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
                    let blocks = len.div_ceil(PLAIN_BS);
                    let mut buf = vec![0xeeu8; from + len + blocks * ov];
                    buf[from..from + len].copy_from_slice(&p);
                    let mut block = vec![0u8; SEAL_WORK_LEN];
                    let id = [4u8; 16];
                    let n = c
                        .seal_run_in_place(7, Some(&id), &mut buf, from, len, &mut block)
                        .unwrap();
                    assert_eq!(n, len + blocks * ov);
                    assert_eq!(
                        c.decrypt_blocks(7, &id, &buf[..n]).unwrap(),
                        p,
                        "{len} at {from}"
                    );
                    assert!(c.decrypt_blocks(8, &id, &buf[..n]).is_err());
                    let nonces: std::collections::HashSet<&[u8]> = buf[..n]
                        .chunks(c.cipher_bs())
                        .map(|b| &b[..c.nonce_len()])
                        .collect();
                    assert_eq!(nonces.len(), blocks);
                }
            }
            let mut buf = vec![0u8; 2 * PLAIN_BS];
            let mut block = vec![0u8; SEAL_WORK_LEN];
            let n = c
                .seal_run_in_place(0, None, &mut buf, 0, 100, &mut block)
                .unwrap();
            let mut out = vec![0u8; PLAIN_BS];
            assert_eq!(c.open_run(0, None, &buf[..n], &mut out).unwrap(), 100);
            assert!(c
                .seal_run_in_place(0, None, &mut buf, ov + 1, 100, &mut block)
                .is_err());
            assert!(c
                .seal_run_in_place(0, None, &mut buf, 0, PLAIN_BS + 100, &mut block)
                .is_ok());
            assert!(c
                .seal_run_in_place(0, None, &mut buf, 0, 2 * PLAIN_BS, &mut block)
                .is_err());
            assert!(c
                .seal_run_in_place(0, None, &mut buf, 0, 0, &mut block)
                .is_err());
        }
    }

    /// Two peers that keep rewriting part of a block's plaintext, each with
    /// its own byte, while it is sealed in place (the keep's shared slot)
    /// never make a block that fails to open: AES-GCM and
    /// XChaCha20-Poly1305 read the plaintext once and tag the ciphertext
    /// they wrote in private memory, and AES-SIV, which reads it twice,
    /// seals a private copy. The rewritten bytes lie in the last block's
    /// plaintext (sealed first) where block 14's output goes, so the last
    /// block's output is the keep's alone.
    #[test]
    fn plaintext_rewritten_while_sealed_in_place_still_opens() {
        for c in ciphers() {
            let (cbs, ov) = (c.cipher_bs(), c.block_overhead());
            let blocks = 16;
            let len = blocks * PLAIN_BS;
            let last = (blocks - 1) * PLAIN_BS;
            let raced: Vec<usize> = (last..(blocks - 1) * cbs - 16).step_by(16).collect();
            assert!(!raced.is_empty());
            let mut map = cryptkeep_testkit::SharedMap::new(len + blocks * ov);
            let one = map.rewrite(raced.clone(), vec![0x11; 16]);
            let two = map.rewrite(raced.clone(), vec![0x22; 16]);
            let id = [3u8; 16];
            let mut block = vec![0u8; SEAL_WORK_LEN];
            let (b1, b2) = (one.passes(), two.passes());
            let deadline = Instant::now() + Duration::from_secs(60);
            let ran = || one.passes() >= b1 + 10 && two.passes() >= b2 + 10;
            let mut round = 0;
            while round < 200 || (!ran() && Instant::now() < deadline) {
                // SAFETY: the peers' writes are what this test is about.
                let buf = unsafe { map.mine() };
                buf[..len].fill(7);
                c.seal_run_in_place(0, Some(&id), buf, 0, len, &mut block)
                    .unwrap();
                let sealed = buf[(blocks - 1) * cbs..blocks * cbs].to_vec();
                let p = c
                    .decrypt_blocks((blocks - 1) as u64, &id, &sealed)
                    .unwrap_or_else(|e| panic!("{c:?}: round {round}: {e}"));
                for &o in &raced {
                    let b = p[o - last];
                    assert!(b == 0x11 || b == 0x22 || b == 7, "{c:?}: byte {b:#x}");
                }
                round += 1;
            }
            assert!(ran(), "{c:?}: the peers barely ran during the seals");
        }
    }

    /// A peer that keeps writing a nonce of its choosing into the output
    /// while blocks are sealed there (the keep's shared slot) never gets a
    /// block sealed under that nonce, in place or not: the nonce is drawn
    /// and sealed with in private memory, never read back.
    #[test]
    fn a_nonce_written_into_the_output_meanwhile_is_not_sealed_under() {
        for c in ciphers() {
            let (nl, cbs, ov) = (c.nonce_len(), c.cipher_bs(), c.block_overhead());
            let blocks = 64;
            let len = blocks * PLAIN_BS;
            let mut map = cryptkeep_testkit::SharedMap::new(32 + len + blocks * ov);
            let chosen = vec![0x5au8; nl];
            let nonce_fields = (0..blocks).map(|i| i * cbs).collect();
            let peer = map.rewrite(nonce_fields, chosen.clone());
            let id = [1u8; 16];
            let plain = vec![7u8; len];
            let (mut block, mut out) = (vec![0u8; SEAL_WORK_LEN], vec![0u8; PLAIN_BS]);
            // At least 100 rounds, and until the peer has made passes over
            // the nonce fields while they ran (a loaded machine may give
            // it no CPU for a while).
            let (before, deadline) = (peer.passes(), Instant::now() + Duration::from_secs(60));
            let ran = |p: &cryptkeep_testkit::Rewriter| p.passes() >= before + 10;
            let mut round = 0;
            while round < 100 || (!ran(&peer) && Instant::now() < deadline) {
                // SAFETY: the peer's writes are what this test is about.
                let buf = unsafe { map.mine() };
                let n = len + blocks * ov;
                if round % 2 == 0 {
                    buf[32..32 + len].copy_from_slice(&plain);
                    c.seal_run_in_place(0, Some(&id), buf, 32, len, &mut block)
                        .unwrap();
                } else {
                    c.seal_run(0, Some(&id), &plain, &mut buf[..n]).unwrap();
                }
                for (i, b) in buf[..n].chunks(cbs).enumerate() {
                    let mut forged = b.to_vec();
                    forged[..nl].copy_from_slice(&chosen);
                    let r = c.decrypt_block_into(i as u64, Some(&id), &forged, &mut out);
                    assert!(
                        r.is_err(),
                        "{c:?}: block {i} of round {round} was sealed under the peer's nonce"
                    );
                }
                round += 1;
            }
            assert!(ran(&peer), "{c:?}: the peer barely ran during the seals");
        }
    }

    #[test]
    fn unbound_round_trip() {
        for c in ciphers() {
            assert!(c.encrypt_unbound(b"").unwrap().is_empty());
            let ct = c.encrypt_unbound(b"../target").unwrap();
            assert_eq!(c.decrypt_unbound(&ct).unwrap(), b"../target");
            let mut bad = ct.clone();
            bad[ct.len() - 1] ^= 1;
            assert!(c.decrypt_unbound(&bad).unwrap_err().is_auth());
        }
    }

    #[test]
    fn nonces_only_chosen_for_siv() {
        let gcm = ContentCipher::new(ContentAlg::AesGcm, &[1u8; 32], Backend::Portable).unwrap();
        let mut out = vec![0u8; 1 + 32];
        assert!(gcm
            .encrypt_block_with_nonce(0, None, &[1; 16], &[0], &mut out)
            .is_err());
        let siv = ContentCipher::new(ContentAlg::AesSiv, &[1u8; 64], Backend::Portable).unwrap();
        siv.encrypt_block_with_nonce(0, None, &[1; 16], &[0], &mut out)
            .unwrap();
        let mut out2 = vec![0u8; 33];
        siv.encrypt_block_with_nonce(0, None, &[1; 16], &[0], &mut out2)
            .unwrap();
        assert_eq!(out, out2);
    }
}
