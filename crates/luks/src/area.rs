//! Keyslot key-material areas, shared by LUKS1 and LUKS2: AF-split material
//! encrypted in 512-byte sectors with the IV counting from 0 at the start of
//! the area (cryptsetup `LUKS_encrypt_to_storage` / `luks2_encrypt_to_storage`).

use cryptkeep_crypto::{af, new_sector_cipher, Backend, CipherSpec, HashAlg, SecretBytes};

use crate::error::Error;
use crate::io::{self, BlockIo};

/// Anti-forensic stripes: the LUKS1 spec and cryptsetup always use 4000.
/// Changing this changes the on-disk format.
pub const AF_STRIPES: u32 = 4000;

/// Key material sectors are always 512 bytes (both LUKS versions).
pub const AREA_SECTOR: u64 = 512;

/// Bytes of AF material for a key of `key_bytes` with `stripes` stripes,
/// rounded up to whole 512-byte sectors (cryptsetup `AF_split_sectors`).
pub fn material_len(key_bytes: usize, stripes: u32) -> u64 {
    let raw = key_bytes as u64 * u64::from(stripes);
    raw.div_ceil(AREA_SECTOR) * AREA_SECTOR
}

/// Decrypt the key material at `offset` with the keyslot key and AF-merge it
/// into a candidate volume key of `key_bytes`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_material(
    io: &dyn BlockIo,
    offset: u64,
    spec: &CipherSpec,
    slot_key: &[u8],
    key_bytes: usize,
    af_hash: HashAlg,
    backend: Backend,
    what: &str,
) -> Result<SecretBytes, Error> {
    let len = material_len(key_bytes, AF_STRIPES);
    let len_usize =
        usize::try_from(len).map_err(|_| Error::Unsupported(format!("{what} too large")))?;
    let raw = io::read_vec(io, offset, len_usize, what)?;
    let mut buf = SecretBytes::from_vec(raw);
    let cipher = new_sector_cipher(spec, slot_key, backend)?;
    cipher.decrypt(buf.as_mut_slice(), AREA_SECTOR as usize, 0, 1)?;
    let used = key_bytes * AF_STRIPES as usize;
    Ok(af::merge(
        &buf.as_slice()[..used],
        key_bytes,
        AF_STRIPES,
        af_hash,
    )?)
}

/// AF-split `volume_key` and encrypt it with the keyslot key, in memory:
/// the material of a new keyslot, ready for [`write_material`]. Nothing is
/// written, so a caller can check everything else before the first write.
pub(crate) fn seal_material(
    spec: &CipherSpec,
    slot_key: &[u8],
    volume_key: &[u8],
    af_hash: HashAlg,
    backend: Backend,
) -> Result<SecretBytes, Error> {
    let len = usize::try_from(material_len(volume_key.len(), AF_STRIPES))
        .map_err(|_| Error::InvalidArgument("volume key too long".into()))?;
    let split = af::split(volume_key, AF_STRIPES, af_hash)?;
    let mut buf = SecretBytes::new(len);
    let n = split.len().min(len);
    buf.as_mut_slice()[..n].copy_from_slice(&split.as_slice()[..n]);
    let cipher = new_sector_cipher(spec, slot_key, backend)?;
    cipher.encrypt(buf.as_mut_slice(), AREA_SECTOR as usize, 0, 1)?;
    Ok(buf)
}

/// Write sealed key material at `offset` and sync.
pub(crate) fn write_material(
    io: &dyn BlockIo,
    offset: u64,
    material: &SecretBytes,
    what: &str,
) -> Result<(), Error> {
    io::write_all(io, material.as_slice(), offset, what)?;
    io::sync(io, what)
}

/// Overwrite `len` bytes at `offset` with random data (one pass; see
/// docs/format for why we do not repeat cryptsetup's 39-pass pattern).
pub(crate) fn wipe_random(
    io: &dyn BlockIo,
    offset: u64,
    len: u64,
    what: &str,
) -> Result<(), Error> {
    fill(io, offset, len, what, true)
}

/// Overwrite `len` bytes at `offset` with zeros.
pub(crate) fn wipe_zero(io: &dyn BlockIo, offset: u64, len: u64, what: &str) -> Result<(), Error> {
    fill(io, offset, len, what, false)
}

fn fill(io: &dyn BlockIo, offset: u64, len: u64, what: &str, random: bool) -> Result<(), Error> {
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK.min(len) as usize];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK) as usize;
        if random {
            cryptkeep_crypto::rand::fill_random(&mut buf[..n])?;
        }
        io::write_all(io, &buf[..n], offset + done, what)?;
        done += n as u64;
    }
    io::sync(io, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned: changing these changes where key material lives on disk.
    #[test]
    fn material_lengths_match_cryptsetup() {
        assert_eq!(AF_STRIPES, 4000);
        assert_eq!(material_len(64, 4000), 256000);
        assert_eq!(material_len(32, 4000), 128000);
        assert_eq!(material_len(16, 4000), 64000);
        assert_eq!(material_len(48, 4000), 192000);
        assert_eq!(material_len(20, 4000), 80384);
    }
}
