//! Sector ciphers with dm-crypt semantics.
//!
//! A buffer holds whole sectors; sector `i` of the buffer is encrypted with
//! the IV of sector number `first_iv + i * iv_step` (wrapping), so a caller
//! with 4096-byte sectors and 512-byte IV units (dm-crypt without
//! `iv_large_sectors`) passes `iv_step = 8`, and LUKS2 volumes with
//! `sector_size` 4096 pass 8 as well, since cryptsetup sets IVs in 512-byte
//! units. The IV generators are the kernel's (see [`IvMode`]).
//!
//! [`new_sector_cipher`] picks the backend; both produce identical bytes.

mod accel;
mod aes_key;
mod cbc;
mod iv;
mod portable;
mod split;
mod xts;

use crate::spec::IvMode;
use crate::{Backend, CipherSpec, Error};

/// Largest sector (data unit) accepted: IEEE 1619-2018 limits an XTS data
/// unit to 2^20 blocks (16 MiB).
pub const MAX_SECTOR_SIZE: usize = 1 << 24;

/// Encrypts and decrypts whole sectors in place.
///
/// Implementations are `Send + Sync` and may be used from many threads at once.
pub trait SectorCipher: Send + Sync {
    /// Encrypts `buf` in place. `buf` is whole sectors of `sector_size` bytes
    /// (a multiple of 16, at least 16); sector `i` uses the IV of sector number
    /// `first_iv + i * iv_step`.
    fn encrypt(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
    ) -> Result<(), Error>;

    /// Decrypts `buf` in place; the parameters mean what they mean for
    /// [`SectorCipher::encrypt`].
    fn decrypt(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        first_iv: u64,
        iv_step: u64,
    ) -> Result<(), Error>;

    /// The cipher specification.
    fn spec(&self) -> &CipherSpec;

    /// The key length in bytes (both XTS halves together).
    fn key_len(&self) -> usize;

    /// The backend actually in use (an accelerated request that aws-lc
    /// cannot serve reports `Portable`).
    fn backend(&self) -> Backend;

    /// A short description of the implementation, e.g.
    /// `"aws-lc EVP_aes_256_xts"` or `"rust aes (XTS)"`, for benchmarks and logs.
    fn implementation(&self) -> &'static str;
}

/// Makes a sector cipher for `spec` with `key` (the whole volume key; for XTS
/// both halves, data key first).
///
/// With [`Backend::Accelerated`], modes aws-lc lacks (AES-128/192-XTS) and
/// XTS keys with equal halves (aws-lc refuses them, the kernel does not) are
/// served by the portable implementation instead, and CBC encryption (serial
/// within a sector) uses the portable multi-sector code, which is faster.
pub fn new_sector_cipher(
    spec: &CipherSpec,
    key: &[u8],
    backend: Backend,
) -> Result<Box<dyn SectorCipher>, Error> {
    spec.check_key_size(key.len())?;
    if backend == Backend::Accelerated {
        if let Some(c) = accel::AccelCipher::new(spec, key)? {
            if spec.mode == crate::spec::ChainMode::Cbc {
                // Measured (`cryptkeep benchmark`): portable CBC encryption is
                // ~1.7x aws-lc's; aws-lc's CBC decryption is ~1.5x portable's.
                let enc = Box::new(portable::PortableCipher::new(spec, key)?);
                return Ok(Box::new(split::SplitCipher {
                    enc,
                    dec: Box::new(c),
                }));
            }
            return Ok(Box::new(c));
        }
    }
    Ok(Box::new(portable::PortableCipher::new(spec, key)?))
}

/// Checks a buffer/sector-size pair; returns the number of sectors.
pub(crate) fn check_layout(buf_len: usize, sector_size: usize) -> Result<usize, Error> {
    if sector_size < 16 || !sector_size.is_multiple_of(16) || sector_size > MAX_SECTOR_SIZE {
        return Err(Error::InvalidLength {
            what: "sector size",
            got: sector_size,
            expected: format!("a multiple of 16 between 16 and {MAX_SECTOR_SIZE}"),
        });
    }
    if !buf_len.is_multiple_of(sector_size) {
        return Err(Error::InvalidLength {
            what: "sector buffer length",
            got: buf_len,
            expected: format!("a multiple of the sector size {sector_size}"),
        });
    }
    Ok(buf_len / sector_size)
}

/// The IV sector number of buffer sector `i`.
#[inline]
pub(crate) fn iv_number(first_iv: u64, i: usize, iv_step: u64) -> u64 {
    first_iv.wrapping_add((i as u64).wrapping_mul(iv_step))
}

/// True when the IV mode needs no per-sector IV at all.
pub(crate) fn ivless(iv: IvMode) -> bool {
    matches!(iv, IvMode::Null)
}
