use super::*;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const ALGS: [AeadAlg; 3] = [
    AeadAlg::Aes256Gcm,
    AeadAlg::Aes256Siv,
    AeadAlg::XChaCha20Poly1305,
];

fn nonce_for(alg: AeadAlg) -> Vec<u8> {
    match alg {
        AeadAlg::XChaCha20Poly1305 => (0..24).collect(),
        _ => (0..16).collect(),
    }
}

/// NIST GCM spec (McGrew–Viega) test cases 13 and 14: AES-256, zero key, zero 96-bit IV.
#[test]
fn gcm_known_answers() {
    for b in Backend::ALL {
        let a = new_aead(AeadAlg::Aes256Gcm, &[0u8; 32], b).unwrap();
        let t13 = a.seal_vec(&[0u8; 12], &[], &[]).unwrap();
        assert_eq!(t13, hex("530f8afbc74536b9a963b4f1c4cb738b"), "{b}");
        let t14 = a.seal_vec(&[0u8; 12], &[], &[0u8; 16]).unwrap();
        assert_eq!(
            t14,
            hex("cea7403d4d606b6e074ec5d3baf39d18d0d1c8a799996bf0265b98b5d48ab919"),
            "{b}"
        );
        assert_eq!(a.open_vec(&[0u8; 12], &[], &t14).unwrap(), vec![0u8; 16]);
    }
}

/// Both backends agree (two independent implementations), for every length
/// around the AES block and gocryptfs's 4096-byte block.
#[test]
fn backends_agree() {
    let key: Vec<u8> = (0..64usize).map(|i| (i * 7) as u8).collect();
    for alg in ALGS {
        let k = &key[..alg.key_len()];
        let a = new_aead(alg, k, Backend::Accelerated).unwrap();
        let p = new_aead(alg, k, Backend::Portable).unwrap();
        let nonce = nonce_for(alg);
        for len in [0usize, 1, 15, 16, 17, 100, 4095, 4096] {
            let msg: Vec<u8> = (0..len).map(|i| (i * 31) as u8).collect();
            let ad = (len as u64).to_be_bytes();
            let x = a.seal_vec(&nonce, &ad, &msg).unwrap();
            let y = p.seal_vec(&nonce, &ad, &msg).unwrap();
            assert_eq!(x, y, "{alg} len {len}");
            assert_eq!(p.open_vec(&nonce, &ad, &x).unwrap(), msg);
            assert_eq!(a.open_vec(&nonce, &ad, &y).unwrap(), msg);
        }
    }
}

#[test]
fn siv_tag_comes_first_and_is_deterministic() {
    let a = new_aead(AeadAlg::Aes256Siv, &[1u8; 64], Backend::Portable).unwrap();
    let x = a.seal_vec(&[2u8; 16], b"ad", b"hello").unwrap();
    assert_eq!(x, a.seal_vec(&[2u8; 16], b"ad", b"hello").unwrap());
    // Changing the nonce (the last S2V header) changes the SIV.
    let y = a.seal_vec(&[3u8; 16], b"ad", b"hello").unwrap();
    assert_ne!(x[..16], y[..16]);
}

#[test]
fn tampering_is_detected() {
    for alg in ALGS {
        for b in Backend::ALL {
            let a = new_aead(alg, &vec![9u8; alg.key_len()], b).unwrap();
            let nonce = nonce_for(alg);
            let msg = vec![0x5au8; 100];
            let sealed = a.seal_vec(&nonce, b"block 0", &msg).unwrap();
            for i in [0, 50, sealed.len() - 1] {
                let mut bad = sealed.clone();
                bad[i] ^= 0x01;
                assert_eq!(
                    a.open_vec(&nonce, b"block 0", &bad),
                    Err(AuthError),
                    "{alg} {b} byte {i}"
                );
            }
            assert_eq!(a.open_vec(&nonce, b"block 1", &sealed), Err(AuthError));
            let mut n2 = nonce.clone();
            n2[0] ^= 1;
            assert_eq!(a.open_vec(&n2, b"block 0", &sealed), Err(AuthError));
            assert_eq!(
                a.open_vec(&nonce, b"block 0", &sealed[..10]),
                Err(AuthError)
            );
            // Failed opens leave no plaintext behind.
            let mut out = vec![0xffu8; sealed.len() - TAG_LEN];
            let mut bad = sealed.clone();
            bad[0] ^= 1;
            assert!(a.open(&nonce, b"block 0", &bad, &mut out).is_err());
            assert!(out.iter().all(|&x| x == 0));
        }
    }
}

