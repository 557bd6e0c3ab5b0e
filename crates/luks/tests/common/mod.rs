//! Helpers for the cryptsetup round-trip tests: temp dirs, sparse images,
//! running cryptsetup and parsing its output.
#![allow(dead_code)]

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use cryptkeep_crypto::{CipherSpec, HashAlg, Pbkdf};
use cryptkeep_luks::{FormatOptions, LuksVersion};

/// A directory under /tmp removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "ckluks-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A sparse file of `mib` MiB.
pub fn sparse(path: &Path, mib: u64) -> PathBuf {
    let f = File::create(path).unwrap();
    f.set_len(mib << 20).unwrap();
    path.to_path_buf()
}

pub fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

pub fn keyfile(dir: &TempDir, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.path(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// Run cryptsetup; panics with a clear message if it is not installed.
pub fn cryptsetup(args: &[&str]) -> Output {
    match Command::new("cryptsetup").args(args).output() {
        Ok(o) => o,
        Err(e) => panic!(
            "cannot run `cryptsetup` ({e}): install cryptsetup-bin (scripts/install-deps.sh)"
        ),
    }
}

/// Run cryptsetup and require success.
pub fn cryptsetup_ok(args: &[&str]) -> String {
    let o = cryptsetup(args);
    assert!(
        o.status.success(),
        "cryptsetup {args:?} failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The volume key as `luksDump --dump-volume-key` prints it.
pub fn dump_volume_key(img: &Path, key_file: &Path, header: Option<&Path>) -> Vec<u8> {
    let mut args = vec![
        "luksDump",
        "--dump-volume-key",
        "--batch-mode",
        "--key-file",
        s(key_file),
    ];
    if let Some(h) = header {
        args.extend(["--header", s(h)]);
    }
    args.push(s(img));
    let out = cryptsetup_ok(&args);
    let start = out
        .find("MK dump:")
        .expect("no 'MK dump:' in luksDump output");
    let mut key = Vec::new();
    for tok in out[start + 8..].split_whitespace() {
        if tok.len() == 2 && tok.chars().all(|c| c.is_ascii_hexdigit()) {
            key.push(u8::from_str_radix(tok, 16).unwrap());
        } else {
            break;
        }
    }
    key
}

/// `cryptsetup open --test-passphrase`: whether the key file opens the image.
pub fn test_passphrase(
    img: &Path,
    key_file: &Path,
    header: Option<&Path>,
    slot: Option<usize>,
) -> bool {
    let slot_s = slot.map(|n| n.to_string());
    let mut args = vec![
        "open",
        "--test-passphrase",
        "--batch-mode",
        "--key-file",
        s(key_file),
    ];
    if let Some(h) = header {
        args.extend(["--header", s(h)]);
    }
    if let Some(n) = &slot_s {
        args.extend(["--key-slot", n.as_str()]);
    }
    args.push(s(img));
    cryptsetup(&args).status.success()
}

/// The first value after `label` in `luksDump` output.
pub fn dump_field(dump: &str, label: &str) -> String {
    let i = dump
        .find(label)
        .unwrap_or_else(|| panic!("no '{label}' in dump:\n{dump}"));
    dump[i + label.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

pub fn pbkdf2() -> Pbkdf {
    Pbkdf::Pbkdf2 {
        hash: HashAlg::Sha256,
        iterations: 1000,
    }
}

pub fn argon2id() -> Pbkdf {
    Pbkdf::Argon2id {
        time: 4,
        memory_kib: 32,
        parallel: 1,
    }
}

pub fn argon2i() -> Pbkdf {
    Pbkdf::Argon2i {
        time: 4,
        memory_kib: 32,
        parallel: 1,
    }
}

/// Format options for a test: cheap digest, given cipher/key/sector.
pub fn opts(version: LuksVersion, cipher: &str, key_bytes: usize, sector: u32) -> FormatOptions {
    FormatOptions {
        version,
        cipher: CipherSpec::parse(cipher).unwrap(),
        key_bytes,
        sector_size: sector,
        digest_iterations: Some(1000),
        ..FormatOptions::default()
    }
}

pub fn random_key(n: usize) -> Vec<u8> {
    let mut k = vec![0u8; n];
    cryptkeep_crypto::rand::fill_random(&mut k).unwrap();
    k
}

/// cryptsetup KDF arguments for a cheap KDF named like ours.
pub fn cs_kdf_args(kdf: &str) -> Vec<&'static str> {
    match kdf {
        "pbkdf2" => vec!["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"],
        "argon2i" => vec![
            "--pbkdf",
            "argon2i",
            "--pbkdf-force-iterations",
            "4",
            "--pbkdf-memory",
            "32",
            "--pbkdf-parallel",
            "1",
        ],
        "argon2id" => vec![
            "--pbkdf",
            "argon2id",
            "--pbkdf-force-iterations",
            "4",
            "--pbkdf-memory",
            "32",
            "--pbkdf-parallel",
            "1",
        ],
        other => panic!("unknown kdf {other}"),
    }
}
