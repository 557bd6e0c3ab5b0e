use super::aegis128::Aegis128;
use super::*;
use crate::{new_sector_cipher, Backend, CipherSpec};
use hmac::{Hmac, KeyInit, Mac};
use std::time::{Duration, Instant};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Deterministic filler bytes.
fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

const SPECS: [(&str, &str); 6] = [
    ("aes-xts-plain64", "hmac(sha256)"),
    ("aes-xts-plain64", "hmac(sha1)"),
    ("aes-xts-plain64", "hmac(sha512)"),
    ("aegis128-random", "aead"),
    ("chacha20-random", "poly1305"),
    ("aes-gcm-random", "aead"),
];

fn all_specs() -> Vec<AuthSpec> {
    SPECS
        .iter()
        .map(|(e, i)| AuthSpec::parse(e, i).unwrap())
        .collect()
}

/// Every key size each mode accepts.
fn key_sizes(s: &AuthSpec) -> Vec<usize> {
    match (s.encryption(), s.mac_key_bytes()) {
        ("aes-xts-plain64", m) => vec![32 + m, 48 + m, 64 + m],
        ("aes-gcm-random", _) => vec![16, 24, 32],
        _ => vec![s.default_key_bytes()],
    }
}

#[test]
fn aegis128_kernel_vectors() {
    for (n, (k, iv, ad, pt, ct)) in aegis128_kat::VECTORS.iter().enumerate() {
        let (k, iv, ad, pt, ct) = (hex(k), hex(iv), hex(ad), hex(pt), hex(ct));
        let key: [u8; 16] = k.try_into().unwrap();
        let nonce: [u8; 16] = iv.try_into().unwrap();
        let tag_len = ct.len() - pt.len();
        assert!((8..=16).contains(&tag_len), "vector {n}");
        for a in [Aegis128::new(&key), Aegis128::new_portable(&key)] {
            let mut buf = pt.clone();
            let tag = a.seal(&nonce, &ad, &mut buf);
            assert_eq!(buf, ct[..pt.len()], "vector {n} ciphertext");
            assert_eq!(tag[..tag_len], ct[pt.len()..], "vector {n} tag");
            let back = a.open_raw(&nonce, &ad, &mut buf);
            assert_eq!(buf, pt, "vector {n} decryption");
            assert_eq!(back, tag, "vector {n} tag on open");
        }
    }
}

#[test]
fn aegis128_accelerated_matches_portable_and_pairs() {
    let key: [u8; 16] = bytes(16, 1).try_into().unwrap();
    let (fast, soft) = (Aegis128::new(&key), Aegis128::new_portable(&key));
    for len in [0, 1, 15, 16, 17, 100, 512, 4096] {
        for ad_len in [0, 8, 20, 24, 33] {
            let n0: [u8; 16] = bytes(16, 7).try_into().unwrap();
            let n1: [u8; 16] = bytes(16, 9).try_into().unwrap();
            let ad0 = bytes(ad_len, 3);
            let ad1 = bytes(ad_len, 4);
            let p0 = bytes(len, 5);
            let p1 = bytes(len, 6);
            let (mut a, mut b) = (p0.clone(), p0.clone());
            let ta = fast.seal(&n0, &ad0, &mut a);
            let tb = soft.seal(&n0, &ad0, &mut b);
            assert_eq!((&a, ta), (&b, tb), "len {len} ad {ad_len}");
            let (mut x, mut y) = (p0.clone(), p1.clone());
            let [tx, ty] = fast.seal2([&n0, &n1], [&ad0, &ad1], [&mut x, &mut y]);
            assert_eq!((&x, tx), (&a, ta), "pair 0, len {len}");
            let mut z = p1.clone();
            assert_eq!(soft.seal(&n1, &ad1, &mut z), ty, "pair 1, len {len}");
            assert_eq!(y, z);
            let [ox, oy] = fast.open2([&n0, &n1], [&ad0, &ad1], [&mut x, &mut y]);
            assert_eq!((x, y, ox, oy), (p0, p1, tx, ty));
        }
    }
}

