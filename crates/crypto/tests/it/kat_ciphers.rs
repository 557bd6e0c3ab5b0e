//! Known-answer tests for the sector ciphers, on both backends:
//! IEEE 1619 XTS-AES (through aes-xts-plain64, DataUnit = sector number),
//! NIST SP 800-38A CBC and ECB.

use crate::common::{field, read_vectors, unhex};
use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};

#[test]
fn xts_ieee1619_both_backends() {
    let spec = CipherSpec::parse("aes-xts-plain64").unwrap();
    let vectors = read_vectors("xts_aes_ieee1619.txt");
    let mut seen_128 = 0;
    let mut seen_256 = 0;
    for v in &vectors {
        let key = unhex(field(v, "Key"));
        let unit: u64 = field(v, "DataUnit").parse().unwrap();
        let pt = unhex(field(v, "PT"));
        let ct = unhex(field(v, "CT"));
        match key.len() {
            32 => seen_128 += 1,
            64 => seen_256 += 1,
            n => panic!("key length {n}"),
        }
        for backend in Backend::ALL {
            let c = new_sector_cipher(&spec, &key, backend).unwrap();
            let name = format!(
                "vector {} on {backend} ({})",
                field(v, "Vector"),
                c.implementation()
            );
            let mut buf = pt.clone();
            c.encrypt(&mut buf, pt.len(), unit, 1).unwrap();
            assert_eq!(buf, ct, "encrypt {name}");
            c.decrypt(&mut buf, pt.len(), unit, 1).unwrap();
            assert_eq!(buf, pt, "decrypt {name}");
        }
    }
    assert!(seen_128 >= 10 && seen_256 >= 5, "{seen_128} / {seen_256}");
}

/// Vectors 4-6 are consecutive data units 0,1,2 of a chain (5's plaintext is
/// 4's ciphertext, ...). Encrypting a 3-sector buffer whose sectors are the
/// three plaintexts with first_iv 0 must give the three ciphertexts: this
/// checks the per-sector IV stepping across one call.
#[test]
fn xts_multi_sector_buffer_steps_the_iv() {
    let spec = CipherSpec::AES_XTS_PLAIN64;
    let vectors = read_vectors("xts_aes_ieee1619.txt");
    let pick = |n: &str| vectors.iter().find(|v| field(v, "Vector") == n).unwrap();
    let (v4, v5, v6) = (pick("4"), pick("5"), pick("6"));
    let key = unhex(field(v4, "Key"));
    let mut buf = [v4, v5, v6]
        .iter()
        .flat_map(|v| unhex(field(v, "PT")))
        .collect::<Vec<_>>();
    let want = [v4, v5, v6]
        .iter()
        .flat_map(|v| unhex(field(v, "CT")))
        .collect::<Vec<_>>();
    for backend in Backend::ALL {
        let c = new_sector_cipher(&spec, &key, backend).unwrap();
        let mut b = buf.clone();
        c.encrypt(&mut b, 512, 0, 1).unwrap();
        assert_eq!(b, want, "{backend}");
        // The same sectors with IV step 2 starting at 0 must differ from sector 1 on.
        let mut s = buf.clone();
        c.encrypt(&mut s, 512, 0, 2).unwrap();
        assert_eq!(s[..512], want[..512]);
        assert_ne!(s[512..1024], want[512..1024]);
    }
    buf.clear();
}

