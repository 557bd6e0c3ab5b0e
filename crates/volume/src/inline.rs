//! [`InlineCrypt`]: sector crypto with the key held in this process.

use cryptkeep_crypto::SectorCipher;

use crate::{Error, SectorCrypt};

/// The kernel's IV unit: dm-crypt counts IVs in 512-byte sectors unless
/// `iv_large_sectors` is set, which LUKS1 and LUKS2 never do.
/// Changing this changes the on-disk format.
pub const IV_SECTOR: usize = 512;

/// [`SectorCrypt`] over an in-process [`SectorCipher`], with dm-crypt's IV
/// numbering as cryptsetup sets it up for LUKS1 and LUKS2: the IV of data
/// sector `n` is `n * (sector_size / 512) + iv_tweak` (no
/// `iv_large_sectors`), so 4096-byte sectors use IVs 0, 8, 16, ...
pub struct InlineCrypt {
    cipher: Box<dyn SectorCipher>,
    sector_size: usize,
    iv_tweak: u64,
}

impl InlineCrypt {
    /// Wraps `cipher` for sectors of `sector_size` bytes (a power of two from
    /// 512 to 4096; the engine refuses others) whose first sector's IV is
    /// `iv_tweak` (the LUKS2 segment's `iv_tweak`, 0 for LUKS1).
    pub fn new(cipher: Box<dyn SectorCipher>, sector_size: usize, iv_tweak: u64) -> InlineCrypt {
        InlineCrypt {
            cipher,
            sector_size,
            iv_tweak,
        }
    }

    /// The IV step between consecutive sectors, in 512-byte units.
    pub fn iv_step(&self) -> u64 {
        (self.sector_size / IV_SECTOR) as u64
    }

    /// The IV sector number of data sector `sector` (wrapping like plain64).
    pub fn iv_of(&self, sector: u64) -> u64 {
        sector
            .wrapping_mul(self.iv_step())
            .wrapping_add(self.iv_tweak)
    }

    fn check(&self, buf: &[u8]) -> Result<(), Error> {
        if self.sector_size < IV_SECTOR || !buf.len().is_multiple_of(self.sector_size) {
            return Err(Error::Crypt(format!(
                "buffer of {} bytes is not a whole number of {}-byte sectors",
                buf.len(),
                self.sector_size
            )));
        }
        Ok(())
    }
}

impl SectorCrypt for InlineCrypt {
    fn sector_size(&self) -> usize {
        self.sector_size
    }

    fn encrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.check(buf)?;
        self.cipher
            .encrypt(buf, self.sector_size, self.iv_of(sector), self.iv_step())?;
        Ok(())
    }

    fn decrypt(&self, sector: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.check(buf)?;
        self.cipher
            .decrypt(buf, self.sector_size, self.iv_of(sector), self.iv_step())?;
        Ok(())
    }
}

impl std::fmt::Debug for InlineCrypt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineCrypt")
            .field("sector_size", &self.sector_size)
            .field("iv_tweak", &self.iv_tweak)
            .finish_non_exhaustive()
    }
}