/// RFC 8439 §2.8.2 through the ChaCha20-Poly1305 engine that sectors use.
#[test]
fn chacha20poly1305_rfc8439_vector() {
    let key: Vec<u8> = (0x80..0xa0).collect();
    let nonce = hex("070000004041424344454647");
    let aad = hex("50515253c0c1c2c3c4c5c6c7");
    let pt = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip \
for the future, sunscreen would be it."
        .to_vec();
    let ct = hex(
        "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b\
         1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc\
         3ff4def08e4b7a9de576d26586cec64b6116",
    );
    let tag = hex("1ae10b594f09e26a7e902ecbd0600691");
    let e = native::Native::new(spec::Mode::ChaCha20Poly1305, &key).unwrap();
    let mut buf = pt.clone();
    let mut t = [0u8; 16];
    e.seal(&nonce, &aad, &mut buf, &mut t, &mut Vec::new())
        .unwrap();
    assert_eq!(buf, ct);
    assert_eq!(t.to_vec(), tag);
    assert!(e.open(&nonce, &aad, &mut buf, &tag, &mut Vec::new()));
    assert_eq!(buf, pt);
    let mut bad = tag.clone();
    bad[0] ^= 1;
    let mut buf2 = ct.clone();
    assert!(!e.open(&nonce, &aad, &mut buf2, &bad, &mut Vec::new()));
    assert!(
        buf2.iter().all(|&b| b == 0),
        "a failed open wipes the sector"
    );
}

/// The sector framing of the random-IV modes, rebuilt from the RustCrypto
/// crates (and the KAT-checked AEGIS-128): AD = le64(512-byte sector) ‖ IV,
/// nonce = the stored IV, tuple = tag ‖ IV.
#[test]
fn random_iv_framing_matches_independent_aeads() {
    use aes_gcm::aead::{AeadInOut, KeyInit as _};
    for ss in [512usize, 4096] {
        for (enc, integ, key_len) in [
            ("chacha20-random", "poly1305", 32),
            ("aes-gcm-random", "aead", 16),
            ("aes-gcm-random", "aead", 24),
            ("aes-gcm-random", "aead", 32),
            ("aegis128-random", "aead", 16),
        ] {
            let spec = AuthSpec::parse(enc, integ).unwrap();
            let key = bytes(key_len, 0x41);
            let a = SectorAead::new(&spec, &key, ss).unwrap();
            let first = 1_000_003u64;
            let pt = bytes(3 * ss, 0x11);
            let mut data = pt.clone();
            let mut tuples = vec![0u8; 3 * spec.tuple_bytes()];
            a.seal(first, &mut data, &mut tuples).unwrap();
            for i in 0..3 {
                let t = &tuples[i * spec.tuple_bytes()..(i + 1) * spec.tuple_bytes()];
                let (tag, iv) = t.split_at(16);
                let mut ad = ((first + i as u64) * (ss as u64 / 512))
                    .to_le_bytes()
                    .to_vec();
                ad.extend_from_slice(iv);
                let mut want = pt[i * ss..(i + 1) * ss].to_vec();
                let want_tag: Vec<u8> = match (enc, key_len) {
                    ("chacha20-random", _) => {
                        let c = chacha20poly1305::ChaCha20Poly1305::new_from_slice(&key).unwrap();
                        let n = iv.try_into().unwrap();
                        c.encrypt_inout_detached(n, &ad, want.as_mut_slice().into())
                            .unwrap()
                            .to_vec()
                    }
                    ("aes-gcm-random", 16) => {
                        let c = aes_gcm::Aes128Gcm::new_from_slice(&key).unwrap();
                        let n = iv.try_into().unwrap();
                        c.encrypt_inout_detached(n, &ad, want.as_mut_slice().into())
                            .unwrap()
                            .to_vec()
                    }
                    ("aes-gcm-random", 24) => {
                        type G = aes_gcm::AesGcm<aes_gcm::aes::Aes192, aes_gcm::aead::consts::U12>;
                        let c = G::new_from_slice(&key).unwrap();
                        let n = iv.try_into().unwrap();
                        c.encrypt_inout_detached(n, &ad, want.as_mut_slice().into())
                            .unwrap()
                            .to_vec()
                    }
                    ("aes-gcm-random", _) => {
                        let c = aes_gcm::Aes256Gcm::new_from_slice(&key).unwrap();
                        let n = iv.try_into().unwrap();
                        c.encrypt_inout_detached(n, &ad, want.as_mut_slice().into())
                            .unwrap()
                            .to_vec()
                    }
                    _ => {
                        let k: [u8; 16] = key.clone().try_into().unwrap();
                        let n: [u8; 16] = iv.try_into().unwrap();
                        Aegis128::new_portable(&k).seal(&n, &ad, &mut want).to_vec()
                    }
                };
                assert_eq!(
                    data[i * ss..(i + 1) * ss],
                    want[..],
                    "{spec} {ss} sector {i}"
                );
                assert_eq!(tag, &want_tag[..], "{spec} {ss} tag {i}");
            }
        }
    }
}

