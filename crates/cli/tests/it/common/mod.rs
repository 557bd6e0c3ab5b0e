//! Helpers shared by the keep tests.

pub mod scan;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The cryptkeep binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_cryptkeep");

/// Runs `cryptkeep ARGS` with its run directory in `dir`; panics with its
/// standard error unless it succeeds.
pub fn ck(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .env("CRYPTKEEP_RUN_DIR", dir.join("run"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cryptkeep {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A new directory `/tmp/PREFIX.XXXXXX`.
pub fn tempdir(prefix: &str) -> PathBuf {
    let out = Command::new("mktemp")
        .args(["-d", &format!("/tmp/{prefix}.XXXXXX")])
        .output()
        .unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}
