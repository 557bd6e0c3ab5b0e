//! [`InlineAuthCrypt`]: authenticated sector crypto with the key held in
//! this process.

use cryptkeep_crypto::sector_aead::SectorAead;

use crate::{AuthCrypt, Error};

/// [`AuthCrypt`] over an in-process [`SectorAead`] (dm-crypt's per-sector
/// AEAD, keyed with the whole volume key: encryption key, then MAC key).
pub struct InlineAuthCrypt {
    aead: SectorAead,
}

impl InlineAuthCrypt {
    /// Wraps `aead`.
    pub fn new(aead: SectorAead) -> InlineAuthCrypt {
        InlineAuthCrypt { aead }
    }
}

impl AuthCrypt for InlineAuthCrypt {
    fn sector_size(&self) -> usize {
        self.aead.sector_size()
    }
    fn tuple_size(&self) -> usize {
        self.aead.spec().tuple_bytes()
    }
    fn seal(&self, sector: u64, data: &mut [u8], tuples: &mut [u8]) -> Result<(), Error> {
        Ok(self.aead.seal(sector, data, tuples)?)
    }
    fn open(&self, sector: u64, data: &mut [u8], tuples: &[u8]) -> Result<Vec<usize>, Error> {
        Ok(self.aead.open(sector, data, tuples)?)
    }
}
