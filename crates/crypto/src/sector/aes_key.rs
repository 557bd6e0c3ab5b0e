//! AES (FIPS 197) with a key of any of the three sizes, on the `aes` crate.
//!
//! The `aes` crate pipelines only whole groups of its backend's parallel
//! width (8 blocks for AES-NI, 30 for VAES-256, 64 for VAES-512) and does
//! leftover blocks one at a time. [`AesKey`] learns that width once and pads
//! a short leftover group with scratch blocks, which is faster than the
//! one-at-a-time path for more than a few blocks.

use crate::Error;
use aes::cipher::typenum::Unsigned;
use aes::cipher::{
    consts::U16, BlockCipherDecrypt, BlockCipherEncBackend, BlockCipherEncClosure,
    BlockCipherEncrypt, BlockSizeUser, KeyInit,
};
use aes::{Aes128, Aes192, Aes256, Block};

/// Largest parallel width we pad to (VAES-512).
const MAX_PAR: usize = 64;
/// Leftovers of at most this many blocks go one at a time.
const PAD_MIN: usize = 4;

enum Inner {
    A128(Aes128),
    A192(Aes192),
    A256(Aes256),
}

/// An expanded AES key; the round keys are zeroized on drop by the `aes` crate.
pub(crate) struct AesKey {
    inner: Inner,
    /// The backend's parallel width in blocks.
    par: usize,
}

/// Reads the parallel width of whichever backend the `aes` crate picked.
struct ParQuery<'a>(&'a mut usize);

impl BlockSizeUser for ParQuery<'_> {
    type BlockSize = U16;
}

impl BlockCipherEncClosure for ParQuery<'_> {
    fn call<B: BlockCipherEncBackend<BlockSize = U16>>(self, _backend: &B) {
        *self.0 = B::ParBlocksSize::USIZE;
    }
}

impl AesKey {
    /// Expands a 16-, 24- or 32-byte key.
    pub(crate) fn new(key: &[u8]) -> Result<AesKey, Error> {
        let bad = || Error::InvalidKeySize {
            spec: "aes".to_string(),
            got: key.len(),
            allowed: "16, 24 or 32",
        };
        let inner = match key.len() {
            16 => Inner::A128(Aes128::new_from_slice(key).map_err(|_| bad())?),
            24 => Inner::A192(Aes192::new_from_slice(key).map_err(|_| bad())?),
            32 => Inner::A256(Aes256::new_from_slice(key).map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        let mut par = 1;
        match &inner {
            Inner::A128(k) => k.encrypt_with_backend(ParQuery(&mut par)),
            Inner::A192(k) => k.encrypt_with_backend(ParQuery(&mut par)),
            Inner::A256(k) => k.encrypt_with_backend(ParQuery(&mut par)),
        }
        Ok(AesKey {
            inner,
            par: par.clamp(1, MAX_PAR),
        })
    }

    /// The backend's parallel width in blocks.
    pub(crate) fn par(&self) -> usize {
        self.par
    }

    /// Encrypts one block in place.
    #[inline]
    pub(crate) fn encrypt_block(&self, b: &mut Block) {
        match &self.inner {
            Inner::A128(k) => k.encrypt_block(b),
            Inner::A192(k) => k.encrypt_block(b),
            Inner::A256(k) => k.encrypt_block(b),
        }
    }

    #[inline]
    fn enc_raw(&self, b: &mut [Block]) {
        match &self.inner {
            Inner::A128(k) => k.encrypt_blocks(b),
            Inner::A192(k) => k.encrypt_blocks(b),
            Inner::A256(k) => k.encrypt_blocks(b),
        }
    }

    #[inline]
    fn dec_raw(&self, b: &mut [Block]) {
        match &self.inner {
            Inner::A128(k) => k.decrypt_blocks(b),
            Inner::A192(k) => k.decrypt_blocks(b),
            Inner::A256(k) => k.decrypt_blocks(b),
        }
    }

    /// Encrypts many independent blocks in place, pipelined.
    pub(crate) fn encrypt_blocks(&self, b: &mut [Block]) {
        self.padded(b, true)
    }

    /// Decrypts many independent blocks in place, pipelined.
    pub(crate) fn decrypt_blocks(&self, b: &mut [Block]) {
        self.padded(b, false)
    }

    fn padded(&self, b: &mut [Block], encrypt: bool) {
        let run = |x: &mut [Block]| {
            if encrypt {
                self.enc_raw(x)
            } else {
                self.dec_raw(x)
            }
        };
        let rem = b.len() % self.par;
        if rem <= PAD_MIN || self.par == 1 {
            return run(b);
        }
        let full = b.len() - rem;
        run(&mut b[..full]);
        let mut scratch = [Block::default(); MAX_PAR];
        scratch[..rem].copy_from_slice(&b[full..]);
        run(&mut scratch[..self.par]);
        b[full..].copy_from_slice(&scratch[..rem]);
        wipe_blocks(&mut scratch[..self.par]);
    }
}

/// Overwrites blocks that held plaintext or keystream-like data with zeros.
pub(crate) fn wipe_blocks(blocks: &mut [Block]) {
    for b in blocks {
        zeroize::Zeroize::zeroize(&mut b.0);
    }
}

/// Views a byte slice whose length is a multiple of 16 as AES blocks.
#[inline]
pub(crate) fn as_blocks(buf: &mut [u8]) -> &mut [Block] {
    let (blocks, rest) = Block::slice_as_chunks_mut(buf);
    debug_assert!(rest.is_empty());
    blocks
}

/// XORs a 128-bit value (little-endian byte order) into a block.
#[inline(always)]
pub(crate) fn xor_u128(b: &mut Block, v: u128) {
    let x = u128::from_le_bytes(b.0) ^ v;
    b.0 = x.to_le_bytes();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_gives_the_same_blocks() {
        let k = AesKey::new(&[3u8; 32]).unwrap();
        assert!(k.par() >= 1);
        for n in [1usize, 5, 7, 9, 31, 63, 65, 100] {
            let mut a: Vec<Block> = (0..n).map(|i| Block::from([i as u8; 16])).collect();
            let mut b = a.clone();
            k.encrypt_blocks(&mut a);
            for x in b.iter_mut() {
                k.encrypt_block(x);
            }
            assert_eq!(a, b, "{n}");
            k.decrypt_blocks(&mut a);
            assert_eq!(a[n - 1], Block::from([(n - 1) as u8; 16]));
        }
    }
}
