//! AES-256-GCM (NIST SP 800-38D) on 256-bit VAES and VPCLMULQDQ with
//! AVX2: the accelerated GCM on x86-64 CPUs that have them but no AVX-512
//! (AMD Zen 3, Intel Alder Lake and later), where aws-lc runs its
//! 128-bit AES-NI code. Any nonce length (96-bit nonces take the fast
//! path of the standard, others go through GHASH; gocryptfs uses 128 bits).
//!
//! GHASH is computed as POLYVAL (RFC 8452 Appendix A): blocks byte-reversed,
//! the hash key multiplied by x, and Montgomery reduction, which is what
//! carry-less multiplication computes without bit reflection. Sixteen blocks
//! are multiplied by H^16..H^1 and reduced once. CTR runs sixteen blocks at
//! a time, two per register. Opening hashes and decrypts each 256 bytes
//! together (one pass, the AES and carry-less units busy side by side) and
//! wipes the output when the tag differs, so a caller never sees the
//! plaintext of a message that fails.

use super::{check_open, check_seal, Aead, AeadAlg, AuthError, TAG_LEN};
use crate::{Backend, Error};
use core::arch::x86_64::*;
use zeroize::Zeroize;

/// `hp[i]` = H^(i+1) in POLYVAL's Montgomery form (H = AES_K(0),
/// byte-reversed and multiplied by x): sixteen blocks are hashed with one
/// reduction.
type Powers = [[u8; 16]; 16];

/// Whether this CPU runs [`VaesGcm`] (checked once).
pub(super) fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        is_x86_feature_detected!("aes")
            && is_x86_feature_detected!("pclmulqdq")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("vaes")
            && is_x86_feature_detected!("vpclmulqdq")
    })
}

/// Whether [`VaesGcm`] should be preferred to aws-lc: only where aws-lc
/// has no wide GCM of its own (its VAES code needs AVX-512).
pub(super) fn preferred() -> bool {
    available()
        && !(is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vl"))
}

/// A keyed AES-256-GCM on VAES/VPCLMULQDQ. Construct it only where
/// [`available`] holds.
pub(super) struct VaesGcm {
    /// The AES-256 encryption round keys.
    rk: [[u8; 16]; 15],
    /// The powers of the hash key.
    hp: Powers,
}

impl Drop for VaesGcm {
    fn drop(&mut self) {
        self.rk.zeroize();
        self.hp.zeroize();
    }
}

impl VaesGcm {
    /// Keys AES-256-GCM with a 32-byte key; `None` if this CPU lacks
    /// VAES, VPCLMULQDQ or AVX2.
    pub(super) fn new(key: &[u8; 32]) -> Option<VaesGcm> {
        if !available() {
            return None;
        }
        // SAFETY: `available` checked every feature `init` enables.
        Some(unsafe { init(key) })
    }
}

impl Aead for VaesGcm {
    fn alg(&self) -> AeadAlg {
        AeadAlg::Aes256Gcm
    }

    fn implementation(&self) -> super::AeadImpl {
        super::AeadImpl::VaesAvx2
    }

    fn backend(&self) -> Backend {
        Backend::Accelerated
    }

    fn seal(&self, nonce: &[u8], ad: &[u8], plaintext: &[u8], out: &mut [u8]) -> Result<(), Error> {
        check_seal(AeadAlg::Aes256Gcm, nonce, plaintext, out)?;
        // SAFETY: the constructor checked every feature these functions enable.
        unsafe {
            let j0 = j0(&self.hp, nonce);
            let (ct, tag) = out.split_at_mut(plaintext.len());
            ctr_xor(&self.rk, &j0, 0, plaintext, ct);
            tag.copy_from_slice(&tag_of(&self.rk, &self.hp, &j0, ad, ct));
        }
        Ok(())
    }

    fn open(
        &self,
        nonce: &[u8],
        ad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
    ) -> Result<(), AuthError> {
        check_open(AeadAlg::Aes256Gcm, nonce, sealed, out)?;
        let (ct, tag) = sealed.split_at(sealed.len() - TAG_LEN);
        // SAFETY: the constructor checked every feature these functions enable.
        unsafe {
            let j0 = j0(&self.hp, nonce);
            let want = open_one_pass(&self.rk, &self.hp, &j0, ad, ct, out);
            if !crate::secret::ct_eq(&want, tag) {
                out.zeroize();
                return Err(AuthError);
            }
        }
        Ok(())
    }

    fn open_verified(
        &self,
        nonce: &[u8],
        ad: &[u8],
        sealed: &[u8],
        out: &mut [u8],
    ) -> Option<Result<(), AuthError>> {
        if let Err(e) = check_open(AeadAlg::Aes256Gcm, nonce, sealed, out) {
            return Some(Err(e));
        }
        let (ct, tag) = sealed.split_at(sealed.len() - TAG_LEN);
        // SAFETY: the constructor checked every feature these functions enable.
        unsafe {
            let j0 = j0(&self.hp, nonce);
            if !crate::secret::ct_eq(&tag_of(&self.rk, &self.hp, &j0, ad, ct), tag) {
                return Some(Err(AuthError));
            }
            ctr_xor(&self.rk, &j0, 0, ct, out);
        }
        Some(Ok(()))
    }
}

/// Reads 16 bytes into a register.
#[inline]
#[target_feature(enable = "sse2")]
fn load(b: &[u8; 16]) -> __m128i {
    // SAFETY: `b` is 16 readable bytes; the load is unaligned.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// Writes a register out as 16 bytes.
#[inline]
#[target_feature(enable = "sse2")]
fn store(r: __m128i) -> [u8; 16] {
    let mut b = [0u8; 16];
    // SAFETY: `b` is 16 writable bytes; the store is unaligned.
    unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), r) };
    b
}

