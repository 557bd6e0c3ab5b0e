//! The LUKS anti-forensic information splitter (LUKS1 on-disk format §2.4,
//! cryptsetup `lib/luks1/af.c`): a key of `n` bytes becomes `n × stripes`
//! bytes, all of which are needed to recover it.
//!
//! `diffuse` hashes the block in digest-sized chunks: chunk `i` becomes the
//! first `len(chunk)` bytes of `H(be32(i) ‖ chunk)`, the last partial chunk
//! included. Changing any of this changes the on-disk format.

use crate::rand::fill_random;
use crate::{Error, HashAlg, SecretBytes};

/// XORs `src` into `dst`.
fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

/// The AF diffusion function, in place.
fn diffuse(block: &mut [u8], hash: HashAlg) {
    let ds = hash.digest_len();
    for (i, chunk) in block.chunks_mut(ds).enumerate() {
        let iv = (i as u32).to_be_bytes();
        let mut d = zeroize::Zeroizing::new(hash.digest_parts(&[&iv, chunk]));
        let n = chunk.len();
        chunk.copy_from_slice(&d[..n]);
        zeroize::Zeroize::zeroize(&mut *d);
    }
}

fn check(key_len: usize, stripes: u32) -> Result<usize, Error> {
    if key_len == 0 {
        return Err(Error::InvalidLength {
            what: "AF key length",
            got: 0,
            expected: "at least 1 byte".into(),
        });
    }
    if stripes == 0 {
        return Err(Error::InvalidLength {
            what: "AF stripes",
            got: 0,
            expected: "at least 1 (LUKS uses 4000)".into(),
        });
    }
    key_len
        .checked_mul(stripes as usize)
        .ok_or_else(|| Error::InvalidLength {
            what: "AF material size",
            got: key_len,
            expected: format!("key length × {stripes} stripes to fit in memory"),
        })
}

/// Splits `key` into `key.len() × stripes` bytes of AF material; all but the
/// last stripe are random.
pub fn split(key: &[u8], stripes: u32, hash: HashAlg) -> Result<SecretBytes, Error> {
    let n = key.len();
    let total = check(n, stripes)?;
    let mut out = SecretBytes::new(total);
    let mut acc = SecretBytes::new(n);
    let (head, last) = out.as_mut_slice().split_at_mut(total - n);
    fill_random(head)?;
    for stripe in head.chunks(n) {
        xor_into(acc.as_mut_slice(), stripe);
        diffuse(acc.as_mut_slice(), hash);
    }
    last.copy_from_slice(acc.as_slice());
    xor_into(last, key);
    Ok(out)
}

/// Recovers a `key_len`-byte key from AF material of `key_len × stripes` bytes.
pub fn merge(
    material: &[u8],
    key_len: usize,
    stripes: u32,
    hash: HashAlg,
) -> Result<SecretBytes, Error> {
    let total = check(key_len, stripes)?;
    if material.len() != total {
        return Err(Error::InvalidLength {
            what: "AF material length",
            got: material.len(),
            expected: format!("{key_len} × {stripes} = {total} bytes"),
        });
    }
    let mut acc = SecretBytes::new(key_len);
    let (head, last) = material.split_at(total - key_len);
    for stripe in head.chunks(key_len) {
        xor_into(acc.as_mut_slice(), stripe);
        diffuse(acc.as_mut_slice(), hash);
    }
    xor_into(acc.as_mut_slice(), last);
    Ok(acc)
}

/// Size in bytes of the AF material for a key (what a LUKS1 keyslot stores
/// before rounding up to whole sectors).
pub fn material_len(key_len: usize, stripes: u32) -> usize {
    key_len.saturating_mul(stripes as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_stripe_is_the_key() {
        let m = split(b"0123456789abcdef", 1, HashAlg::Sha256).unwrap();
        assert_eq!(m.as_slice(), b"0123456789abcdef");
    }

    #[test]
    fn rejects_bad_lengths() {
        assert!(merge(&[0u8; 10], 4, 3, HashAlg::Sha1).is_err());
        assert!(split(b"", 4000, HashAlg::Sha1).is_err());
        assert!(split(b"k", 0, HashAlg::Sha1).is_err());
    }
}
