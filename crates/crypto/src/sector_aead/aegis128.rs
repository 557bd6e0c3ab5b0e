//! AEGIS-128, the CAESAR final-portfolio version (Wu and Preneel, AEGIS v1.1:
//! five-block state, 16-byte key and nonce, tags of 8 to 16 bytes), as the
//! Linux kernel's `aegis128` implements it (`crypto/aegis128-core.c`).
//! Not AEGIS-128L and not the CFRG draft's variants.
//!
//! State update: `S'[i] = AESRound(S[i-1], S[i])` for i = 1..4 and
//! `S'[0] = AESRound(S[4], S[0]) ^ M`, where `AESRound(x, k)` is one AES
//! encryption round of `x` with round key `k` (x86 `AESENC`). Init:
//! `S = [K^N, C1, C0, K^C0, K^C1]`, then ten updates with K, K^N alternating.
//! Associated data and message are absorbed in 16-byte blocks, a partial
//! last block zero-padded; keystream `S1 ^ S4 ^ (S2 & S3)`. Final: seven
//! updates with `S3 ^ (le64(ad_bits) ‖ le64(msg_bits))`; tag = xor of all
//! five blocks.
//!
//! x86-64 CPUs with AES-NI run [`ni`]; everything else runs the portable
//! code on `aes::hazmat::cipher_round`. Two sectors of equal length are
//! processed interleaved ([`Aegis128::seal2`], [`Aegis128::open2`]) because one
//! AEGIS update waits on the previous one: two independent states keep the
//! AES unit busy.

use zeroize::{Zeroize, ZeroizeOnDrop};

/// The constant C0 (Fibonacci bytes mod 256), little-endian words as the kernel has them.
const C0: [u8; 16] = [
    0x00, 0x01, 0x01, 0x02, 0x03, 0x05, 0x08, 0x0d, 0x15, 0x22, 0x37, 0x59, 0x90, 0xe9, 0x79, 0x62,
];
/// The constant C1.
const C1: [u8; 16] = [
    0xdb, 0x3d, 0x18, 0x55, 0x6d, 0xc2, 0x2f, 0xf1, 0x20, 0x11, 0x31, 0x42, 0x73, 0xb5, 0x28, 0xdd,
];

/// A keyed AEGIS-128. The key is wiped on drop.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub(crate) struct Aegis128 {
    key: [u8; 16],
    #[zeroize(skip)]
    ni: bool,
}

impl Aegis128 {
    /// Keys AEGIS-128; uses AES-NI where this CPU has it.
    pub(crate) fn new(key: &[u8; 16]) -> Aegis128 {
        #[cfg(target_arch = "x86_64")]
        let ni = std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("sse2");
        #[cfg(not(target_arch = "x86_64"))]
        let ni = false;
        Aegis128 { key: *key, ni }
    }

    /// The portable code only (for cross-checks).
    #[cfg(test)]
    pub(crate) fn new_portable(key: &[u8; 16]) -> Aegis128 {
        Aegis128 {
            key: *key,
            ni: false,
        }
    }

    /// Encrypts `data` in place with `nonce` and associated data `ad`;
    /// returns the full 16-byte tag (a shorter tag is its prefix).
    pub(crate) fn seal(&self, nonce: &[u8; 16], ad: &[u8], data: &mut [u8]) -> [u8; 16] {
        #[cfg(target_arch = "x86_64")]
        if self.ni {
            // SAFETY: `ni` is set only where the CPU has AES-NI and SSE2.
            return unsafe { ni::seal(&self.key, nonce, ad, data) };
        }
        soft::seal(&self.key, nonce, ad, data)
    }

    /// Decrypts `data` in place and returns the full 16-byte tag it
    /// computed; the caller compares it and wipes `data` on mismatch.
    pub(crate) fn open_raw(&self, nonce: &[u8; 16], ad: &[u8], data: &mut [u8]) -> [u8; 16] {
        #[cfg(target_arch = "x86_64")]
        if self.ni {
            // SAFETY: `ni` is set only where the CPU has AES-NI and SSE2.
            return unsafe { ni::open(&self.key, nonce, ad, data) };
        }
        soft::open(&self.key, nonce, ad, data)
    }

    /// [`Aegis128::seal`] of two messages of equal length at once.
    pub(crate) fn seal2(
        &self,
        nonces: [&[u8; 16]; 2],
        ads: [&[u8]; 2],
        data: [&mut [u8]; 2],
    ) -> [[u8; 16]; 2] {
        #[cfg(target_arch = "x86_64")]
        if self.ni && data[0].len() == data[1].len() {
            // SAFETY: `ni` is set only where the CPU has AES-NI and SSE2.
            return unsafe { ni::crypt2::<true>(&self.key, nonces, ads, data) };
        }
        let [d0, d1] = data;
        [
            self.seal(nonces[0], ads[0], d0),
            self.seal(nonces[1], ads[1], d1),
        ]
    }

