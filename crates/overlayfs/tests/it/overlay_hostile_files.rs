//! The file system's own files in a cipher directory are hostile input:
//! a 1 GiB sparse `.name` file, a `.name` that is a symlink to
//! `/dev/zero`, a FIFO or an oversized file in place of a
//! `gocryptfs.diriv`. Listing and looking up through the mount stays
//! bounded in memory and time, gives clear errors (EIO, the entry
//! skipped), and never blocks.

use crate::common::*;
use cryptkeep_overlayfs::{mount_overlay, OverlayOptions};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A memory figure of this process (the mount runs in it) from
/// /proc/self/status, in KiB: `VmHWM:` (the peak since the last
/// [`reset_peak`]) or `VmRSS:` (now).
fn status_kib(field: &str) -> u64 {
    let s = fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Resets the peak to what is resident now, and returns that: what earlier
/// tests of this binary left resident (freed memory the allocator keeps)
/// is not the listing's.
fn reset_peak() -> u64 {
    fs::write("/proc/self/clear_refs", "5").unwrap();
    status_kib("VmRSS:")
}

/// Lists `dir` on another thread: the names, or the error, within 10 s.
fn list_within(dir: &Path) -> std::io::Result<Vec<String>> {
    let d = dir.to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = fs::read_dir(&d).and_then(|it| {
            it.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<std::io::Result<Vec<_>>>()
        });
        let _ = tx.send(r);
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("listing hung on a hostile file")
}

/// The `.name` file in cipher directory `dir`.
fn name_file(dir: &Path) -> PathBuf {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".name"))
        .expect("a .name file")
}

#[test]
fn hostile_name_and_diriv_files_are_bounded_and_refused() {
    need!(root, fuse);
    alone!();
    let t = TempDir::new("hostile");
    let cipher = t.join("cipher");
    let cd = init_cheap(&cipher);
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let opts = OverlayOptions {
        cache_ttl: Duration::ZERO,
        writeback_cache: false,
        ..OverlayOptions::default()
    };
    let m = mount_overlay(Arc::new(cd), &mnt, &opts).unwrap();
    let long = "L".repeat(200);
    fs::write(mnt.join(&long), b"long\n").unwrap();
    fs::write(mnt.join("short"), b"short\n").unwrap();
    fs::create_dir(mnt.join("sub")).unwrap();
    fs::write(mnt.join("sub/inner"), b"inner\n").unwrap();
    let mut all = list_within(&mnt).unwrap();
    all.sort();
    assert_eq!(all, vec![long.clone(), "short".into(), "sub".into()]);

    // A 1 GiB sparse .name: the long entry is skipped, memory stays small.
    let nf = name_file(&cipher);
    fs::remove_file(&nf).unwrap();
    fs::File::create(&nf).unwrap().set_len(1 << 30).unwrap();
    let base = reset_peak();
    let mut got = list_within(&mnt).unwrap();
    got.sort();
    assert_eq!(got, vec!["short".to_string(), "sub".into()]);
    let grew = status_kib("VmHWM:").saturating_sub(base);
    assert!(
        grew < 200 << 10,
        "listing peaked at {grew} KiB above the {base} KiB resident before"
    );

    // A .name that is a symlink to /dev/zero: never followed.
    fs::remove_file(&nf).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &nf).unwrap();
    let mut got = list_within(&mnt).unwrap();
    got.sort();
    assert_eq!(got, vec!["short".to_string(), "sub".into()]);

    // The subdirectory's diriv as a FIFO, then as an oversized file: the
    // listing fails with EIO at once.
    let sub = fs::read_dir(&cipher)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .unwrap();
    let diriv = sub.join("gocryptfs.diriv");
    fs::remove_file(&diriv).unwrap();
    let c = std::ffi::CString::new(diriv.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let e = list_within(&mnt.join("sub")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    fs::remove_file(&diriv).unwrap();
    fs::File::create(&diriv).unwrap().set_len(1 << 30).unwrap();
    let e = list_within(&mnt.join("sub")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    fs::remove_file(&diriv).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &diriv).unwrap();
    let e = list_within(&mnt.join("sub")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    m.unmount().unwrap();
}