/// Reads 32 bytes at the start of `b` (at least 32 long).
#[inline]
#[target_feature(enable = "avx2")]
fn load2(b: &[u8]) -> __m256i {
    assert!(b.len() >= 32);
    // SAFETY: at least 32 readable bytes (asserted); unaligned load.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// Writes 32 bytes at the start of `b` (at least 32 long).
#[inline]
#[target_feature(enable = "avx2")]
fn store2(b: &mut [u8], r: __m256i) {
    assert!(b.len() >= 32);
    // SAFETY: at least 32 writable bytes (asserted); unaligned store.
    unsafe { _mm256_storeu_si256(b.as_mut_ptr().cast(), r) }
}

/// Keys the cipher: round keys, H, and H's powers.
#[target_feature(enable = "aes,pclmulqdq,avx2,vaes,vpclmulqdq")]
fn init(key: &[u8; 32]) -> VaesGcm {
    let mut rk = expand_key(key);
    let h = store(encrypt_block(&rk, _mm_setzero_si128()));
    let h = mul_x(u128::from_be_bytes(h));
    let h1 = load(&h.to_le_bytes());
    let mut hp: Powers = [[0u8; 16]; 16];
    let mut p = h1;
    for slot in hp.iter_mut() {
        *slot = store(p);
        p = gf_mul(p, h1);
    }
    let g = VaesGcm { rk, hp };
    rk.zeroize();
    hp.zeroize();
    g
}

/// mulX_POLYVAL (RFC 8452 Appendix A) of an element read little-endian.
fn mul_x(v: u128) -> u128 {
    let top = v >> 127;
    (v << 1) ^ top ^ (top << 121) ^ (top << 126) ^ (top << 127)
}

/// One step of the AES-256 key schedule (FIPS 197 §5.2) after the
/// assist: the next even round key from `prev` and the assist word.
#[inline]
#[target_feature(enable = "aes")]
fn schedule_even(prev: __m128i, assist: __m128i) -> __m128i {
    let a = _mm_shuffle_epi32::<0xff>(assist);
    let mut k = prev;
    let mut t = _mm_slli_si128::<4>(prev);
    k = _mm_xor_si128(k, t);
    t = _mm_slli_si128::<4>(t);
    k = _mm_xor_si128(k, t);
    t = _mm_slli_si128::<4>(t);
    k = _mm_xor_si128(k, t);
    _mm_xor_si128(k, a)
}

/// The odd round key from the previous odd one and the new even one.
#[inline]
#[target_feature(enable = "aes")]
fn schedule_odd(prev_odd: __m128i, even: __m128i) -> __m128i {
    let a = _mm_shuffle_epi32::<0xaa>(_mm_aeskeygenassist_si128::<0>(even));
    let mut k = prev_odd;
    let mut t = _mm_slli_si128::<4>(prev_odd);
    k = _mm_xor_si128(k, t);
    t = _mm_slli_si128::<4>(t);
    k = _mm_xor_si128(k, t);
    t = _mm_slli_si128::<4>(t);
    k = _mm_xor_si128(k, t);
    _mm_xor_si128(k, a)
}

/// The fifteen AES-256 encryption round keys (FIPS 197 §5.2).
#[target_feature(enable = "aes")]
fn expand_key(key: &[u8; 32]) -> [[u8; 16]; 15] {
    let mut even = load(key[..16].try_into().expect("16 bytes"));
    let mut odd = load(key[16..].try_into().expect("16 bytes"));
    let mut rk = [[0u8; 16]; 15];
    rk[0] = store(even);
    rk[1] = store(odd);
    macro_rules! round {
        ($i:expr, $rcon:expr) => {
            even = schedule_even(even, _mm_aeskeygenassist_si128::<$rcon>(odd));
            rk[$i] = store(even);
            odd = schedule_odd(odd, even);
            rk[$i + 1] = store(odd);
        };
    }
    round!(2, 0x01);
    round!(4, 0x02);
    round!(6, 0x04);
    round!(8, 0x08);
    round!(10, 0x10);
    round!(12, 0x20);
    rk[14] = store(schedule_even(even, _mm_aeskeygenassist_si128::<0x40>(odd)));
    rk
}

/// AES-256 of one block.
#[inline]
#[target_feature(enable = "aes")]
fn encrypt_block(rk: &[[u8; 16]; 15], b: __m128i) -> __m128i {
    let mut x = _mm_xor_si128(b, load(&rk[0]));
    for k in &rk[1..14] {
        x = _mm_aesenc_si128(x, load(k));
    }
    _mm_aesenclast_si128(x, load(&rk[14]))
}

/// Montgomery reduction of the 256-bit product `hi:lo` (POLYVAL's field,
/// x^128 + x^127 + x^126 + x^121 + 1): returns hi:lo · x^-128.
#[inline]
#[target_feature(enable = "pclmulqdq")]
fn reduce(lo: __m128i, hi: __m128i) -> __m128i {
    let poly = _mm_set_epi64x(0xc200_0000_0000_0000u64 as i64, 1);
    let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
    let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
    let t = _mm_clmulepi64_si128::<0x10>(lo, poly);
    let lo = _mm_xor_si128(_mm_shuffle_epi32::<0x4e>(lo), t);
    _mm_xor_si128(lo, hi)
}

/// POLYVAL's dot(a, b) = a · b · x^-128.
#[inline]
#[target_feature(enable = "pclmulqdq")]
fn gf_mul(a: __m128i, b: __m128i) -> __m128i {
    let lo = _mm_clmulepi64_si128::<0x00>(a, b);
    let hi = _mm_clmulepi64_si128::<0x11>(a, b);
    let mid = _mm_xor_si128(
        _mm_clmulepi64_si128::<0x01>(a, b),
        _mm_clmulepi64_si128::<0x10>(a, b),
    );
    reduce(
        _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
        _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
    )
}

/// Byte order reversal within each 128-bit lane (GHASH block ↔ POLYVAL element).
#[inline]
#[target_feature(enable = "avx2")]
fn reverse_mask() -> __m256i {
    _mm256_setr_epi8(
        15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
        5, 4, 3, 2, 1, 0,
    )
}

/// A GHASH block as a POLYVAL element.
#[inline]
#[target_feature(enable = "avx2")]
fn element(b: &[u8; 16]) -> __m128i {
    _mm_shuffle_epi8(load(b), _mm256_castsi256_si128(reverse_mask()))
}

/// GHASH (in POLYVAL form) of `data` zero-padded to whole blocks,
/// continuing from `acc`.
#[target_feature(enable = "pclmulqdq,avx2,vpclmulqdq")]
fn ghash(hp: &Powers, mut acc: __m128i, data: &[u8]) -> __m128i {
    let mut sixteens = data.chunks_exact(256);
    for c in &mut sixteens {
        let mut prod = Product::default();
        prod.add_eight(hp, 16, &c[..128], acc);
        prod.add_eight(hp, 8, &c[128..], _mm_setzero_si128());
        acc = prod.reduce();
    }
    let mut rest = sixteens.remainder();
    if rest.len() >= 128 {
        let mut prod = Product::default();
        prod.add_eight(hp, 8, &rest[..128], acc);
        acc = prod.reduce();
        rest = &rest[128..];
    }
    let h1 = load(&hp[0]);
    for b in rest.chunks(16) {
        let mut block = [0u8; 16];
        block[..b.len()].copy_from_slice(b);
        acc = gf_mul(_mm_xor_si128(acc, element(&block)), h1);
    }
    acc
}

/// H^(i+1) in lane 0 and H^i in lane 1.
#[inline]
#[target_feature(enable = "avx2")]
fn pair(hp: &Powers, i: usize) -> __m256i {
    _mm256_set_m128i(load(&hp[i - 1]), load(&hp[i]))
}

/// Unreduced sums of 128 x 128-bit carry-less products, two lanes each.
struct Product {
    lo: __m256i,
    mid: __m256i,
    hi: __m256i,
}

impl Default for Product {
    fn default() -> Product {
        // SAFETY: AVX is implied by the AVX2 every caller has checked for.
        let z = unsafe { _mm256_setzero_si256() };
        Product {
            lo: z,
            mid: z,
            hi: z,
        }
    }
}

impl Product {
    /// Adds the products of the eight blocks `c` (128 bytes; `acc` added
    /// to the first) with H^top down to H^(top - 7).
    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq")]
    fn add_eight(&mut self, hp: &Powers, top: usize, c: &[u8], acc: __m128i) {
        let rev = reverse_mask();
        let d0 = _mm256_xor_si256(
            _mm256_shuffle_epi8(load2(c), rev),
            _mm256_set_m128i(_mm_setzero_si128(), acc),
        );
        // Lane 0 of each pair is the earlier block: it takes the higher power.
        self.add(d0, pair(hp, top - 1));
        self.add(_mm256_shuffle_epi8(load2(&c[32..]), rev), pair(hp, top - 3));
        self.add(_mm256_shuffle_epi8(load2(&c[64..]), rev), pair(hp, top - 5));
        self.add(_mm256_shuffle_epi8(load2(&c[96..]), rev), pair(hp, top - 7));
    }

    /// Adds the lane-wise products of `d` and `p`.
    #[inline]
    #[target_feature(enable = "avx2,vpclmulqdq")]
    fn add(&mut self, d: __m256i, p: __m256i) {
        self.lo = _mm256_xor_si256(self.lo, _mm256_clmulepi64_epi128::<0x00>(d, p));
        self.hi = _mm256_xor_si256(self.hi, _mm256_clmulepi64_epi128::<0x11>(d, p));
        self.mid = _mm256_xor_si256(self.mid, _mm256_clmulepi64_epi128::<0x01>(d, p));
        self.mid = _mm256_xor_si256(self.mid, _mm256_clmulepi64_epi128::<0x10>(d, p));
    }

    /// Folds both lanes and reduces: the sum of all products, times x^-128.
    #[inline]
    #[target_feature(enable = "avx2,pclmulqdq")]
    fn reduce(&self) -> __m128i {
        let (lo, mid, hi) = (fold(self.lo), fold(self.mid), fold(self.hi));
        reduce(
            _mm_xor_si128(lo, _mm_slli_si128::<8>(mid)),
            _mm_xor_si128(hi, _mm_srli_si128::<8>(mid)),
        )
    }
}

/// The XOR of a register's two lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn fold(x: __m256i) -> __m128i {
    _mm_xor_si128(_mm256_castsi256_si128(x), _mm256_extracti128_si256::<1>(x))
}

