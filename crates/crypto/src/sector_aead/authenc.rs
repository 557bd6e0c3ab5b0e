//! The kernel's `authenc(hmac(H),xts(aes))` as dm-crypt drives it
//! (`crypto/authenc.c`): encrypt-then-MAC. The sector is encrypted with
//! AES-XTS under the `plain64` IV; the tag is
//! `HMAC-H(mac_key, sector_le64 ‖ IV ‖ ciphertext)` at full digest length.
//! The volume key is `xts_key ‖ mac_key` (dm-crypt `crypt_setkey`: the MAC
//! key is the last `digest size` bytes).

use super::spec::MacHash;
use crate::secret::ct_eq;
use crate::{new_sector_cipher, Backend, CipherSpec, Error, SectorCipher};
use hmac::{Hmac, KeyInit, Mac};
use zeroize::Zeroize;

/// An HMAC keyed once; every sector clones the keyed state.
#[derive(Clone)]
enum Keyed {
    Sha1(Hmac<sha1::Sha1>),
    Sha256(Hmac<sha2::Sha256>),
    Sha512(Hmac<sha2::Sha512>),
}

impl Keyed {
    fn new(h: MacHash, key: &[u8]) -> Result<Keyed, Error> {
        let bad = |_| Error::Backend("HMAC key rejected".into());
        Ok(match h {
            MacHash::Sha1 => {
                Keyed::Sha1(<Hmac<sha1::Sha1> as KeyInit>::new_from_slice(key).map_err(bad)?)
            }
            MacHash::Sha256 => {
                Keyed::Sha256(<Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).map_err(bad)?)
            }
            MacHash::Sha512 => {
                Keyed::Sha512(<Hmac<sha2::Sha512> as KeyInit>::new_from_slice(key).map_err(bad)?)
            }
        })
    }

    /// `HMAC(ad ‖ ct)` into `out` (the digest length).
    fn tag(&self, ad: &[u8], ct: &[u8], out: &mut [u8]) {
        fn run<M: Mac + Clone>(m: &M, ad: &[u8], ct: &[u8], out: &mut [u8]) {
            let mut m = m.clone();
            m.update(ad);
            m.update(ct);
            out.copy_from_slice(&m.finalize().into_bytes());
        }
        match self {
            Keyed::Sha1(m) => run(m, ad, ct, out),
            Keyed::Sha256(m) => run(m, ad, ct, out),
            Keyed::Sha512(m) => run(m, ad, ct, out),
        }
    }
}

/// Where a batch sits: sector size, the first sector's associated-data and
/// IV sector numbers (512-byte units), the step between sectors, and the
/// tuple length.
pub(super) struct Geometry {
    pub(super) sector_size: usize,
    pub(super) ad0: u64,
    pub(super) iv0: u64,
    pub(super) step: u64,
    pub(super) tuple_len: usize,
}

/// A keyed `authenc(hmac(H),xts(aes))`.
pub(super) struct Authenc {
    xts: Box<dyn SectorCipher>,
    mac: Keyed,
    tag_len: usize,
}

impl Authenc {
    /// Keys it from the whole volume key (`xts_key ‖ mac_key`); the length
    /// was checked by the caller.
    pub(super) fn new(h: MacHash, key: &[u8]) -> Result<Authenc, Error> {
        let split = key.len().checked_sub(h.len()).ok_or(Error::InvalidLength {
            what: "authenc volume key",
            got: key.len(),
            expected: format!("more than the {}-byte MAC key", h.len()),
        })?;
        let (enc, mac) = key.split_at(split);
        let spec = CipherSpec::parse("aes-xts-plain64")?;
        Ok(Authenc {
            xts: new_sector_cipher(&spec, enc, Backend::Accelerated)?,
            mac: Keyed::new(h, mac)?,
            tag_len: h.len(),
        })
    }

    /// Encrypts `data` (whole sectors) in place; sector `i` has IV sector
    /// `g.iv0 + i·g.step` and associated-data sector `g.ad0 + i·g.step`; writes each
    /// tag to the start of its tuple.
    pub(super) fn seal(
        &self,
        data: &mut [u8],
        g: &Geometry,
        tuples: &mut [u8],
    ) -> Result<(), Error> {
        let (sector_size, ad0, iv0, step, tuple_len) =
            (g.sector_size, g.ad0, g.iv0, g.step, g.tuple_len);
        self.xts.encrypt(data, sector_size, iv0, step)?;
        for (i, (ct, t)) in data
            .chunks_exact(sector_size)
            .zip(tuples.chunks_exact_mut(tuple_len))
            .enumerate()
        {
            let ad = ad_of(ad0, iv0, step, i);
            self.mac.tag(&ad, ct, &mut t[..self.tag_len]);
        }
        Ok(())
    }

    /// Checks every sector's tag, decrypts the good ones in place and zeroes
    /// the others; returns the indices of the bad ones.
    pub(super) fn open(
        &self,
        data: &mut [u8],
        g: &Geometry,
        tuples: &[u8],
    ) -> Result<Vec<usize>, Error> {
        let (sector_size, ad0, iv0, step, tuple_len) =
            (g.sector_size, g.ad0, g.iv0, g.step, g.tuple_len);
        let mut bad = Vec::new();
        let mut want = [0u8; 64];
        for (i, (ct, t)) in data
            .chunks_exact(sector_size)
            .zip(tuples.chunks_exact(tuple_len))
            .enumerate()
        {
            let ad = ad_of(ad0, iv0, step, i);
            self.mac.tag(&ad, ct, &mut want[..self.tag_len]);
            if !ct_eq(&want[..self.tag_len], &t[..self.tag_len]) {
                bad.push(i);
            }
        }
        want.zeroize();
        // Decrypt the runs of good sectors between the bad ones.
        let n = data.len() / sector_size;
        let mut start = 0;
        for &b in bad.iter().chain(std::iter::once(&n)) {
            if b > start {
                let run = &mut data[start * sector_size..b * sector_size];
                let iv = iv0.wrapping_add((start as u64).wrapping_mul(step));
                self.xts.decrypt(run, sector_size, iv, step)?;
            }
            if b < n {
                data[b * sector_size..(b + 1) * sector_size].zeroize();
            }
            start = b + 1;
        }
        Ok(bad)
    }
}

/// dm-crypt's associated data for buffer sector `i`: the 512-byte sector
/// number (little-endian u64) and the 16-byte `plain64` IV.
fn ad_of(ad0: u64, iv0: u64, step: u64, i: usize) -> [u8; 24] {
    let k = (i as u64).wrapping_mul(step);
    let mut ad = [0u8; 24];
    ad[..8].copy_from_slice(&ad0.wrapping_add(k).to_le_bytes());
    ad[8..16].copy_from_slice(&iv0.wrapping_add(k).to_le_bytes());
    ad
}