#[test]
fn bad_shapes_are_refused() {
    assert!(new_aead(AeadAlg::Aes256Gcm, &[0u8; 16], Backend::Accelerated).is_err());
    assert!(new_aead(AeadAlg::Aes256Siv, &[0u8; 32], Backend::Portable).is_err());
    let a = new_aead(AeadAlg::Aes256Gcm, &[0u8; 32], Backend::Accelerated).unwrap();
    let mut out = [0u8; 20];
    assert!(a.seal(&[0u8; 8], &[], &[0u8; 4], &mut out).is_err());
    assert!(a.seal(&[0u8; 16], &[], &[0u8; 5], &mut out).is_err());
    let s = new_aead(AeadAlg::Aes256Siv, &[0u8; 64], Backend::Accelerated).unwrap();
    assert_eq!(s.backend(), Backend::Portable);
}

/// The VAES GCM against aws-lc's (independent implementations) on random
/// keys, both nonce lengths, every message length up to 600 bytes and
/// around the 256-byte stride and gocryptfs's block, with associated data
/// from none to several blocks; each opens what the other sealed.
#[cfg(target_arch = "x86_64")]
#[test]
fn vaes_gcm_matches_aws_lc() {
    let mut key = [0u8; 32];
    crate::rand::fill_random(&mut key).unwrap();
    let Some(v) = vaes_gcm::VaesGcm::new(&key) else {
        eprintln!("no VAES/VPCLMULQDQ on this CPU: nothing to compare");
        return;
    };
    let a = accel::AccelAead::new(AeadAlg::Aes256Gcm, &key).unwrap();
    let mut data = vec![0u8; 8192 + 64];
    crate::rand::fill_random(&mut data).unwrap();
    let lens = (0..600).chain([4064, 4080, 4095, 4096, 4097, 8191, 8192]);
    for (i, len) in lens.enumerate() {
        let nonce = &data[i % 50..i % 50 + if i % 2 == 0 { 16 } else { 12 }];
        let ad = &data[100..100 + i % 53];
        let msg = &data[64..64 + len];
        let x = v.seal_vec(nonce, ad, msg).unwrap();
        let y = a.seal_vec(nonce, ad, msg).unwrap();
        assert_eq!(x, y, "len {len} nonce {} ad {}", nonce.len(), ad.len());
        assert_eq!(v.open_vec(nonce, ad, &y).unwrap(), msg, "len {len}");
        assert_eq!(a.open_vec(nonce, ad, &x).unwrap(), msg, "len {len}");
        let mut bad = x.clone();
        bad[(i * 7) % x.len()] ^= 0x80;
        assert_eq!(v.open_vec(nonce, ad, &bad), Err(AuthError), "len {len}");
    }
}

/// Where an implementation opens with the tag checked first, it opens what
/// the other implementations sealed, for every length around the 256-byte
/// stride and gocryptfs's block; a tampered message or a wrong
/// associated data leaves `out` exactly as it was (no plaintext, no key
/// stream, not even zeros written), and shapes `open` refuses it refuses.
#[test]
fn open_verified_opens_and_writes_nothing_on_failure() {
    let mut key = [0u8; 32];
    crate::rand::fill_random(&mut key).unwrap();
    let mut verifying = 0;
    for b in Backend::ALL {
        let a = new_aead(AeadAlg::Aes256Gcm, &key, b).unwrap();
        let p = new_aead(AeadAlg::Aes256Gcm, &key, Backend::Portable).unwrap();
        for (i, len) in (0..300).chain([4095, 4096, 4097]).enumerate() {
            let nonce = [i as u8; 16];
            let nonce = &nonce[..if i % 2 == 0 { 16 } else { 12 }];
            let ad = (len as u64).to_be_bytes();
            let msg: Vec<u8> = (0..len).map(|k| (k * 13 + i) as u8).collect();
            let sealed = p.seal_vec(nonce, &ad, &msg).unwrap();
            let mut out = vec![0x5au8; len];
            let Some(r) = a.open_verified(nonce, &ad, &sealed, &mut out) else {
                break;
            };
            verifying += 1;
            r.unwrap();
            assert_eq!(out, msg, "{b} len {len}");
            let mut bad = sealed.clone();
            bad[(i * 7) % sealed.len()] ^= 0x01;
            let mut out = vec![0x5au8; len];
            assert_eq!(
                a.open_verified(nonce, &ad, &bad, &mut out),
                Some(Err(AuthError))
            );
            assert!(out.iter().all(|&x| x == 0x5a), "{b} len {len}: written");
            let wrong_ad = (len as u64 + 1).to_be_bytes();
            assert_eq!(
                a.open_verified(nonce, &wrong_ad, &sealed, &mut out),
                Some(Err(AuthError))
            );
            assert!(out.iter().all(|&x| x == 0x5a), "{b} len {len}: written");
            let mut short = vec![0u8; len + 1];
            assert_eq!(
                a.open_verified(nonce, &ad, &sealed, &mut short),
                Some(Err(AuthError))
            );
        }
    }
    #[cfg(target_arch = "x86_64")]
    if vaes_gcm::VaesGcm::new(&key).is_some() && super::vaes_preferred() {
        assert!(verifying > 0, "the VAES implementation verifies first");
    }
}