    /// [`Aegis128::open_raw`] of two messages of equal length at once.
    pub(crate) fn open2(
        &self,
        nonces: [&[u8; 16]; 2],
        ads: [&[u8]; 2],
        data: [&mut [u8]; 2],
    ) -> [[u8; 16]; 2] {
        #[cfg(target_arch = "x86_64")]
        if self.ni && data[0].len() == data[1].len() {
            // SAFETY: `ni` is set only where the CPU has AES-NI and SSE2.
            return unsafe { ni::crypt2::<false>(&self.key, nonces, ads, data) };
        }
        let [d0, d1] = data;
        [
            self.open_raw(nonces[0], ads[0], d0),
            self.open_raw(nonces[1], ads[1], d1),
        ]
    }
}

/// The final block: bit lengths of associated data and message, little-endian.
fn lengths(ad_len: usize, msg_len: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&((ad_len as u64).wrapping_mul(8)).to_le_bytes());
    b[8..].copy_from_slice(&((msg_len as u64).wrapping_mul(8)).to_le_bytes());
    b
}

/// Portable AEGIS-128 on `aes::hazmat::cipher_round`.
mod soft {
    use super::{lengths, C0, C1};
    use aes::hazmat::cipher_round;
    use aes::Block;
    use zeroize::Zeroize;

    type S = [[u8; 16]; 5];

    fn xor(a: &[u8; 16], b: &[u8; 16]) -> [u8; 16] {
        let mut r = [0u8; 16];
        for i in 0..16 {
            r[i] = a[i] ^ b[i];
        }
        r
    }

    /// `AESRound(x, k)`.
    fn round(x: &[u8; 16], k: &[u8; 16]) -> [u8; 16] {
        let mut b = Block::from(*x);
        cipher_round(&mut b, &Block::from(*k));
        b.into()
    }

    fn update(s: &mut S, m: &[u8; 16]) {
        let t = s[4];
        s[4] = round(&s[3], &s[4]);
        s[3] = round(&s[2], &s[3]);
        s[2] = round(&s[1], &s[2]);
        s[1] = round(&s[0], &s[1]);
        s[0] = xor(&round(&t, &s[0]), m);
    }

    fn keystream(s: &S) -> [u8; 16] {
        let mut z = xor(&s[1], &s[4]);
        for i in 0..16 {
            z[i] ^= s[2][i] & s[3][i];
        }
        z
    }

    fn init(key: &[u8; 16], nonce: &[u8; 16], ad: &[u8]) -> S {
        let kn = xor(key, nonce);
        let mut s = [kn, C1, C0, xor(key, &C0), xor(key, &C1)];
        for _ in 0..5 {
            update(&mut s, key);
            update(&mut s, &kn);
        }
        for c in ad.chunks(16) {
            let mut b = [0u8; 16];
            b[..c.len()].copy_from_slice(c);
            update(&mut s, &b);
        }
        s
    }

    fn finish(mut s: S, ad_len: usize, msg_len: usize) -> [u8; 16] {
        let t = xor(&s[3], &lengths(ad_len, msg_len));
        for _ in 0..7 {
            update(&mut s, &t);
        }
        let mut tag = s[0];
        for b in &s[1..] {
            tag = xor(&tag, b);
        }
        s.zeroize();
        tag
    }

    pub(super) fn seal(key: &[u8; 16], nonce: &[u8; 16], ad: &[u8], data: &mut [u8]) -> [u8; 16] {
        let mut s = init(key, nonce, ad);
        let n = data.len();
        for c in data.chunks_mut(16) {
            let z = keystream(&s);
            let mut p = [0u8; 16];
            p[..c.len()].copy_from_slice(c);
            update(&mut s, &p);
            for (i, b) in c.iter_mut().enumerate() {
                *b ^= z[i];
            }
        }
        finish(s, ad.len(), n)
    }

    pub(super) fn open(key: &[u8; 16], nonce: &[u8; 16], ad: &[u8], data: &mut [u8]) -> [u8; 16] {
        let mut s = init(key, nonce, ad);
        let n = data.len();
        for c in data.chunks_mut(16) {
            let z = keystream(&s);
            let mut p = [0u8; 16];
            for (i, b) in c.iter_mut().enumerate() {
                *b ^= z[i];
                p[i] = *b;
            }
            update(&mut s, &p);
        }
        finish(s, ad.len(), n)
    }
}

/// AEGIS-128 on AES-NI.
#[cfg(target_arch = "x86_64")]
mod ni {
    use super::{lengths, C0, C1};
    use core::arch::x86_64::*;

