//! XTS-AES (IEEE 1619, NIST SP 800-38E) for data units that are whole blocks
//! (sectors are multiples of 16 bytes, so no ciphertext stealing).
//!
//! Blocks are processed in windows that may span several sectors, so short
//! sectors still fill the AES pipeline.

use super::aes_key::{as_blocks, xor_u128, AesKey};
use aes::Block;

/// Blocks per AES batch: a multiple of every backend's parallel width.
const WINDOW: usize = 512;

/// Multiplies a tweak by α in GF(2^128), IEEE 1619 §5.2 byte order (the tweak
/// read as a little-endian 128-bit integer; reduce with 0x87).
#[inline(always)]
fn mul_alpha(t: u128) -> u128 {
    let carry = (t >> 127) as u8;
    (t << 1) ^ u128::from(carry * 0x87)
}

/// Multiplies a tweak by α^8: shift by a byte and fold the byte shifted out
/// back in times x^7 + x^2 + x + 1 (a carry-less product of a sparse
/// polynomial is a XOR of shifts, so this stays constant-time).
#[inline(always)]
fn mul_alpha8(t: u128) -> u128 {
    let (lo, hi) = (t as u64, (t >> 64) as u64);
    let b = hi >> 56;
    let lo2 = (lo << 8) ^ (b << 7) ^ (b << 2) ^ (b << 1) ^ b;
    let hi2 = (hi << 8) | (lo >> 56);
    (u128::from(hi2) << 64) | u128::from(lo2)
}

/// XORs the consecutive tweaks `t, t·α, t·α², …` into `blocks`, records
/// them in `out` (same length), and returns the tweak after the last. Eight
/// chains stepping by α^8 run side by side so the CPU is not waiting on one
/// serial chain of shifts.
#[inline(always)]
fn apply_tweaks(mut t: u128, blocks: &mut [Block], out: &mut [u128]) -> u128 {
    let n = out.len();
    let head = n.min(8);
    let mut lanes = [0u128; 8];
    for ((slot, lane), b) in out[..head]
        .iter_mut()
        .zip(lanes.iter_mut())
        .zip(blocks.iter_mut())
    {
        *slot = t;
        *lane = t;
        xor_u128(b, t);
        t = mul_alpha(t);
    }
    if n <= 8 {
        return t;
    }
    let mut chunks = out[8..].chunks_exact_mut(8);
    let mut bchunks = blocks[8..].chunks_exact_mut(8);
    for (oc, bc) in (&mut chunks).zip(&mut bchunks) {
        for ((o, b), lane) in oc.iter_mut().zip(bc.iter_mut()).zip(lanes.iter_mut()) {
            *lane = mul_alpha8(*lane);
            *o = *lane;
            xor_u128(b, *lane);
        }
    }
    for ((o, b), lane) in chunks
        .into_remainder()
        .iter_mut()
        .zip(bchunks.into_remainder().iter_mut())
        .zip(lanes.iter_mut())
    {
        *lane = mul_alpha8(*lane);
        *o = *lane;
        xor_u128(b, *lane);
    }
    mul_alpha(out[n - 1])
}

/// The data key (key1) and tweak key (key2).
pub(crate) struct XtsKeys {
    data: AesKey,
    tweak: AesKey,
}

impl XtsKeys {
    /// Splits an XTS key (32, 48 or 64 bytes) into its two halves, data key first.
    pub(crate) fn new(key: &[u8]) -> Result<XtsKeys, crate::Error> {
        let (k1, k2) = key.split_at(key.len() / 2);
        Ok(XtsKeys {
            data: AesKey::new(k1)?,
            tweak: AesKey::new(k2)?,
        })
    }