/// authenc(hmac(H),xts(aes)) rebuilt from independent pieces: the portable
/// XTS sector cipher with the plain64 IV in 512-byte units, and the hmac
/// crate over le64(sector) ‖ IV (16 bytes) ‖ ciphertext, key = xts ‖ mac.
#[test]
fn authenc_matches_xts_plus_hmac() {
    fn hmac_of<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut m = <M as KeyInit>::new_from_slice(key).unwrap();
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }
    for ss in [512usize, 4096] {
        for (integ, mac_len) in [
            ("hmac(sha256)", 32),
            ("hmac(sha1)", 20),
            ("hmac(sha512)", 64),
        ] {
            for xts_len in [32, 64] {
                let spec = AuthSpec::parse("aes-xts-plain64", integ).unwrap();
                let key = bytes(xts_len + mac_len, 0x5a);
                let (xk, mk) = key.split_at(xts_len);
                let a = SectorAead::new(&spec, &key, ss).unwrap();
                let first = 77u64;
                let pt = bytes(4 * ss, 0x23);
                let mut data = pt.clone();
                let mut tuples = vec![0u8; 4 * spec.tuple_bytes()];
                a.seal(first, &mut data, &mut tuples).unwrap();

                let step = (ss / 512) as u64;
                let xts = new_sector_cipher(
                    &CipherSpec::parse("aes-xts-plain64").unwrap(),
                    xk,
                    Backend::Portable,
                )
                .unwrap();
                let mut want = pt.clone();
                xts.encrypt(&mut want, ss, first * step, step).unwrap();
                assert_eq!(data, want, "{spec} {ss} {xts_len}: ciphertext");
                for i in 0..4 {
                    let s512 = (first + i as u64) * step;
                    let mut iv = [0u8; 16];
                    iv[..8].copy_from_slice(&s512.to_le_bytes());
                    let sec = s512.to_le_bytes();
                    let ct = &want[i * ss..(i + 1) * ss];
                    let parts: [&[u8]; 3] = [&sec, &iv, ct];
                    let tag = match mac_len {
                        20 => hmac_of::<Hmac<sha1::Sha1>>(mk, &parts),
                        32 => hmac_of::<Hmac<sha2::Sha256>>(mk, &parts),
                        _ => hmac_of::<Hmac<sha2::Sha512>>(mk, &parts),
                    };
                    assert_eq!(
                        tuples[i * mac_len..(i + 1) * mac_len],
                        tag[..],
                        "{spec} {ss} sector {i}"
                    );
                }
                assert_eq!(
                    a.open(first, &mut data, &tuples).unwrap(),
                    Vec::<usize>::new()
                );
                assert_eq!(data, pt);
            }
        }
    }
}

#[test]
fn round_trip_every_mode_and_key_size() {
    for spec in all_specs() {
        for key_len in key_sizes(&spec) {
            for ss in [512usize, 1024, 4096] {
                let key = bytes(key_len, 0x77);
                let a = SectorAead::new(&spec, &key, ss).unwrap();
                for n in [1usize, 2, 5] {
                    let pt = bytes(n * ss, n as u8);
                    let mut data = pt.clone();
                    let mut tuples = vec![0xeeu8; n * spec.tuple_bytes()];
                    a.seal(42, &mut data, &mut tuples).unwrap();
                    assert_ne!(data, pt, "{spec} encrypts");
                    assert!(
                        a.open(42, &mut data, &tuples).unwrap().is_empty(),
                        "{spec} {ss} {n}"
                    );
                    assert_eq!(data, pt, "{spec} {key_len} {ss} {n}");
                    // Sectors are independent: the middle one alone opens too.
                    if n == 5 {
                        let mut again = pt.clone();
                        a.seal(42, &mut again, &mut tuples).unwrap();
                        let tl = spec.tuple_bytes();
                        let mut one = again[2 * ss..3 * ss].to_vec();
                        let r = a.open(44, &mut one, &tuples[2 * tl..3 * tl]).unwrap();
                        assert!(r.is_empty(), "{spec}: single sector");
                        assert_eq!(one, pt[2 * ss..3 * ss]);
                    }
                }
            }
        }
    }
}

