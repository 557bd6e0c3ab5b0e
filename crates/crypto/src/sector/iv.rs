//! dm-crypt IV generators (kernel `drivers/md/dm-crypt.c`, `crypt_iv_*_gen`,
//! and `crypto/essiv.c`).

use super::aes_key::AesKey;
use crate::spec::IvMode;
use crate::{CipherSpec, Error};
use aes::Block;

/// Makes the 16-byte IV of a sector number.
pub(crate) struct IvGen {
    mode: IvMode,
    /// ESSIV: AES keyed with hash(volume key).
    essiv: Option<AesKey>,
}

impl IvGen {
    /// Prepares the generator; for ESSIV, hashes the whole volume key.
    pub(crate) fn new(spec: &CipherSpec, key: &[u8]) -> Result<IvGen, Error> {
        let essiv = match spec.iv {
            IvMode::Essiv(h) => {
                let salt = zeroize::Zeroizing::new(h.digest(key));
                Some(AesKey::new(&salt)?)
            }
            _ => None,
        };
        Ok(IvGen {
            mode: spec.iv,
            essiv,
        })
    }

    /// The IV of sector number `sector`.
    #[inline]
    pub(crate) fn iv(&self, sector: u64) -> [u8; 16] {
        let mut iv = [0u8; 16];
        match self.mode {
            IvMode::Plain => iv[..4].copy_from_slice(&(sector as u32).to_le_bytes()),
            IvMode::Plain64 => iv[..8].copy_from_slice(&sector.to_le_bytes()),
            IvMode::Plain64Be => iv[8..].copy_from_slice(&sector.to_be_bytes()),
            IvMode::Essiv(_) => {
                iv[..8].copy_from_slice(&sector.to_le_bytes());
                if let Some(k) = &self.essiv {
                    let mut b = Block::from(iv);
                    k.encrypt_block(&mut b);
                    iv = b.0;
                }
            }
            IvMode::Null => {}
        }
        iv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(s: &str) -> IvGen {
        IvGen::new(&CipherSpec::parse(s).unwrap(), &[7u8; 32]).unwrap()
    }

    #[test]
    fn layouts() {
        let n = 0x1122_3344_5566_7788u64;
        let mut want = [0u8; 16];
        want[..4].copy_from_slice(&[0x88, 0x77, 0x66, 0x55]);
        assert_eq!(gen("aes-cbc-plain").iv(n), want);
        let mut want = [0u8; 16];
        want[..8].copy_from_slice(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11]);
        assert_eq!(gen("aes-cbc-plain64").iv(n), want);
        let mut want = [0u8; 16];
        want[8..].copy_from_slice(&[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(gen("aes-cbc-plain64be").iv(n), want);
        assert_eq!(gen("aes-cbc-null").iv(n), [0u8; 16]);
        assert_ne!(
            gen("aes-cbc-essiv:sha256").iv(n),
            gen("aes-cbc-plain64").iv(n)
        );
    }
}
