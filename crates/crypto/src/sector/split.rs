//! A sector cipher that encrypts with one implementation and decrypts with
//! another: CBC encryption is serial inside a sector, so the portable code,
//! which interleaves many sectors, beats aws-lc's one-sector-at-a-time CBC
//! encryption, while aws-lc's CBC decryption (parallel by nature) is faster.
//! Both implementations produce identical bytes (tests/cross_backend.rs).

use super::SectorCipher;
use crate::{Backend, CipherSpec, Error};

/// Encrypts with `enc`, decrypts with `dec`; reports `dec`'s backend.
pub(super) struct SplitCipher {
    pub(super) enc: Box<dyn SectorCipher>,
    pub(super) dec: Box<dyn SectorCipher>,
}

impl SectorCipher for SplitCipher {
    fn encrypt(&self, buf: &mut [u8], ss: usize, first_iv: u64, step: u64) -> Result<(), Error> {
        self.enc.encrypt(buf, ss, first_iv, step)
    }

    fn decrypt(&self, buf: &mut [u8], ss: usize, first_iv: u64, step: u64) -> Result<(), Error> {
        self.dec.decrypt(buf, ss, first_iv, step)
    }

    fn spec(&self) -> &CipherSpec {
        self.dec.spec()
    }

    fn key_len(&self) -> usize {
        self.dec.key_len()
    }

    fn backend(&self) -> Backend {
        self.dec.backend()
    }

    fn implementation(&self) -> &'static str {
        "rust aes (CBC encrypt, multi-sector) + aws-lc (CBC decrypt)"
    }
}