/// GHASH's closing block: the two bit lengths, 64 bits each, big-endian.
#[target_feature(enable = "pclmulqdq,avx2")]
fn ghash_lengths(hp: &Powers, acc: __m128i, a_bytes: usize, b_bytes: usize) -> __m128i {
    let mut block = [0u8; 16];
    block[..8].copy_from_slice(&((a_bytes as u64) * 8).to_be_bytes());
    block[8..].copy_from_slice(&((b_bytes as u64) * 8).to_be_bytes());
    gf_mul(_mm_xor_si128(acc, element(&block)), load(&hp[0]))
}

/// The pre-counter block J0 (SP 800-38D §7.1 step 2).
#[target_feature(enable = "pclmulqdq,avx2,vpclmulqdq")]
fn j0(hp: &Powers, nonce: &[u8]) -> [u8; 16] {
    let mut j = [0u8; 16];
    if nonce.len() == 12 {
        j[..12].copy_from_slice(nonce);
        j[15] = 1;
        return j;
    }
    let acc = ghash(hp, _mm_setzero_si128(), nonce);
    let acc = ghash_lengths(hp, acc, 0, nonce.len());
    store(_mm_shuffle_epi8(
        acc,
        _mm256_castsi256_si128(reverse_mask()),
    ))
}

/// The tag: GHASH(ad, ct) XOR AES_K(J0).
#[target_feature(enable = "aes,pclmulqdq,avx2,vpclmulqdq")]
fn tag_of(rk: &[[u8; 16]; 15], hp: &Powers, j0: &[u8; 16], ad: &[u8], ct: &[u8]) -> [u8; 16] {
    let acc = ghash(hp, _mm_setzero_si128(), ad);
    let acc = ghash(hp, acc, ct);
    let acc = ghash_lengths(hp, acc, ad.len(), ct.len());
    let s = _mm_shuffle_epi8(acc, _mm256_castsi256_si128(reverse_mask()));
    store(_mm_xor_si128(s, encrypt_block(rk, load(j0))))
}

