//! IV semantics against an independent implementation: one sector encrypted
//! by us must equal `openssl enc` with the IV the kernel would use, which the
//! test builds by hand (plain, plain64, plain64be, ESSIV via `openssl dgst`
//! and an ECB encryption of the sector number). OpenSSL's `enc` has no XTS,
//! so XTS IVs are covered by the IEEE vectors (DataUnit = plain64 sector).

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};
use cryptkeep_testkit::{need, random_key};
use std::io::Write;
use std::process::{Command, Stdio};

fn hexs(b: &[u8]) -> String {
    crate::common::hex(b)
}

fn openssl(args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input)
        .expect("write");
    let out = child.wait_with_output().expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn cbc_name(key_len: usize) -> String {
    format!("-aes-{}-cbc", key_len * 8)
}

/// The IV the kernel uses, built independently of the crate.
fn kernel_iv(spec: &str, key: &[u8], sector: u64) -> Vec<u8> {
    let mut iv = vec![0u8; 16];
    match spec {
        "aes-cbc-plain" => iv[..4].copy_from_slice(&(sector as u32).to_le_bytes()),
        "aes-cbc-plain64" => iv[..8].copy_from_slice(&sector.to_le_bytes()),
        "aes-cbc-plain64be" => iv[8..].copy_from_slice(&sector.to_be_bytes()),
        "aes-cbc-essiv:sha256" => {
            let salt = openssl(&["dgst", "-sha256", "-binary"], key);
            iv[..8].copy_from_slice(&sector.to_le_bytes());
            iv = openssl(&["enc", "-aes-256-ecb", "-nopad", "-K", &hexs(&salt)], &iv);
        }
        _ => unreachable!("{spec}"),
    }
    iv
}

#[test]
fn cbc_iv_modes_match_openssl_enc() {
    need!(tool "openssl");
    let specs = [
        "aes-cbc-plain64",
        "aes-cbc-essiv:sha256",
        "aes-cbc-plain",
        "aes-cbc-plain64be",
    ];
    for s in specs {
        for key_len in [16usize, 32] {
            let key = random_key(key_len);
            let spec = CipherSpec::parse(s).unwrap();
            for sector in [0u64, 1, 0x1_2345_6789, u64::MAX - 1] {
                let pt = random_key(512);
                let iv = kernel_iv(s, &key, sector);
                let want = openssl(
                    &[
                        "enc",
                        &cbc_name(key_len),
                        "-nopad",
                        "-K",
                        &hexs(&key),
                        "-iv",
                        &hexs(&iv),
                    ],
                    &pt,
                );
                for backend in Backend::ALL {
                    let c = new_sector_cipher(&spec, &key, backend).unwrap();
                    let mut got = pt.clone();
                    c.encrypt(&mut got, 512, sector, 1).unwrap();
                    assert_eq!(got, want, "{s} key {key_len} sector {sector} {backend}");
                }
                // And OpenSSL decrypts what we wrote.
                let back = openssl(
                    &[
                        "enc",
                        "-d",
                        &cbc_name(key_len),
                        "-nopad",
                        "-K",
                        &hexs(&key),
                        "-iv",
                        &hexs(&iv),
                    ],
                    &want,
                );
                assert_eq!(back, pt);
            }
        }
    }
}

#[test]
fn ecb_matches_openssl_enc() {
    need!(tool "openssl");
    for key_len in [16usize, 24, 32] {
        let key = random_key(key_len);
        let pt = random_key(1024);
        let want = openssl(
            &[
                "enc",
                &format!("-aes-{}-ecb", key_len * 8),
                "-nopad",
                "-K",
                &hexs(&key),
            ],
            &pt,
        );
        for backend in Backend::ALL {
            let c =
                new_sector_cipher(&CipherSpec::parse("aes-ecb").unwrap(), &key, backend).unwrap();
            let mut got = pt.clone();
            c.encrypt(&mut got, 512, 42, 1).unwrap();
            assert_eq!(got, want, "key {key_len} {backend}");
        }
    }
}
