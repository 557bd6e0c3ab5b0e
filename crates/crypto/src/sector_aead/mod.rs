//! dm-crypt's per-sector authenticated encryption, the LUKS2 `--integrity`
//! modes (dm-crypt over dm-integrity), byte-exact with the Linux kernel
//! (`drivers/md/dm-crypt.c` `crypt_convert_block_aead`).
//!
//! [`AuthSpec`] names and sizes a mode; [`SectorAead`] applies it to
//! sectors. Each sector `s` (numbered from the start of the data segment in
//! `sector_size` units) becomes its ciphertext (same length) plus a metadata
//! tuple of [`AuthSpec::tuple_bytes`] stored by dm-integrity:
//!
//! ```text
//! tuple = auth tag (tag_bytes) ‖ stored IV (iv_bytes, random modes only)
//! associated data = le64(s · sector_size/512) ‖ IV
//! ```
//!
//! The IV is `plain64` of `s · sector_size/512` (16 bytes, LUKS2 never sets
//! `iv_large_sectors`) for the XTS+HMAC modes, and fresh random bytes per
//! write for the `-random` modes. A sector whose tag fails is reported and
//! wiped; dm-crypt fails the whole bio with an I/O error instead
//! (`BLK_STS_PROTECTION`) and logs `INTEGRITY AEAD ERROR, sector N`.
//! docs/format/luks2-integrity.md has the details and sources.

mod aegis128;
mod authenc;
mod native;
mod spec;

pub use spec::AuthSpec;

use crate::rand::fill_random;
use crate::Error;
use spec::Mode;
use std::fmt;
use zeroize::Zeroize;

/// The engine behind a [`SectorAead`].
enum Engine {
    Authenc(Box<authenc::Authenc>),
    Native(native::Native),
}

/// A keyed per-sector AEAD, as dm-crypt applies it for an [`AuthSpec`].
///
/// `Send + Sync`; usable from many threads at once. Key material lives in
/// the cipher states only and is wiped when they drop; `Debug` shows the
/// mode and sector size, never key bytes.
pub struct SectorAead {
    spec: AuthSpec,
    sector_size: usize,
    engine: Engine,
}

impl fmt::Debug for SectorAead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SectorAead")
            .field("spec", &self.spec)
            .field("sector_size", &self.sector_size)
            .finish_non_exhaustive()
    }
}

impl SectorAead {
    /// Keys `spec` with the whole volume key (for the HMAC modes
    /// `xts_key ‖ mac_key`, as in the LUKS2 keyslot) for sectors of
    /// `sector_size` bytes (512, 1024, 2048 or 4096, as dm-crypt allows).
    pub fn new(spec: &AuthSpec, key: &[u8], sector_size: usize) -> Result<SectorAead, Error> {
        if !(512..=4096).contains(&sector_size) || !sector_size.is_power_of_two() {
            return Err(Error::InvalidLength {
                what: "sector size",
                got: sector_size,
                expected: "512, 1024, 2048 or 4096".into(),
            });
        }
        spec.check_key_bytes(key.len())?;
        let engine = match spec.mode() {
            Mode::XtsHmac(h) => Engine::Authenc(Box::new(authenc::Authenc::new(h, key)?)),
            m => Engine::Native(native::Native::new(m, key)?),
        };
        Ok(SectorAead {
            spec: spec.clone(),
            sector_size,
            engine,
        })
    }

    /// The mode.
    pub fn spec(&self) -> &AuthSpec {
        &self.spec
    }

    /// The sector size in bytes.
    pub fn sector_size(&self) -> usize {
        self.sector_size
    }

    /// Checks a batch; returns the number of sectors.
    fn check(&self, data: usize, tuples: usize) -> Result<usize, Error> {
        if !data.is_multiple_of(self.sector_size) {
            return Err(Error::InvalidLength {
                what: "sector data length",
                got: data,
                expected: format!("a multiple of the sector size {}", self.sector_size),
            });
        }
        let n = data / self.sector_size;
        let want = n * self.spec.tuple_bytes();
        if tuples != want {
            return Err(Error::InvalidLength {
                what: "integrity tuple buffer length",
                got: tuples,
                expected: format!("{want} ({n} sectors × {} bytes)", self.spec.tuple_bytes()),
            });
        }
        Ok(n)
    }

    /// The 512-byte sector number of data-segment sector `sector`, and the
    /// step between consecutive sectors.
    fn units(&self, sector: u64) -> (u64, u64) {
        let step = (self.sector_size / 512) as u64;
        (sector.wrapping_mul(step), step)
    }