/// Counter blocks for GCTR (SP 800-38D §6.5), two per register, already
/// whitened with round key 0, plus the broadcast round keys.
struct Counters {
    k: [__m256i; 15],
    /// The next two counters, counter words in native order.
    ctr: __m256i,
    two: __m256i,
    /// Swaps the counter word (bytes 12..16, big-endian) to native order
    /// and back, so that 32-bit lane adds increment it modulo 2^32.
    swap: __m256i,
}

impl Counters {
    /// Counters from inc32(J0) advanced by `skip` blocks.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn new(rk: &[[u8; 16]; 15], j0: &[u8; 16], skip: u32) -> Counters {
        let swap = _mm256_setr_epi8(
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 14, 13, 12, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
            11, 15, 14, 13, 12,
        );
        let mut k = [_mm256_setzero_si256(); 15];
        for (r, key) in k.iter_mut().zip(rk) {
            *r = _mm256_broadcastsi128_si256(load(key));
        }
        let base = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(load(j0)), swap);
        let (a, b) = (skip.wrapping_add(1) as i32, skip.wrapping_add(2) as i32);
        Counters {
            k,
            ctr: _mm256_add_epi32(base, _mm256_set_epi32(b, 0, 0, 0, a, 0, 0, 0)),
            two: _mm256_set_epi32(2, 0, 0, 0, 2, 0, 0, 0),
            swap,
        }
    }

    /// The next two counter blocks, whitened.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn next(&mut self) -> __m256i {
        let c = _mm256_shuffle_epi8(self.ctr, self.swap);
        self.ctr = _mm256_add_epi32(self.ctr, self.two);
        _mm256_xor_si256(c, self.k[0])
    }

    /// The key stream of the next sixteen blocks.
    #[inline]
    #[target_feature(enable = "avx2,vaes")]
    fn sixteen(&mut self) -> [__m256i; 8] {
        let mut x = [_mm256_setzero_si256(); 8];
        for v in x.iter_mut() {
            *v = self.next();
        }
        aes_rounds_8(&self.k, &mut x);
        x
    }

    /// The key stream of the next two blocks.
    #[inline]
    #[target_feature(enable = "avx2,vaes")]
    fn two_blocks(&mut self) -> __m256i {
        let mut v = self.next();
        for key in &self.k[1..14] {
            v = _mm256_aesenc_epi128(v, *key);
        }
        _mm256_aesenclast_epi128(v, self.k[14])
    }
}