    type S = [__m128i; 5];

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(b: &[u8; 16]) -> __m128i {
        // SAFETY: `b` is 16 readable bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn store(v: __m128i) -> [u8; 16] {
        let mut b = [0u8; 16];
        // SAFETY: `b` is 16 writable bytes; the store is unaligned.
        unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), v) };
        b
    }

    /// Loads up to 16 bytes, zero-padded.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn load_part(c: &[u8]) -> __m128i {
        if let Ok(b) = <&[u8; 16]>::try_from(c) {
            return load(b);
        }
        let mut b = [0u8; 16];
        b[..c.len()].copy_from_slice(c);
        load(&b)
    }

    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn update(s: &mut S, m: __m128i) {
        let t = s[4];
        s[4] = _mm_aesenc_si128(s[3], s[4]);
        s[3] = _mm_aesenc_si128(s[2], s[3]);
        s[2] = _mm_aesenc_si128(s[1], s[2]);
        s[1] = _mm_aesenc_si128(s[0], s[1]);
        s[0] = _mm_xor_si128(_mm_aesenc_si128(t, s[0]), m);
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn keystream(s: &S) -> __m128i {
        _mm_xor_si128(_mm_xor_si128(s[1], s[4]), _mm_and_si128(s[2], s[3]))
    }

    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn init(key: &[u8; 16], nonce: &[u8; 16], ad: &[u8]) -> S {
        let k = load(key);
        let kn = _mm_xor_si128(k, load(nonce));
        let c0 = load(&C0);
        let c1 = load(&C1);
        let mut s = [kn, c1, c0, _mm_xor_si128(k, c0), _mm_xor_si128(k, c1)];
        for _ in 0..5 {
            update(&mut s, k);
            update(&mut s, kn);
        }
        for c in ad.chunks(16) {
            update(&mut s, load_part(c));
        }
        s
    }

    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn finish(mut s: S, ad_len: usize, msg_len: usize) -> [u8; 16] {
        let t = _mm_xor_si128(s[3], load(&lengths(ad_len, msg_len)));
        for _ in 0..7 {
            update(&mut s, t);
        }
        let tag = _mm_xor_si128(
            _mm_xor_si128(_mm_xor_si128(s[0], s[1]), _mm_xor_si128(s[2], s[3])),
            s[4],
        );
        // The state can be run back to the key: leave none of it behind
        // (black_box keeps the stores from being dropped as dead).
        for r in s.iter_mut() {
            *r = _mm_setzero_si128();
        }
        core::hint::black_box(&mut s);
        store(tag)
    }

    /// Encrypts (`SEAL`) or decrypts one 16-byte block in place, or a
    /// shorter last one, and absorbs its plaintext.
    #[inline]
    #[target_feature(enable = "aes,sse2")]
    fn block<const SEAL: bool>(s: &mut S, c: &mut [u8]) {
        let z = keystream(s);
        if let Ok(b) = <&mut [u8; 16]>::try_from(&mut *c) {
            let x = load(b);
            let y = _mm_xor_si128(x, z);
            *b = store(y);
            update(s, if SEAL { x } else { y });
            return;
        }
        let mut buf = [0u8; 16];
        buf[..c.len()].copy_from_slice(c);
        let y = store(_mm_xor_si128(load(&buf), z));
        c.copy_from_slice(&y[..c.len()]);
        if SEAL {
            update(s, load(&buf));
        } else {
            let mut p = [0u8; 16];
            p[..c.len()].copy_from_slice(c);
            update(s, load(&p));
        }
    }

    #[target_feature(enable = "aes,sse2")]
    pub(super) fn seal(key: &[u8; 16], nonce: &[u8; 16], ad: &[u8], data: &mut [u8]) -> [u8; 16] {
        let mut s = init(key, nonce, ad);
        let n = data.len();
        for c in data.chunks_mut(16) {
            block::<true>(&mut s, c);
        }
        finish(s, ad.len(), n)
    }

    #[target_feature(enable = "aes,sse2")]
    pub(super) fn open(key: &[u8; 16], nonce: &[u8; 16], ad: &[u8], data: &mut [u8]) -> [u8; 16] {
        let mut s = init(key, nonce, ad);
        let n = data.len();
        for c in data.chunks_mut(16) {
            block::<false>(&mut s, c);
        }
        finish(s, ad.len(), n)
    }

    /// Two messages of equal length, their updates interleaved.
    #[target_feature(enable = "aes,sse2")]
    pub(super) fn crypt2<const SEAL: bool>(
        key: &[u8; 16],
        nonces: [&[u8; 16]; 2],
        ads: [&[u8]; 2],
        data: [&mut [u8]; 2],
    ) -> [[u8; 16]; 2] {
        let mut a = init(key, nonces[0], ads[0]);
        let mut b = init(key, nonces[1], ads[1]);
        let [d0, d1] = data;
        let n = d0.len();
        for (x, y) in d0.chunks_mut(16).zip(d1.chunks_mut(16)) {
            block::<SEAL>(&mut a, x);
            block::<SEAL>(&mut b, y);
        }
        [finish(a, ads[0].len(), n), finish(b, ads[1].len(), n)]
    }
}
