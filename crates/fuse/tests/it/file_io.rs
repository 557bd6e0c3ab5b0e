//! The block file through the kernel's FUSE client with std::fs: layout,
//! attributes, reads and writes at odd offsets, limits, read-only mounts,
//! fsync and fallocate.

use crate::common::*;

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};

const SIZE: u64 = 24 << 20;

#[test]
fn odd_offsets_round_trip_through_fuse() {
    need!(root, fuse);
    let dir = TempDir::new("odd");
    let img = dir.join("vol.img");
    backing(&img, SIZE);
    let key = random_key(64);
    let eng = engine(&img, &key, 512, false);
    let mnt = dir.sub("mnt");
    let o = opts(false, false);
    let mut fuse = FuseGuard::mount(eng.clone(), &mnt, &o);

    let file_path = cryptkeep_fuse::block_file_path(&mnt, &o);
    let md = std::fs::metadata(&file_path).unwrap();
    assert_eq!(md.len(), SIZE);
    assert_eq!(md.mode(), libc::S_IFREG | 0o600);
    assert_eq!((md.uid(), md.gid()), (0, 0));
    let names: Vec<_> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["volume"]);
    assert!(std::fs::metadata(mnt.join("other")).is_err());

    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file_path)
        .unwrap();
    let mut model = vec![0u8; SIZE as usize];
    Rng(3).fill(&mut model);
    f.write_all_at(&model, 0).unwrap();
    let mut rng = Rng(0xfeed);
    let mut buf = vec![0u8; 3 << 20];
    for i in 0..200 {
        let len = 1 + rng.below(if i % 10 == 0 { 3 << 20 } else { 20_000 }) as usize;
        let off = rng.below(SIZE - len as u64 + 1) as usize;
        if i % 2 == 0 {
            rng.fill(&mut buf[..len]);
            f.write_all_at(&buf[..len], off as u64).unwrap();
            model[off..off + len].copy_from_slice(&buf[..len]);
        } else {
            f.read_exact_at(&mut buf[..len], off as u64).unwrap();
            assert!(buf[..len] == model[off..off + len], "read {len} at {off}");
        }
    }
    f.sync_all().unwrap();
    // No cache between the file and the engine: the engine sees every byte.
    let mut direct = vec![0u8; SIZE as usize];
    eng.read_at(&mut direct, 0).unwrap();
    assert!(direct == model, "engine and FUSE file disagree");
    // Through FUSE the whole file reads back, short at the end.
    let mut tail = vec![0u8; 10_000];
    assert_eq!(f.read_at(&mut tail, SIZE - 100).unwrap(), 100);
    assert_eq!(tail[..100], model[model.len() - 100..]);
    // Writing past the end fails with ENOSPC, like a block device, and
    // writes nothing; the size never changes.
    for (data, at) in [(&b"xy"[..], SIZE - 1), (&b"x"[..], SIZE)] {
        let e = f
            .write_at(data, at)
            .expect_err("write past the end succeeded");
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    }
    let mut last = [0u8; 1];
    f.read_exact_at(&mut last, SIZE - 1).unwrap();
    assert_eq!(last[0], model[model.len() - 1]);
    assert_eq!(std::fs::metadata(&file_path).unwrap().len(), SIZE);
    assert!(f.set_len(SIZE / 2).is_err());
    // Without allow_discards, punching holes is refused.
    // SAFETY: a plain syscall on an open fd.
    let r = unsafe {
        libc::fallocate(
            f.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            1 << 20,
        )
    };
    assert_eq!(r, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EOPNOTSUPP)
    );
    drop(f);
    fuse.unmount();
    // The backing file holds ciphertext, not the data.
    let raw = std::fs::read(&img).unwrap();
    assert!(raw[..4096] != model[..4096]);
}

#[test]
fn discard_and_zero_range() {
    need!(root, fuse);
    let dir = TempDir::new("discard");
    let img = dir.join("vol.img");
    backing(&img, SIZE);
    let key = random_key(64);
    let eng = engine(&img, &key, 4096, false);
    let mnt = dir.sub("mnt");
    let o = opts(false, true);
    let _fuse = FuseGuard::mount(eng.clone(), &mnt, &o);
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(cryptkeep_fuse::block_file_path(&mnt, &o))
        .unwrap();
    let mut model = vec![0u8; 4 << 20];
    Rng(11).fill(&mut model);
    f.write_all_at(&model, 0).unwrap();
    let fallocate = |mode: i32, off: usize, len: usize| {
        // SAFETY: a plain syscall on an open fd.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, off as i64, len as i64) };
        assert_eq!(
            r,
            0,
            "fallocate {mode:#x}: {}",
            std::io::Error::last_os_error()
        );
    };
    fallocate(
        libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        1 << 20,
        1 << 20,
    );
    model[1 << 20..2 << 20].fill(0);
    fallocate(
        libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        3_000_000,
        5_000,
    );
    model[3_000_000..3_005_000].fill(0);
    let mut back = vec![0u8; model.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    let first_bad = back.iter().zip(&model).position(|(a, b)| a != b);
    assert!(
        first_bad.is_none(),
        "discarded or zeroed ranges do not read as zeros (first difference at {first_bad:?})"
    );
    let raw = std::fs::read(&img).unwrap();
    assert!(
        raw[1 << 20..2 << 20].iter().all(|&b| b == 0),
        "no hole in the backing file"
    );
    assert!(
        raw[3_000_000..3_005_000].iter().any(|&b| b != 0),
        "zero range stored in clear"
    );
}

#[test]
fn read_only_mounts_refuse_writes() {
    need!(root, fuse);
    let dir = TempDir::new("ro");
    let img = dir.join("vol.img");
    backing(&img, SIZE);
    let key = random_key(64);
    {
        let eng = engine(&img, &key, 4096, false);
        eng.write_at(b"read-only content", 4096).unwrap();
    }
    // Read-only engine, and a read-write engine mounted read-only.
    for (engine_ro, opt_ro) in [(true, false), (false, true)] {
        let eng = engine(&img, &key, 4096, engine_ro);
        let mnt = dir.sub(&format!("mnt-{engine_ro}"));
        let o = opts(opt_ro, true);
        let _fuse = FuseGuard::mount(eng, &mnt, &o);
        let path = cryptkeep_fuse::block_file_path(&mnt, &o);
        let e = OpenOptions::new().write(true).open(&path).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        let f = std::fs::File::open(&path).unwrap();
        let mut b = [0u8; 17];
        f.read_exact_at(&mut b, 4096).unwrap();
        assert_eq!(&b, b"read-only content");
    }
}