/// `out` = `input` XOR the key stream `ks` (sixteen blocks, 256 bytes each).
#[inline]
#[target_feature(enable = "avx2")]
fn xor_sixteen(ks: &[__m256i; 8], input: &[u8], out: &mut [u8]) {
    for (j, k) in ks.iter().enumerate() {
        store2(
            &mut out[32 * j..],
            _mm256_xor_si256(*k, load2(&input[32 * j..])),
        );
    }
}

/// GCTR (SP 800-38D §6.5) from inc32(J0) advanced by `skip` blocks:
/// `out` = `input` XOR the key stream; the two are equally long.
#[target_feature(enable = "aes,avx2,vaes")]
fn ctr_xor(rk: &[[u8; 16]; 15], j0: &[u8; 16], skip: u32, input: &[u8], out: &mut [u8]) {
    debug_assert_eq!(input.len(), out.len());
    let mut ctr = Counters::new(rk, j0, skip);
    let mut ins = input.chunks_exact(256);
    let mut outs = out.chunks_exact_mut(256);
    for (i, o) in (&mut ins).zip(&mut outs) {
        xor_sixteen(&ctr.sixteen(), i, o);
    }
    let (ins, outs) = (ins.remainder(), outs.into_remainder());
    for (i, o) in ins.chunks(32).zip(outs.chunks_mut(32)) {
        let ks = ctr.two_blocks();
        if i.len() == 32 {
            store2(o, _mm256_xor_si256(ks, load2(i)));
        } else {
            let mut buf = [0u8; 32];
            buf[..i.len()].copy_from_slice(i);
            let x = _mm256_xor_si256(ks, load2(&buf));
            store2(&mut buf, x);
            o.copy_from_slice(&buf[..o.len()]);
            buf.zeroize();
        }
    }
}

