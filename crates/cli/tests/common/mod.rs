//! Helpers shared by the keep tests.

use std::fs;
use std::os::unix::fs::FileExt;
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

/// The `/proc/PID/maps` lines of the readable mappings of process `pid`
/// that contain `needle`.
pub fn mappings_containing(pid: i32, needle: &[u8]) -> Vec<String> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut hits = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    for l in maps.lines() {
        let mut f = l.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        if !perms.starts_with('r') || l.contains("[vvar") || l.contains("[vsyscall]") {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut off = a;
        while off < b {
            let n = ((b - off) as usize).min(buf.len());
            // Overlap chunks by the needle's length so no match is split.
            match mem.read_at(&mut buf[..n], off) {
                Ok(got) if got >= needle.len() => {
                    if buf[..got].windows(needle.len()).any(|w| w == needle) {
                        hits.push(l.to_string());
                        break;
                    }
                    off += (got - needle.len() + 1) as u64;
                }
                _ => break,
            }
        }
    }
    hits
}

/// Whether `needle` occurs in any readable mapping of process `pid`.
pub fn memory_contains(pid: i32, needle: &[u8]) -> bool {
    !mappings_containing(pid, needle).is_empty()
}