    /// Encrypts `data` (whole sectors; the first is data-segment sector
    /// `sector`, counted in `sector_size` units from the segment start) in
    /// place and writes each sector's metadata tuple (`tuple_bytes` each,
    /// tag then IV) to `tuples`. Random IVs come from getrandom, one call
    /// per batch.
    pub fn seal(&self, sector: u64, data: &mut [u8], tuples: &mut [u8]) -> Result<(), Error> {
        let n = self.check(data.len(), tuples.len())?;
        let (s0, step) = self.units(sector);
        let (tb, ib, ss) = (
            self.spec.tag_bytes(),
            self.spec.iv_bytes(),
            self.sector_size,
        );
        let tl = tb + ib;
        match &self.engine {
            Engine::Authenc(a) => a.seal(data, &geometry(ss, s0, step, tl), tuples),
            Engine::Native(e) => {
                // The IVs are used from this private copy, never read back
                // from `tuples`: those may be memory another process can
                // write (the keep's shared slot), and a nonce read back
                // from there would be one that process chose.
                let mut ivs = vec![0u8; n * ib];
                fill_random(&mut ivs)?;
                for (t, iv) in tuples.chunks_exact_mut(tl).zip(ivs.chunks_exact(ib)) {
                    t[tb..].copy_from_slice(iv);
                }
                let mut scratch = Vec::new();
                let mut i = 0usize;
                if let Some(a) = e.aegis() {
                    let pairs = n / 2;
                    let (head, _) = data.split_at_mut(pairs * 2 * ss);
                    for ((d, t), iv) in head
                        .chunks_exact_mut(2 * ss)
                        .zip(tuples.chunks_exact_mut(2 * tl))
                        .zip(ivs.chunks_exact(2 * ib))
                    {
                        let (d0, d1) = d.split_at_mut(ss);
                        let (t0, t1) = t.split_at_mut(tl);
                        let (iv0, iv1) = iv.split_at(ib);
                        let ad0 = Ad::new(s0, step, i as u64, iv0);
                        let ad1 = Ad::new(s0, step, i as u64 + 1, iv1);
                        let n0: &[u8; 16] = iv0.try_into().map_err(|_| bug())?;
                        let n1: &[u8; 16] = iv1.try_into().map_err(|_| bug())?;
                        let [g0, g1] = a.seal2([n0, n1], [ad0.get(), ad1.get()], [d0, d1]);
                        t0[..tb].copy_from_slice(&g0);
                        t1[..tb].copy_from_slice(&g1);
                        i += 2;
                    }
                }
                for ((d, t), iv) in data[i * ss..]
                    .chunks_exact_mut(ss)
                    .zip(tuples[i * tl..].chunks_exact_mut(tl))
                    .zip(ivs[i * ib..].chunks_exact(ib))
                {
                    let a_d = Ad::new(s0, step, i as u64, iv);
                    e.seal(iv, a_d.get(), d, &mut t[..tb], &mut scratch)?;
                    i += 1;
                }
                Ok(())
            }
        }
    }

    /// Checks and decrypts `data` in place (numbered as for
    /// [`SectorAead::seal`]) against `tuples`. Returns the indices within
    /// this batch of the sectors whose tag failed; their bytes are
    /// overwritten with zeros, so no unauthenticated plaintext is returned.
    pub fn open(&self, sector: u64, data: &mut [u8], tuples: &[u8]) -> Result<Vec<usize>, Error> {
        let n = self.check(data.len(), tuples.len())?;
        let (s0, step) = self.units(sector);
        let (tb, ib, ss) = (
            self.spec.tag_bytes(),
            self.spec.iv_bytes(),
            self.sector_size,
        );
        let tl = tb + ib;
        match &self.engine {
            Engine::Authenc(a) => a.open(data, &geometry(ss, s0, step, tl), tuples),
            Engine::Native(e) => {
                let mut bad = Vec::new();
                let mut scratch = Vec::new();
                let mut i = 0usize;
                if let Some(a) = e.aegis() {
                    let pairs = n / 2;
                    let (head, _) = data.split_at_mut(pairs * 2 * ss);
                    for (d, t) in head
                        .chunks_exact_mut(2 * ss)
                        .zip(tuples.chunks_exact(2 * tl))
                    {
                        let (d0, d1) = d.split_at_mut(ss);
                        let (t0, t1) = t.split_at(tl);
                        let (tag0, iv0) = t0.split_at(tb);
                        let (tag1, iv1) = t1.split_at(tb);
                        let ad0 = Ad::new(s0, step, i as u64, iv0);
                        let ad1 = Ad::new(s0, step, i as u64 + 1, iv1);
                        let n0: &[u8; 16] = iv0.try_into().map_err(|_| bug())?;
                        let n1: &[u8; 16] = iv1.try_into().map_err(|_| bug())?;
                        let [g0, g1] =
                            a.open2([n0, n1], [ad0.get(), ad1.get()], [&mut *d0, &mut *d1]);
                        if !crate::secret::ct_eq(&g0, tag0) {
                            d0.zeroize();
                            bad.push(i);
                        }
                        if !crate::secret::ct_eq(&g1, tag1) {
                            d1.zeroize();
                            bad.push(i + 1);
                        }
                        i += 2;
                    }
                }
                for (d, t) in data[i * ss..]
                    .chunks_exact_mut(ss)
                    .zip(tuples[i * tl..].chunks_exact(tl))
                {
                    let (tag, iv) = t.split_at(tb);
                    let a_d = Ad::new(s0, step, i as u64, iv);
                    if !e.open(iv, a_d.get(), d, tag, &mut scratch) {
                        bad.push(i);
                    }
                    i += 1;
                }
                Ok(bad)
            }
        }
    }
}

/// dm-crypt's associated data for batch sector `i`: its 512-byte sector
/// number (little-endian u64, without any IV offset) and then the IV.
struct Ad {
    buf: [u8; 8 + 16],
    len: usize,
}

impl Ad {
    fn new(s0: u64, step: u64, i: u64, iv: &[u8]) -> Ad {
        let mut buf = [0u8; 24];
        buf[..8].copy_from_slice(&s0.wrapping_add(i.wrapping_mul(step)).to_le_bytes());
        let len = 8 + iv.len().min(16);
        buf[8..len].copy_from_slice(&iv[..len - 8]);
        Ad { buf, len }
    }

    fn get(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A LUKS2 batch: no `iv_large_sectors`, so the IV sector is the
/// associated-data sector.
fn geometry(sector_size: usize, s0: u64, step: u64, tuple_len: usize) -> authenc::Geometry {
    authenc::Geometry {
        sector_size,
        ad0: s0,
        iv0: s0,
        step,
        tuple_len,
    }
}

/// An internal size invariant failed (tuple split lengths come from the spec).
fn bug() -> Error {
    Error::Backend("sector AEAD: inconsistent tuple layout".into())
}

#[cfg(test)]
mod aegis128_kat;
#[cfg(test)]
mod tests;
