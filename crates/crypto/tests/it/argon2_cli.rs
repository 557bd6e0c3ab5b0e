//! Our Argon2 against the reference implementation's command-line tool
//! (Debian package `argon2`) on random passwords and salts.

use crate::common::hex;
use cryptkeep_crypto::kdf::{derive, Pbkdf};
use cryptkeep_testkit::{need, random_key};
use std::io::Write;
use std::process::{Command, Stdio};

fn reference(
    kind: &str,
    t: u32,
    m: u32,
    p: u32,
    password: &[u8],
    salt: &str,
    len: usize,
) -> String {
    let mut child = Command::new("argon2")
        .args([salt, kind, "-t", &t.to_string(), "-k", &m.to_string()])
        .args(["-p", &p.to_string(), "-l", &len.to_string(), "-r"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run argon2");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(password)
        .expect("write password");
    let out = child.wait_with_output().expect("argon2 output");
    assert!(out.status.success(), "argon2 failed");
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_string()
}

#[test]
fn random_inputs_agree_with_argon2_cli() {
    need!(tool "argon2");
    for (i, (t, m, p)) in [(1u32, 64u32, 1u32), (4, 128, 4), (3, 512, 2)]
        .into_iter()
        .enumerate()
    {
        // Printable password and salt (the CLI takes the salt as an argument).
        let password: Vec<u8> = random_key(20).iter().map(|b| b'a' + b % 26).collect();
        let salt: String = random_key(32)
            .iter()
            .map(|b| char::from(b'A' + b % 26))
            .collect();
        let (kind, kdf) = if i % 2 == 0 {
            (
                "-id",
                Pbkdf::Argon2id {
                    time: t,
                    memory_kib: m,
                    parallel: p,
                },
            )
        } else {
            (
                "-i",
                Pbkdf::Argon2i {
                    time: t,
                    memory_kib: m,
                    parallel: p,
                },
            )
        };
        let ours = derive(&kdf, &password, salt.as_bytes(), 32).unwrap();
        assert_eq!(
            hex(ours.as_slice()),
            reference(kind, t, m, p, &password, &salt, 32),
            "{kdf:?}"
        );
    }
}