/// Decrypts `ct` into `out` and returns the tag `ct` should carry with
/// `ad`, in one pass: each 256 bytes are hashed while their key stream is
/// computed, so the carry-less multiplier and the AES unit work side by
/// side. The caller compares the tag and wipes `out` when it differs.
#[target_feature(enable = "aes,pclmulqdq,avx2,vaes,vpclmulqdq")]
fn open_one_pass(
    rk: &[[u8; 16]; 15],
    hp: &Powers,
    j0: &[u8; 16],
    ad: &[u8],
    ct: &[u8],
    out: &mut [u8],
) -> [u8; 16] {
    debug_assert_eq!(ct.len(), out.len());
    let mut acc = ghash(hp, _mm_setzero_si128(), ad);
    let mut ctr = Counters::new(rk, j0, 0);
    let mut ins = ct.chunks_exact(256);
    let mut outs = out.chunks_exact_mut(256);
    for (i, o) in (&mut ins).zip(&mut outs) {
        let mut prod = Product::default();
        prod.add_eight(hp, 16, &i[..128], acc);
        prod.add_eight(hp, 8, &i[128..], _mm_setzero_si128());
        let ks = ctr.sixteen();
        acc = prod.reduce();
        xor_sixteen(&ks, i, o);
    }
    let done = ct.len() - ins.remainder().len();
    let rest = ins.remainder();
    acc = ghash(hp, acc, rest);
    ctr_xor(rk, j0, (done / 16) as u32, rest, &mut out[done..]);
    let acc = ghash_lengths(hp, acc, ad.len(), ct.len());
    let s = _mm_shuffle_epi8(acc, _mm256_castsi256_si128(reverse_mask()));
    store(_mm_xor_si128(s, encrypt_block(rk, load(j0))))
}