/// Every single-bit flip in one sector's data, tag or stored IV fails
/// that sector alone, wipes it, and leaves its neighbours intact.
#[test]
fn every_bit_flip_fails_exactly_that_sector() {
    let ss = 512;
    for spec in all_specs() {
        let a = SectorAead::new(&spec, &bytes(spec.default_key_bytes(), 3), ss).unwrap();
        let pt = bytes(3 * ss, 9);
        let mut ct = pt.clone();
        let tl = spec.tuple_bytes();
        let mut tuples = vec![0u8; 3 * tl];
        a.seal(10, &mut ct, &mut tuples).unwrap();
        let check = |data: &mut Vec<u8>, tuples: &[u8], what: &str| {
            let bad = a.open(10, data, tuples).unwrap();
            assert_eq!(bad, vec![1], "{spec}: {what}");
            assert!(
                data[ss..2 * ss].iter().all(|&b| b == 0),
                "{spec}: {what} wiped"
            );
            assert_eq!(data[..ss], pt[..ss], "{spec}: {what} sector 0");
            assert_eq!(data[2 * ss..], pt[2 * ss..], "{spec}: {what} sector 2");
        };
        for bit in 0..ss * 8 {
            let mut d = ct.clone();
            d[ss + bit / 8] ^= 1 << (bit % 8);
            check(&mut d, &tuples, &format!("data bit {bit}"));
        }
        for bit in 0..tl * 8 {
            let mut t = tuples.clone();
            t[tl + bit / 8] ^= 1 << (bit % 8);
            let part = if bit / 8 < spec.tag_bytes() {
                "tag"
            } else {
                "IV"
            };
            check(&mut ct.clone(), &t, &format!("{part} bit {bit}"));
        }
        // The sector number is authenticated too.
        let mut d = ct.clone();
        assert_eq!(
            a.open(11, &mut d, &tuples).unwrap(),
            vec![0, 1, 2],
            "{spec}"
        );
        assert!(d.iter().all(|&b| b == 0));
    }
}

#[test]
fn random_ivs_differ_between_seals() {
    for spec in all_specs().into_iter().filter(|s| s.iv_bytes() > 0) {
        let a = SectorAead::new(&spec, &bytes(spec.default_key_bytes(), 1), 4096).unwrap();
        let pt = bytes(2 * 4096, 2);
        let (mut d1, mut d2) = (pt.clone(), pt.clone());
        let mut t1 = vec![0u8; 2 * spec.tuple_bytes()];
        let mut t2 = t1.clone();
        a.seal(5, &mut d1, &mut t1).unwrap();
        a.seal(5, &mut d2, &mut t2).unwrap();
        let tl = spec.tuple_bytes();
        let ivs = |t: &[u8]| -> Vec<Vec<u8>> { t.chunks(tl).map(|c| c[16..].to_vec()).collect() };
        let (i1, i2) = (ivs(&t1), ivs(&t2));
        assert_ne!(i1[0], i2[0], "{spec}");
        assert_ne!(i1[1], i2[1], "{spec}");
        assert_ne!(i1[0], i1[1], "{spec}");
        assert_ne!(d1, d2, "{spec}: same data, different ciphertext");
    }
    // plain64 is deterministic: the same sector seals the same.
    let spec = AuthSpec::parse("aes-xts-plain64", "hmac(sha256)").unwrap();
    let a = SectorAead::new(&spec, &bytes(96, 1), 4096).unwrap();
    let (mut d1, mut d2) = (bytes(4096, 2), bytes(4096, 2));
    let (mut t1, mut t2) = (vec![0u8; 32], vec![0u8; 32]);
    a.seal(5, &mut d1, &mut t1).unwrap();
    a.seal(5, &mut d2, &mut t2).unwrap();
    assert_eq!((d1, t1), (d2, t2));
}

#[test]
fn length_mismatches_are_errors() {
    for spec in all_specs() {
        let a = SectorAead::new(&spec, &bytes(spec.default_key_bytes(), 1), 512).unwrap();
        let tl = spec.tuple_bytes();
        let mut data = vec![0u8; 1024];
        for bad in [0, tl, 2 * tl - 1, 2 * tl + 1, 3 * tl] {
            let mut t = vec![0u8; bad];
            assert!(matches!(
                a.seal(0, &mut data, &mut t),
                Err(Error::InvalidLength { .. })
            ));
            assert!(matches!(
                a.open(0, &mut data, &t),
                Err(Error::InvalidLength { .. })
            ));
        }
        let mut odd = vec![0u8; 700];
        let mut t = vec![0u8; tl];
        assert!(a.seal(0, &mut odd, &mut t).is_err());
        assert!(a.open(0, &mut odd, &t).is_err());
        // An empty batch is fine.
        assert!(a.seal(0, &mut [], &mut []).is_ok());
        assert_eq!(a.open(0, &mut [], &[]).unwrap(), Vec::<usize>::new());
        for ss in [0, 256, 768, 8192] {
            assert!(SectorAead::new(&spec, &bytes(spec.default_key_bytes(), 1), ss).is_err());
        }
        for n in [0, 15, 17, 31, 33, 200] {
            if spec.check_key_bytes(n).is_err() {
                assert!(SectorAead::new(&spec, &bytes(n, 1), 512).is_err());
            }
        }
    }
}

