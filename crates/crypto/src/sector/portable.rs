//! The pure-Rust backend: the `aes` crate plus this crate's XTS and CBC.

use super::aes_key::{as_blocks, AesKey};
use super::iv::IvGen;
use super::xts::XtsKeys;
use super::{cbc, check_layout, iv_number, SectorCipher};
use crate::spec::ChainMode;
use crate::{Backend, CipherSpec, Error};

enum Keys {
    Xts(Box<XtsKeys>),
    Cbc(AesKey),
    Ecb(AesKey),
}

/// A sector cipher in pure Rust.
pub(crate) struct PortableCipher {
    spec: CipherSpec,
    key_len: usize,
    keys: Keys,
    ivgen: IvGen,
}

impl PortableCipher {
    /// Expands `key` for `spec`.
    pub(crate) fn new(spec: &CipherSpec, key: &[u8]) -> Result<PortableCipher, Error> {
        spec.check_key_size(key.len())?;
        let keys = match spec.mode {
            ChainMode::Xts => Keys::Xts(Box::new(XtsKeys::new(key)?)),
            ChainMode::Cbc => Keys::Cbc(AesKey::new(key)?),
            ChainMode::Ecb => Keys::Ecb(AesKey::new(key)?),
        };
        Ok(PortableCipher {
            spec: *spec,
            key_len: key.len(),
            keys,
            ivgen: IvGen::new(spec, key)?,
        })
    }

    fn run(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
        encrypt: bool,
    ) -> Result<(), Error> {
        check_layout(buf.len(), sector_size)?;
        let iv_of = |i: usize| self.ivgen.iv(iv_number(first_iv, i, iv_step));
        match &self.keys {
            Keys::Ecb(k) if encrypt => k.encrypt_blocks(as_blocks(buf)),
            Keys::Ecb(k) => k.decrypt_blocks(as_blocks(buf)),
            Keys::Xts(x) => x.crypt(buf, sector_size, iv_of, encrypt),
            Keys::Cbc(k) if encrypt => cbc::encrypt(k, buf, sector_size, iv_of),
            Keys::Cbc(k) => cbc::decrypt(k, buf, sector_size, iv_of),
        }
        Ok(())
    }
}

impl SectorCipher for PortableCipher {
    fn encrypt(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
    ) -> Result<(), Error> {
        self.run(buf, sector_size, first_iv, iv_step, true)
    }

    fn decrypt(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
    ) -> Result<(), Error> {
        self.run(buf, sector_size, first_iv, iv_step, false)
    }

    fn spec(&self) -> &CipherSpec {
        &self.spec
    }

    fn key_len(&self) -> usize {
        self.key_len
    }

    fn backend(&self) -> Backend {
        Backend::Portable
    }

    fn implementation(&self) -> &'static str {
        match self.keys {
            Keys::Xts(_) => "rust aes crate, own XTS",
            Keys::Cbc(_) => "rust aes crate, own CBC",
            Keys::Ecb(_) => "rust aes crate, ECB",
        }
    }
}
