//! The two backends must agree byte for byte on random data for every
//! supported spec, key size, sector size, IV start and IV step; and the IV
//! semantics hold across call boundaries.

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};
use cryptkeep_testkit::random_key;

const SPECS: [&str; 9] = [
    "aes-xts-plain64",
    "aes-xts-plain",
    "aes-xts-plain64be",
    "aes-xts-essiv:sha256",
    "aes-cbc-essiv:sha256",
    "aes-cbc-plain64",
    "aes-cbc-plain",
    "aes-cbc-null",
    "aes-ecb",
];

fn key_sizes(spec: &CipherSpec) -> &'static [usize] {
    match spec.mode {
        cryptkeep_crypto::spec::ChainMode::Xts => &[32, 48, 64],
        _ => &[16, 24, 32],
    }
}

#[test]
fn backends_agree_everywhere() {
    let starts = [0u64, 1, 7, 0xffff_fffe, 0x1_0000_0003, u64::MAX - 2];
    for s in SPECS {
        let spec = CipherSpec::parse(s).unwrap();
        for &klen in key_sizes(&spec) {
            let key = random_key(klen);
            let acc = new_sector_cipher(&spec, &key, Backend::Accelerated).unwrap();
            let por = new_sector_cipher(&spec, &key, Backend::Portable).unwrap();
            assert_eq!(por.backend(), Backend::Portable);
            for sector_size in [16usize, 512, 1024, 4096] {
                // 11 sectors: more than one interleaved CBC group of 8.
                let pt = random_key(sector_size * 11);
                for &start in &starts {
                    for step in [1u64, 8] {
                        let what = format!(
                            "{s} key {klen} sector {sector_size} start {start} step {step} ({} vs {})",
                            acc.implementation(),
                            por.implementation()
                        );
                        let mut a = pt.clone();
                        let mut p = pt.clone();
                        acc.encrypt(&mut a, sector_size, start, step).unwrap();
                        por.encrypt(&mut p, sector_size, start, step).unwrap();
                        assert_eq!(a, p, "encrypt {what}");
                        assert_ne!(a, pt, "encrypt changed nothing: {what}");
                        // Cross-decrypt: each backend reads the other's output.
                        acc.decrypt(&mut p, sector_size, start, step).unwrap();
                        por.decrypt(&mut a, sector_size, start, step).unwrap();
                        assert_eq!(a, pt, "decrypt {what}");
                        assert_eq!(p, pt, "decrypt {what}");
                    }
                }
            }
        }
    }
}

#[test]
fn batch_equals_sector_by_sector() {
    for s in SPECS {
        let spec = CipherSpec::parse(s).unwrap();
        let key = random_key(*key_sizes(&spec).last().unwrap());
        for backend in Backend::ALL {
            let c = new_sector_cipher(&spec, &key, backend).unwrap();
            let pt = random_key(4096 * 10);
            let mut batch = pt.clone();
            c.encrypt(&mut batch, 4096, 1000, 8).unwrap();
            let mut single = pt.clone();
            for (i, sec) in single.chunks_mut(4096).enumerate() {
                c.encrypt(sec, 4096, 1000 + 8 * i as u64, 8).unwrap();
            }
            assert_eq!(batch, single, "{s} {backend}");
        }
    }
}

#[test]
fn iv_modes_differ_where_the_kernel_says() {
    let key = random_key(64);
    let mk = |s: &str| {
        new_sector_cipher(&CipherSpec::parse(s).unwrap(), &key, Backend::Portable).unwrap()
    };
    let (plain, plain64, be) = (
        mk("aes-xts-plain"),
        mk("aes-xts-plain64"),
        mk("aes-xts-plain64be"),
    );
    let pt = random_key(512);
    let enc = |c: &dyn cryptkeep_crypto::SectorCipher, n: u64| {
        let mut b = pt.clone();
        c.encrypt(&mut b, 512, n, 1).unwrap();
        b
    };
    // plain truncates to 32 bits; plain64 does not.
    assert_eq!(enc(&*plain, (1 << 32) + 5), enc(&*plain, 5));
    assert_ne!(enc(&*plain64, (1 << 32) + 5), enc(&*plain64, 5));
    // Below 2^32 plain and plain64 agree; plain64be does not.
    assert_eq!(enc(&*plain, 77), enc(&*plain64, 77));
    assert_ne!(enc(&*be, 77), enc(&*plain64, 77));
    // Sector 0: every IV is zero, so all three agree.
    assert_eq!(enc(&*be, 0), enc(&*plain64, 0));
    // Decrypting at the wrong sector does not give the plaintext back.
    let mut c = enc(&*plain64, 9);
    plain64.decrypt(&mut c, 512, 10, 1).unwrap();
    assert_ne!(c, pt);
}

#[test]
fn concurrent_use_is_consistent() {
    let key = random_key(64);
    for backend in Backend::ALL {
        let c = std::sync::Arc::new(
            new_sector_cipher(&CipherSpec::AES_XTS_PLAIN64, &key, backend).unwrap(),
        );
        let pt = random_key(4096 * 16);
        let mut want = pt.clone();
        c.encrypt(&mut want, 4096, 0, 8).unwrap();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (c, pt, want) = (c.clone(), pt.clone(), want.clone());
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let mut b = pt.clone();
                        c.encrypt(&mut b, 4096, 0, 8).unwrap();
                        assert_eq!(b, want);
                        c.decrypt(&mut b, 4096, 0, 8).unwrap();
                        assert_eq!(b, pt);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
}

/// Flipping one ciphertext bit: XTS garbles exactly that 16-byte block of
/// the sector; CBC garbles that block and flips the same bit of the next one.
/// (These modes do not authenticate; this checks their structure.)
#[test]
fn tampering_spreads_as_the_mode_says() {
    let key = random_key(64);
    for backend in Backend::ALL {
        let xts = new_sector_cipher(&CipherSpec::AES_XTS_PLAIN64, &key, backend).unwrap();
        let cbc = new_sector_cipher(
            &CipherSpec::parse("aes-cbc-plain64").unwrap(),
            &key[..32],
            backend,
        )
        .unwrap();
        let pt = random_key(4096);
        for (c, is_cbc) in [(&xts, false), (&cbc, true)] {
            let mut ct = pt.clone();
            c.encrypt(&mut ct, 512, 100, 1).unwrap();
            ct[512 + 5 * 16 + 3] ^= 0x10; // sector 1, block 5, byte 3
            c.decrypt(&mut ct, 512, 100, 1).unwrap();
            let bad: Vec<usize> = (0..4096).filter(|&i| ct[i] != pt[i]).collect();
            let first = 512 + 5 * 16;
            assert!(bad.iter().all(|&i| i >= first), "{backend} cbc={is_cbc}");
            assert!(bad.iter().filter(|&&i| i < first + 16).count() > 8);
            if is_cbc {
                let next: Vec<usize> = bad.iter().copied().filter(|&i| i >= first + 16).collect();
                assert_eq!(next, vec![first + 16 + 3], "{backend}");
                assert_eq!(ct[first + 19] ^ pt[first + 19], 0x10);
            } else {
                assert!(bad.iter().all(|&i| i < first + 16), "{backend}");
            }
        }
    }
}