/// AES-256 rounds 1 to 14 on eight registers (sixteen blocks), already
/// whitened with round key 0. Written out in assembly so that the eight
/// chains are interleaved: left to itself the compiler ran them one after
/// another, each round waiting for the one before (four times slower).
#[inline]
#[target_feature(enable = "avx2,vaes")]
fn aes_rounds_8(k: &[__m256i; 15], x: &mut [__m256i; 8]) {
    macro_rules! round {
        ($op:literal, $off:literal) => {
            concat!(
                $op,
                " {x0}, {x0}, ymmword ptr [{k} + ",
                $off,
                "]\n",
                $op,
                " {x1}, {x1}, ymmword ptr [{k} + ",
                $off,
                "]\n",
                $op,
                " {x2}, {x2}, ymmword ptr [{k} + ",
                $off,
                "]\n",
                $op,
                " {x3}, {x3}, ymmword ptr [{k} + ",
                $off,
                "]\n",
                $op,
                " {x4}, {x4}, ymmword ptr [{k} + ",
                $off,
                "]\n",
                $op,
                " {x5}, {x5}, ymmword ptr [{k} + ",
                $off,
                "]\n",
                $op,
                " {x6}, {x6}, ymmword ptr [{k} + ",
                $off,
                "]\n",
                $op,
                " {x7}, {x7}, ymmword ptr [{k} + ",
                $off,
                "]\n",
            )
        };
    }
    // SAFETY: reads the fifteen round keys `k` points to (480 bytes) and
    // changes only the eight named registers; VAES is enabled here.
    unsafe {
        core::arch::asm!(
            round!("vaesenc", "32"),
            round!("vaesenc", "64"),
            round!("vaesenc", "96"),
            round!("vaesenc", "128"),
            round!("vaesenc", "160"),
            round!("vaesenc", "192"),
            round!("vaesenc", "224"),
            round!("vaesenc", "256"),
            round!("vaesenc", "288"),
            round!("vaesenc", "320"),
            round!("vaesenc", "352"),
            round!("vaesenc", "384"),
            round!("vaesenc", "416"),
            round!("vaesenclast", "448"),
            k = in(reg) k.as_ptr(),
            x0 = inout(ymm_reg) x[0],
            x1 = inout(ymm_reg) x[1],
            x2 = inout(ymm_reg) x[2],
            x3 = inout(ymm_reg) x[3],
            x4 = inout(ymm_reg) x[4],
            x5 = inout(ymm_reg) x[5],
            x6 = inout(ymm_reg) x[6],
            x7 = inout(ymm_reg) x[7],
            options(nostack, readonly, preserves_flags),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIPS 197 Appendix C.3: AES-256.
    #[test]
    fn aes256_known_answer() {
        if !available() {
            return;
        }
        let key: [u8; 32] = core::array::from_fn(|i| i as u8);
        let pt: [u8; 16] = core::array::from_fn(|i| (i as u8) * 0x11);
        // SAFETY: `available` checked AES-NI.
        let ct = unsafe { store(encrypt_block(&expand_key(&key), load(&pt))) };
        assert_eq!(
            ct,
            [
                0x8e, 0xa2, 0xb7, 0xca, 0x51, 0x67, 0x45, 0xbf, 0xea, 0xfc, 0x49, 0x90, 0x4b, 0x49,
                0x60, 0x89
            ]
        );
    }

    /// RFC 8452 Appendix A: mulX_POLYVAL (the errata's corrected vector).
    #[test]
    fn mul_x_known_answer() {
        let v = u128::from_le_bytes(
            *b"\x9c\x98\xc0\x4d\xf9\x38\x7d\xed\x82\x81\x75\xa9\x2b\xa6\x52\xd8",
        );
        let want = *b"\x39\x31\x81\x9b\xf2\x71\xfa\xda\x05\x03\xeb\x52\x57\x4c\xa5\x72";
        assert_eq!(mul_x(v).to_le_bytes(), want);
    }

    /// A key stream started `skip` blocks in is the tail of the one
    /// started at the beginning, for each remainder length.
    #[test]
    fn key_stream_skips_whole_blocks() {
        if !available() {
            return;
        }
        let key: [u8; 32] = core::array::from_fn(|i| (i * 7 + 5) as u8);
        let j0 = [0x5au8; 16];
        // SAFETY: `available` checked every feature used.
        unsafe {
            let rk = expand_key(&key);
            let zeros = vec![0u8; 4096 + 48];
            let mut whole = vec![0u8; zeros.len()];
            ctr_xor(&rk, &j0, 0, &zeros, &mut whole);
            for skip in [1usize, 2, 16, 17, 256] {
                let mut tail = vec![0u8; zeros.len() - skip * 16];
                ctr_xor(&rk, &j0, skip as u32, &zeros[skip * 16..], &mut tail);
                assert_eq!(tail, whole[skip * 16..], "skip {skip}");
            }
        }
    }

    /// The counter is the last 32 bits only and wraps (SP 800-38D inc32):
    /// a key stream that crosses 2^32 matches block-by-block AES of the
    /// counters computed one at a time.
    #[test]
    fn counter_wraps_in_32_bits() {
        if !available() {
            return;
        }
        let key: [u8; 32] = core::array::from_fn(|i| (i * 3 + 1) as u8);
        let mut j0 = [0xabu8; 16];
        j0[12..].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        // SAFETY: `available` checked every feature used.
        unsafe {
            let rk = expand_key(&key);
            for len in [31usize, 32, 300, 4096] {
                let zeros = vec![0u8; len];
                let mut ks = vec![0u8; len];
                ctr_xor(&rk, &j0, 0, &zeros, &mut ks);
                for (n, chunk) in ks.chunks(16).enumerate() {
                    let mut cb = j0;
                    let c = 0xffff_fff0u32.wrapping_add(1 + n as u32);
                    cb[12..].copy_from_slice(&c.to_be_bytes());
                    let want = store(encrypt_block(&rk, load(&cb)));
                    assert_eq!(chunk, &want[..chunk.len()], "len {len} block {n}");
                }
            }
        }
    }
}