#[test]
fn spec_strings_and_sizes() {
    let t = |e: &str, i: &str| AuthSpec::parse(e, i).unwrap();
    let s = t("aes-xts-plain64", "hmac(sha256)");
    assert_eq!((s.tag_bytes(), s.iv_bytes(), s.tuple_bytes()), (32, 0, 32));
    assert_eq!(s.default_key_bytes(), 96);
    assert_eq!(
        s.kernel_name(),
        "capi:authenc(hmac(sha256),xts(aes))-plain64"
    );
    assert_eq!(s.dm_integrity_arg(), "integrity:32:aead");
    assert!(s.check_key_bytes(64).is_ok() && s.check_key_bytes(96).is_ok());
    assert!(s.check_key_bytes(65).is_err() && s.check_key_bytes(32).is_err());
    let s = t("aes-xts-plain64", "hmac(sha1)");
    assert_eq!((s.tuple_bytes(), s.default_key_bytes()), (20, 84));
    let s = t("aes-xts-plain64", "hmac(sha512)");
    assert_eq!((s.tuple_bytes(), s.default_key_bytes()), (64, 128));
    let s = t("aegis128-random", "aead");
    assert_eq!((s.tag_bytes(), s.iv_bytes(), s.tuple_bytes()), (16, 16, 32));
    assert_eq!(s.kernel_name(), "capi:aegis128-random");
    assert!(s.check_key_bytes(16).is_ok() && s.check_key_bytes(32).is_err());
    let s = t("chacha20-random", "poly1305");
    assert_eq!((s.tag_bytes(), s.iv_bytes(), s.tuple_bytes()), (16, 12, 28));
    assert_eq!(s.kernel_name(), "capi:rfc7539(chacha20,poly1305)-random");
    assert!(s.warning().is_some());
    let s = t("aes-gcm-random", "aead");
    assert_eq!((s.tag_bytes(), s.iv_bytes(), s.tuple_bytes()), (16, 12, 28));
    assert_eq!(s.kernel_name(), "capi:gcm(aes)-random");
    assert!(s.warning().unwrap().contains("96-bit"));
    assert_eq!(s.default_key_bytes(), 32);

    for (e, i) in SPECS {
        let s = t(e, i);
        assert_eq!((s.encryption(), s.integrity()), (e, i));
        s.check_key_bytes(s.default_key_bytes()).unwrap();
    }
    for (c, i, e, h) in [
        (
            "aes-xts-plain64",
            "hmac-sha256",
            "aes-xts-plain64",
            "hmac(sha256)",
        ),
        (
            "aes-xts-plain64",
            "hmac-sha1",
            "aes-xts-plain64",
            "hmac(sha1)",
        ),
        (
            "aes-xts-plain64",
            "hmac-sha512",
            "aes-xts-plain64",
            "hmac(sha512)",
        ),
        ("aegis128-random", "aead", "aegis128-random", "aead"),
        ("chacha20-random", "poly1305", "chacha20-random", "poly1305"),
        ("aes-gcm-random", "aead", "aes-gcm-random", "aead"),
    ] {
        assert_eq!(AuthSpec::from_cli(c, i).unwrap(), t(e, h));
    }
    for (e, i) in [
        ("aes-xts-plain64", "aead"),
        ("aes-xts-plain64", "hmac(md5)"),
        ("aegis128-random", "poly1305"),
        ("aegis256-random", "aead"),
        ("aes-gcm-plain64", "aead"),
        ("aes-xts-random", "hmac(sha256)"),
        ("aes-xts-plain64", "none"),
    ] {
        let err = AuthSpec::parse(e, i).unwrap_err();
        assert!(matches!(err, Error::UnsupportedIntegrity { .. }), "{e} {i}");
        assert!(err.to_string().contains(e), "{err}");
    }
    assert!(AuthSpec::from_cli("aes-xts-plain64", "hmac(sha256)").is_err());
    assert!(AuthSpec::from_cli("aes-xts-plain64", "crc32").is_err());
}

