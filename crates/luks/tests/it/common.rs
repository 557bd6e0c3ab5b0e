//! Helpers of the header tests: sparse images, running cryptsetup and
//! parsing its output, cheap KDFs and format options (temporary
//! directories, random keys and requirement marks come from the testkit).

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cryptkeep_crypto::{CipherSpec, HashAlg, Pbkdf};
use cryptkeep_luks::{FormatOptions, LuksVersion};
pub use cryptkeep_testkit::{need, random_key, TempDir};

/// A sparse file of `mib` MiB.
pub fn sparse(path: &Path, mib: u64) -> PathBuf {
    let f = File::create(path).unwrap();
    f.set_len(mib << 20).unwrap();
    path.to_path_buf()
}

/// Opens `path` for reading and writing.
pub fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

/// Writes the key file `name` in `dir`; its path.
pub fn keyfile(dir: &TempDir, name: &str, content: &[u8]) -> PathBuf {
    let p = dir.join(name);
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

/// A path as a string (test paths are UTF-8).
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

/// A cheap PBKDF2 (1000 iterations).
pub fn pbkdf2() -> Pbkdf {
    Pbkdf::Pbkdf2 {
        hash: HashAlg::Sha256,
        iterations: 1000,
    }
}

/// A cheap Argon2id.
pub fn argon2id() -> Pbkdf {
    Pbkdf::Argon2id {
        time: 4,
        memory_kib: 32,
        parallel: 1,
    }
}

/// A cheap Argon2i.
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
