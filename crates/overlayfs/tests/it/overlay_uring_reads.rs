//! Large reads over FUSE-over-io_uring, where a queue's read helper
//! commits answers on its own ring and so takes over ring entries: data
//! read back must match what was written, requests of every other kind
//! that reach the helper's entries must still be answered (it hands them
//! back to the queue thread), mixed with a reader running at the same
//! time, and on unmount every queue and helper thread must end.

use crate::common::*;
use cryptkeep_overlayfs::{mount_overlay, OverlayOptions};
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Deterministic bytes (a xorshift stream), so a misplaced block shows.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Drops the page cache, so the next read of a file asks the file system.
fn drop_page_cache() {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    fs::write("/proc/sys/vm/drop_caches", b"1").unwrap();
}

/// Reads `p` in 1 MiB calls (the kernel's read-ahead sends large READs).
fn read_big(p: &Path) -> Vec<u8> {
    let mut f = fs::File::open(p).unwrap();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// Small requests of many kinds: create, write, stat, list, read, rename,
/// unlink; checks each answer.
fn metadata_round(dir: &Path, round: u32) {
    fs::create_dir_all(dir).unwrap();
    for i in 0..40u32 {
        let p = dir.join(format!("f{round}-{i}"));
        let body = format!("round {round} file {i}");
        fs::write(&p, &body).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().size(), body.len() as u64);
        assert_eq!(fs::read_to_string(&p).unwrap(), body);
    }
    let n = fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("f{round}-"))
        })
        .count();
    assert_eq!(n, 40);
    for i in 0..40u32 {
        let p = dir.join(format!("f{round}-{i}"));
        let q = dir.join(format!("g{round}-{i}"));
        fs::rename(&p, &q).unwrap();
        fs::remove_file(&q).unwrap();
    }
}

/// This process's threads whose names start with `prefix`.
fn threads_named(prefix: &str) -> usize {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with(prefix))
        .count()
}

#[test]
fn large_reads_then_other_requests_over_io_uring() {
    need!(root, fuse_uring);
    alone!();
    let t = TempDir::new("uring-reads");
    let cipher = t.join("cipher");
    let cd = init_cheap(&cipher);
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mount_opts = OverlayOptions::default().over_io_uring().unwrap();
    let m = mount_overlay(Arc::new(cd), &mnt, &mount_opts).unwrap();
    let root = m.mountpoint().to_path_buf();
    assert!(threads_named("ck-uring-") > 0, "no io_uring queue threads");
    let served = cryptkeep_fuse::uring::requests_served();

    // 24 MiB and an odd tail: many 128 KiB..1 MiB READs, a short last one.
    let big = pattern((24 << 20) + 12_345, 0x9e37_79b9_7f4a_7c15);
    fs::write(root.join("big"), &big).unwrap();
    for round in 0..3u32 {
        drop_page_cache();
        assert!(
            read_big(&root.join("big")) == big,
            "round {round}: big file differs"
        );
        // Whatever lands in the entries the helper holds now is handed back.
        metadata_round(&root.join("d"), round);
    }

    // A streaming reader and small requests at the same time.
    drop_page_cache();
    let reader = {
        let (p, want) = (root.join("big"), big.clone());
        std::thread::spawn(move || {
            for _ in 0..2 {
                assert!(read_big(&p) == want, "concurrent read differs");
                drop_page_cache();
            }
        })
    };
    for round in 10..14u32 {
        metadata_round(&root.join("e"), round);
    }
    reader.join().unwrap();

    // Small reads (answered in place) of the same file agree too.
    let mut f = fs::File::open(root.join("big")).unwrap();
    let mut head = vec![0u8; 4096];
    f.read_exact(&mut head).unwrap();
    assert_eq!(head, big[..4096]);
    drop(f);

    // The requests came over the rings, not /dev/fuse: every LOOKUP,
    // CREATE, WRITE and READ of the rounds above.
    let over_rings = cryptkeep_fuse::uring::requests_served() - served;
    assert!(
        over_rings > 500,
        "only {over_rings} requests came over io_uring"
    );
    m.unmount().unwrap();
    // Every queue thread and read helper ends once the kernel gives the
    // entries back, on whichever ring holds them.
    let t0 = Instant::now();
    while threads_named("ck-uring-") > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        threads_named("ck-uring-"),
        0,
        "io_uring threads left after unmount"
    );
}