/// A peer that keeps writing an IV of its choosing into the tuples while
/// sectors are sealed (the keep's shared slot) never gets a sector sealed
/// under that IV: the random IVs are used from private memory, for the
/// nonce and for the associated data, never read back from the tuples.
#[test]
fn an_iv_written_into_the_tuples_meanwhile_is_not_sealed_under() {
    for spec in all_specs().into_iter().filter(|s| s.iv_bytes() > 0) {
        let (ss, tb, tl) = (512, spec.tag_bytes(), spec.tuple_bytes());
        let n = 64;
        let a = SectorAead::new(&spec, &bytes(spec.default_key_bytes(), 5), ss).unwrap();
        let mut map = cryptkeep_testkit::SharedMap::new(n * (ss + tl));
        let chosen = vec![0x5au8; tl - tb];
        let iv_fields = (0..n).map(|i| n * ss + i * tl + tb).collect();
        let peer = map.rewrite(iv_fields, chosen.clone());
        let plain = bytes(n * ss, 9);
        // At least 100 rounds, and until the peer has made passes over the
        // IV fields while they ran (a loaded machine may give it no CPU
        // for a while).
        let (before, deadline) = (peer.passes(), Instant::now() + Duration::from_secs(60));
        let ran = |p: &cryptkeep_testkit::Rewriter| p.passes() >= before + 10;
        let mut round = 0;
        while round < 100 || (!ran(&peer) && Instant::now() < deadline) {
            // SAFETY: the peer's writes are what this test is about.
            let buf = unsafe { map.mine() };
            let (data, tuples) = buf.split_at_mut(n * ss);
            data.copy_from_slice(&plain);
            a.seal(0, data, tuples).unwrap();
            for i in 0..n {
                let mut sector = data[i * ss..(i + 1) * ss].to_vec();
                let mut tuple = tuples[i * tl..(i + 1) * tl].to_vec();
                tuple[tb..].copy_from_slice(&chosen);
                let bad = a.open(i as u64, &mut sector, &tuple).unwrap();
                assert_eq!(
                    bad,
                    [0],
                    "{spec:?}: sector {i} of round {round} was sealed under the peer's IV"
                );
            }
            round += 1;
        }
        assert!(ran(&peer), "{spec:?}: the peer barely ran during the seals");
    }
}

#[test]
fn debug_shows_no_key_and_type_is_shareable() {
    fn shareable<T: Send + Sync>() {}
    shareable::<SectorAead>();
    for spec in all_specs() {
        let key = vec![0xabu8; spec.default_key_bytes()];
        let a = SectorAead::new(&spec, &key, 512).unwrap();
        let d = format!("{a:?}");
        assert!(
            d.contains("SectorAead") && !d.contains("ab, ab") && !d.contains("171"),
            "{d}"
        );
    }
}

/// Prints seal/open MiB/s of every mode (4096-byte sectors, 1 MiB batches).
#[test]
#[ignore = "throughput report: cargo test --lib throughput_report -- --ignored --nocapture (optimized build)"]
fn throughput_report() {
    for spec in all_specs() {
        let (s, o) = crate::bench::sector_aead_throughput(&spec, 4096, 512 << 20).unwrap();
        println!(
            "{:<40} seal {s:8.0} MiB/s  open {o:8.0} MiB/s",
            spec.to_string()
        );
    }
}

/// Reference speeds of the pieces (AES-256-GCM implementations, SHA-256).
#[test]
#[ignore = "throughput report of the building blocks (optimized build)"]
fn throughput_pieces() {
    use crate::aead::{AeadAlg, AeadImpl};
    for imp in AeadImpl::ALL {
        if let Ok((s, o)) = crate::bench::aead_throughput(AeadAlg::Aes256Gcm, imp, 4096, 300) {
            println!(
                "aes-256-gcm {:<12} seal {s:8.0} open {o:8.0} MiB/s",
                imp.name()
            );
        }
    }
    let buf = vec![7u8; 1 << 20];
    let t = std::time::Instant::now();
    for _ in 0..200 {
        std::hint::black_box(crate::HashAlg::Sha256.digest(&buf));
    }
    println!("sha256 {:8.0} MiB/s", 200.0 / t.elapsed().as_secs_f64());
}
