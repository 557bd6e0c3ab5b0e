//! A full backing file system under a real overlay mount (a 40 MiB tmpfs):
//! a write that does not fit fails with ENOSPC and harms nothing written
//! before it, and the space of removed files is back at once, although the
//! overlay frees removed files on its reaper thread (a write that finds the
//! disk full frees what waits there and tries again). Over /dev/fuse and
//! over io_uring.

use crate::common::*;
use cryptkeep_overlayfs::{mount_overlay, OverlayOptions};
use cryptkeep_testkit::mounts::Tmpfs;
use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

const MIB: usize = 1 << 20;

/// `len` bytes of a pattern that differs per `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 12) as u8)
        .collect()
}

/// Writes `data` to a new file and syncs it; the first error is returned.
fn write_synced(p: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = fs::File::create(p)?;
    for c in data.chunks(MIB) {
        f.write_all(c)?;
    }
    f.sync_all()
}

fn read_all(p: &Path) -> Vec<u8> {
    let mut v = Vec::new();
    fs::File::open(p).unwrap().read_to_end(&mut v).unwrap();
    v
}

fn fill_delete_refill(tag: &str, opts: OverlayOptions) {
    need!(root, fuse);
    alone!(shared);
    let t = TempDir::new(&format!("full-{tag}"));
    let back = Tmpfs::mount(&t.join("back"), 40);
    let cipher = t.join("back/cipher");
    let cd = init_cheap(&cipher);
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(Arc::new(cd), &mnt, &opts).unwrap();
    let keep = mnt.join("keep");
    let kept = pattern(99, MIB + 123);
    write_synced(&keep, &kept).unwrap();
    let base = back.used();
    for round in 0..4u8 {
        // Fill the disk with 4 MiB files until one does not fit.
        let mut n = 0usize;
        loop {
            let p = mnt.join(format!("f{n}"));
            match write_synced(&p, &pattern(round + n as u8, 4 * MIB)) {
                Ok(()) => n += 1,
                Err(e) => {
                    assert_eq!(
                        e.raw_os_error(),
                        Some(libc::ENOSPC),
                        "round {round}: file {n}: {e}"
                    );
                    // What landed of it reads back from the disk with no
                    // torn block: each block is what was written or, where
                    // a write-back that failed left a gap before one that
                    // landed (the kernel sends them in parallel), zeros.
                    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
                    let got = read_all(&p);
                    let want = pattern(round + n as u8, 4 * MIB);
                    assert!(got.len() <= want.len(), "round {round}: file {n} grew");
                    for (i, (g, w)) in got.chunks(4096).zip(want.chunks(4096)).enumerate() {
                        assert!(
                            g == &w[..g.len()] || g.iter().all(|&b| b == 0),
                            "round {round}: file {n} block {i} is neither what was written nor a hole"
                        );
                    }
                    fs::remove_file(&p).unwrap();
                    break;
                }
            }
            assert!(n < 20, "a 40 MiB tmpfs never filled");
        }
        assert!(n >= 5, "round {round}: only {n} files fitted");
        assert_eq!(read_all(&mnt.join("f0")), pattern(round, 4 * MIB));
        assert_eq!(
            read_all(&keep),
            kept,
            "round {round}: a full disk hurt another file"
        );
        // Remove them all, and write 12 MiB again as soon as the space is
        // back: the kernel sends the RELEASE of a closed file
        // asynchronously, so a removed cipher file may stay open (and its
        // blocks held) for a moment after unlink returns — bounded here.
        for i in 0..n {
            fs::remove_file(mnt.join(format!("f{i}"))).unwrap();
        }
        let t0 = std::time::Instant::now();
        while back.used() > base + 8 * MIB as u64 {
            assert!(
                t0.elapsed() < std::time::Duration::from_secs(5),
                "round {round}: removed files still hold {} bytes after 5 s",
                back.used() - base
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for i in 0..3u8 {
            let p = mnt.join(format!("g{i}"));
            write_synced(&p, &pattern(i, 4 * MIB)).unwrap_or_else(|e| {
                panic!("round {round}: the removed files' space is not back: {e}")
            });
        }
        for i in 0..3u8 {
            let p = mnt.join(format!("g{i}"));
            assert_eq!(read_all(&p), pattern(i, 4 * MIB));
            fs::remove_file(p).unwrap();
        }
    }
    // Freed on the reaper's thread within moments.
    let t0 = std::time::Instant::now();
    while back.used() > base + 256 * 1024 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "removed files still hold {} bytes",
            back.used() - base
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    m.unmount().unwrap();
}

#[test]
fn full_disk_over_dev_fuse() {
    fill_delete_refill("dev", OverlayOptions::default());
}

#[test]
fn full_disk_over_io_uring() {
    need!(root, fuse_uring);
    fill_delete_refill("uring", OverlayOptions::default().over_io_uring().unwrap());
}

/// Opens `p` for writing and writes `len` bytes in 1 MiB `write()`s,
/// ignoring every error (as a careless writer does); closes it.
fn write_ignoring_errors(p: &Path, len: usize) {
    let Ok(mut f) = fs::File::create(p) else {
        return;
    };
    let chunk = pattern(7, MIB);
    for _ in 0..len / MIB {
        let _ = f.write(&chunk);
    }
    drop(f);
}

/// On a disk that fills up, no error is lost: a careless writer cannot
/// grow a file past what the disk holds (no holes where its data never
/// landed), `write()` itself fails once space is low (a `close()` never
/// succeeds over data that was not stored), `mkdir` is ENOSPC, and the
/// cipher directory checks clean afterwards.
fn full_disk_errors(tag: &str, opts: OverlayOptions) {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    let t = TempDir::new(&format!("full-errors-{tag}"));
    let _back = Tmpfs::mount(&t.join("back"), 40);
    let cipher = t.join("back/cipher");
    let cd = Arc::new(init_cheap(&cipher));
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_overlay(cd.clone(), &mnt, &opts).unwrap();
    // 200 MiB into a 40 MiB disk through the page cache, errors ignored.
    write_ignoring_errors(&mnt.join("careless"), 200 * MIB);
    // Space is low now: each write() reaches the disk before it returns.
    let mut f = fs::File::create(mnt.join("topup")).unwrap();
    let mut written = 0usize;
    let e = loop {
        match f.write(&pattern(3, 4096)) {
            Ok(n) => written += n,
            Err(e) => break e,
        }
        assert!(written < 64 * MIB, "write() never failed on a full disk");
    };
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    drop(f);
    // `echo hello > f`: the write or the close fails with ENOSPC, or both
    // succeed and the six bytes are stored (a page the topup could not use
    // may still hold them); checked after the remount.
    let echo = fs::File::create(mnt.join("small")).and_then(|mut f| {
        f.write_all(b"hello\n")?;
        // Close, and see what close() said.
        let fd = std::os::fd::IntoRawFd::into_raw_fd(f);
        // SAFETY: `fd` was just taken from the file and is closed once here.
        match unsafe { libc::close(fd) } {
            0 => Ok(()),
            _ => Err(std::io::Error::last_os_error()),
        }
    });
    if let Err(e) = &echo {
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    }
    let e = fs::create_dir(mnt.join("dir")).expect_err("mkdir on a full disk");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "mkdir: {e}");
    m.unmount().unwrap();

    // Remounted: nothing reads back that was never stored.
    let m = mount_overlay(cd.clone(), &mnt, &opts).unwrap();
    // At most the disk, plus the holes that write-backs sent in parallel
    // can leave before one that landed (a few MiB in flight), never the
    // 200 MiB asked for.
    let careless = fs::metadata(mnt.join("careless")).unwrap().len();
    assert!(
        careless <= 56 * MIB as u64,
        "a careless writer grew a {careless}-byte file on a 40 MiB disk"
    );
    let got = read_all(&mnt.join("careless"));
    let want = pattern(7, MIB);
    for (i, b) in got.chunks(4096).enumerate() {
        let w = &want[(i * 4096) % MIB..][..b.len()];
        assert!(
            b == w || b.iter().all(|&x| x == 0),
            "careless block {i} is neither what was written nor a hole"
        );
    }
    if echo.is_ok() {
        assert_eq!(
            read_all(&mnt.join("small")),
            b"hello\n",
            "write and close succeeded, but the data was not stored"
        );
    } else {
        let small = fs::metadata(mnt.join("small")).map_or(0, |m| m.len());
        assert!(small == 0 || small == 6, "small is {small} bytes");
    }
    m.unmount().unwrap();
    let report = cd.fsck();
    assert!(report.is_clean(), "fsck after a full disk: {report:?}");
}

#[test]
fn full_disk_errors_over_dev_fuse() {
    full_disk_errors("dev", OverlayOptions::default());
}

#[test]
fn full_disk_errors_over_io_uring() {
    need!(root, fuse_uring);
    full_disk_errors("uring", OverlayOptions::default().over_io_uring().unwrap());
}