    /// Encrypts (or decrypts) whole sectors of `sector_size` bytes in place;
    /// `iv_of(i)` is the 16-byte IV (tweak before encryption under key2) of
    /// buffer sector `i`.
    pub(crate) fn crypt(
        &self,
        buf: &mut [u8],
        sector_size: usize,
        iv_of: impl Fn(usize) -> [u8; 16],
        encrypt: bool,
    ) {
        let per_sector = sector_size / 16;
        // Encrypted start tweaks of the sectors that begin in a window.
        let mut starts = [Block::default(); WINDOW];
        let mut tweaks = [0u128; WINDOW];
        let mut tweak = 0u128;
        // Blocks left in the current sector (0: the next block starts one).
        let mut left = 0usize;
        for (w, window) in as_blocks(buf).chunks_mut(WINDOW).enumerate() {
            let first_block = w * WINDOW;
            let first_new = first_block.div_ceil(per_sector);
            let end_new = (first_block + window.len() - 1) / per_sector + 1;
            let n_new = end_new.saturating_sub(first_new);
            for (j, s) in starts.iter_mut().enumerate().take(n_new) {
                *s = Block::from(iv_of(first_new + j));
            }
            self.tweak.encrypt_blocks(&mut starts[..n_new]);
            let mut fresh = starts[..n_new].iter();
            let n = window.len();
            let mut k = 0;
            while k < n {
                if left == 0 {
                    tweak = fresh.next().map_or(0, |s| u128::from_le_bytes(s.0));
                    left = per_sector;
                }
                let m = left.min(n - k);
                tweak = apply_tweaks(tweak, &mut window[k..k + m], &mut tweaks[k..k + m]);
                left -= m;
                k += m;
            }
            if encrypt {
                self.data.encrypt_blocks(window);
            } else {
                self.data.decrypt_blocks(window);
            }
            for (b, slot) in window.iter_mut().zip(tweaks.iter()) {
                xor_u128(b, *slot);
            }
        }
        zeroize::Zeroize::zeroize(&mut tweaks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alpha8_is_eight_alphas() {
        let mut x = 0x8000_0000_0000_0000_0123_4567_89ab_cdefu128 | (0xd5u128 << 120);
        for _ in 0..100 {
            let mut y = x;
            for _ in 0..8 {
                y = mul_alpha(y);
            }
            assert_eq!(mul_alpha8(x), y);
            for len in [0usize, 1, 7, 8, 9, 16, 21, 64] {
                let mut seq = vec![0u128; len];
                let mut blocks = vec![Block::default(); len];
                let next = apply_tweaks(x, &mut blocks, &mut seq);
                let mut z = x;
                for (v, b) in seq.iter().zip(&blocks) {
                    assert_eq!(*v, z);
                    assert_eq!(u128::from_le_bytes(b.0), z);
                    z = mul_alpha(z);
                }
                assert_eq!(next, z, "{len}");
            }
            x = x.rotate_left(13) ^ y;
        }
    }

    #[test]
    fn alpha_carries() {
        assert_eq!(mul_alpha(1), 2);
        assert_eq!(mul_alpha(1u128 << 127), 0x87);
        assert_eq!(mul_alpha((1u128 << 127) | 1), 0x85);
    }

    #[test]
    fn ieee1619_vector_1() {
        let x = XtsKeys::new(&[0u8; 32]).unwrap();
        let mut buf = [0u8; 32];
        x.crypt(&mut buf, 32, |_| [0u8; 16], true);
        let want = [
            0x91, 0x7c, 0xf6, 0x9e, 0xbd, 0x68, 0xb2, 0xec, 0x9b, 0x9f, 0xe9, 0xa3, 0xea, 0xdd,
            0xa6, 0x92, 0xcd, 0x43, 0xd2, 0xf5, 0x95, 0x98, 0xed, 0x85, 0x8c, 0x02, 0xc2, 0x65,
            0x2f, 0xbf, 0x92, 0x2e,
        ];
        assert_eq!(buf, want);
        x.crypt(&mut buf, 32, |_| [0u8; 16], false);
        assert_eq!(buf, [0u8; 32]);
    }

    #[test]
    fn windows_across_sectors_equal_one_by_one() {
        let key: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37) ^ 5).collect();
        let x = XtsKeys::new(&key).unwrap();
        for sector in [16usize, 48, 512, 2064, 4096] {
            let n = 7;
            let pt: Vec<u8> = (0..sector * n).map(|i| (i * 31 % 251) as u8).collect();
            let iv = |i: usize| {
                let mut v = [0u8; 16];
                v[..8].copy_from_slice(&(i as u64 * 3 + 1).to_le_bytes());
                v
            };
            let mut all = pt.clone();
            x.crypt(&mut all, sector, iv, true);
            let mut one = pt.clone();
            for (i, s) in one.chunks_mut(sector).enumerate() {
                x.crypt(s, sector, |_| iv(i), true);
            }
            assert_eq!(all, one, "sector {sector}");
            x.crypt(&mut all, sector, iv, false);
            assert_eq!(all, pt);
        }
    }
}