#[test]
fn cbc_sp800_38a_both_backends() {
    // The SP 800-38A IV (000102..0f) is fed through plain64: its low 8 bytes
    // are le64(sector) and its high 8 bytes are folded into the first
    // plaintext block (CBC starts with P1 xor IV).
    let spec = CipherSpec::parse("aes-cbc-plain64").unwrap();
    for v in read_vectors("cbc_aes_sp800_38a.txt") {
        let key = unhex(field(&v, "Key"));
        let iv = unhex(field(&v, "IV"));
        let mut pt = unhex(field(&v, "PT"));
        let ct = unhex(field(&v, "CT"));
        let sector = u64::from_le_bytes(iv[..8].try_into().unwrap());
        for i in 8..16 {
            pt[i] ^= iv[i];
        }
        for backend in Backend::ALL {
            let c = new_sector_cipher(&spec, &key, backend).unwrap();
            let mut buf = pt.clone();
            c.encrypt(&mut buf, 64, sector, 1).unwrap();
            assert_eq!(buf, ct, "{} {backend}", field(&v, "Vector"));
            c.decrypt(&mut buf, 64, sector, 1).unwrap();
            assert_eq!(buf, pt, "{} {backend}", field(&v, "Vector"));
            // Single-block sectors use the IV of each sector, not the chain.
            let mut one = pt.clone();
            c.encrypt(&mut one, 16, sector, 0).unwrap();
            assert_eq!(one[..16], ct[..16]);
        }
    }
}

#[test]
fn ecb_sp800_38a_both_backends() {
    let spec = CipherSpec::parse("aes-ecb").unwrap();
    for v in read_vectors("ecb_aes_sp800_38a.txt") {
        let key = unhex(field(&v, "Key"));
        let pt = unhex(field(&v, "PT"));
        let ct = unhex(field(&v, "CT"));
        for backend in Backend::ALL {
            let c = new_sector_cipher(&spec, &key, backend).unwrap();
            for sector_size in [16, 32, 64] {
                let mut buf = pt.clone();
                c.encrypt(&mut buf, sector_size, 12345, 1).unwrap();
                assert_eq!(buf, ct, "{} {backend}", field(&v, "Vector"));
                c.decrypt(&mut buf, sector_size, 0, 1).unwrap();
                assert_eq!(buf, pt);
            }
        }
    }
}

#[test]
fn accelerated_backend_reports_what_runs() {
    let k64: Vec<u8> = (0..64).collect();
    let c = new_sector_cipher(&CipherSpec::AES_XTS_PLAIN64, &k64, Backend::Accelerated).unwrap();
    assert_eq!(c.backend(), Backend::Accelerated);
    assert_eq!(c.key_len(), 64);
    assert_eq!(c.spec(), &CipherSpec::AES_XTS_PLAIN64);
    // aws-lc has no AES-128-XTS: served by the portable code, and says so.
    let c = new_sector_cipher(
        &CipherSpec::AES_XTS_PLAIN64,
        &k64[..32],
        Backend::Accelerated,
    )
    .unwrap();
    assert_eq!(c.backend(), Backend::Portable);
    // Equal XTS halves: aws-lc refuses, the kernel does not; we fall back.
    let c = new_sector_cipher(
        &CipherSpec::AES_XTS_PLAIN64,
        &[9u8; 64],
        Backend::Accelerated,
    )
    .unwrap();
    assert_eq!(c.backend(), Backend::Portable);
    let c = new_sector_cipher(
        &CipherSpec::AES_CBC_ESSIV_SHA256,
        &k64[..16],
        Backend::Accelerated,
    )
    .unwrap();
    assert_eq!(c.backend(), Backend::Accelerated);
}

#[test]
fn rejects_bad_layouts_and_keys() {
    let k: Vec<u8> = (0..64).collect();
    for backend in Backend::ALL {
        let c = new_sector_cipher(&CipherSpec::AES_XTS_PLAIN64, &k, backend).unwrap();
        let mut buf = vec![0u8; 1024];
        assert!(c.encrypt(&mut buf, 0, 0, 1).is_err());
        assert!(c.encrypt(&mut buf, 24, 0, 1).is_err());
        assert!(c.encrypt(&mut buf[..1000], 512, 0, 1).is_err());
        assert!(c.decrypt(&mut buf[..600], 512, 0, 1).is_err());
        c.encrypt(&mut [], 512, 0, 1).unwrap();
        assert!(new_sector_cipher(&CipherSpec::AES_XTS_PLAIN64, &k[..16], backend).is_err());
        let cbc = CipherSpec::parse("aes-cbc-plain64").unwrap();
        assert!(new_sector_cipher(&cbc, &k, backend).is_err());
    }
}
