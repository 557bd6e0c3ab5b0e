//! The real block path: FUSE file → direct-I/O loop device (4096-byte
//! sectors) → ext4. Make a file system, fill it, take everything down, bring
//! it back up from the same image and key, fsck it and read it back.

use crate::common::*;

use std::path::Path;

const SIZE: u64 = 48 << 20;
const FILES: usize = 300;

fn content(i: usize) -> Vec<u8> {
    let len = 1 + (i * 7919) % 40_000;
    let mut v = vec![0u8; len];
    Rng(i as u64 + 1).fill(&mut v);
    if i == 0 {
        v = b"CRYPTKEEP-PLAINTEXT-MARKER ".repeat(200);
    }
    v
}

fn file_path(root: &Path, i: usize) -> std::path::PathBuf {
    root.join(format!("d{}", i % 7)).join(format!("f{i}"))
}

fn kept(i: usize, discards: bool) -> bool {
    !discards || !i.is_multiple_of(3)
}

#[test]
fn ext4_on_loop_on_fuse_survives_remount_and_fsck() {
    scenario(false);
}

/// With discards the loop device passes discards and "write zeroes" as hole
/// punches; delete a third of the files and fstrim, then check everything.
#[test]
fn ext4_with_discards_survives_fstrim_remount_and_fsck() {
    need!(tool "fstrim");
    scenario(true);
}

fn scenario(discards: bool) {
    need!(root, fuse, loop_dev);
    for t in ["losetup", "mkfs.ext4", "e2fsck", "mount", "umount"] {
        need!(tool t);
    }
    let dir = TempDir::new("ext4");
    let img = dir.join("vol.img");
    backing(&img, SIZE);
    let key = random_key(64);
    let fuse_mnt = dir.sub("fuse");
    let ext_mnt = dir.sub("ext4");
    let o = opts(false, discards);

    {
        let mut fuse = FuseGuard::mount(engine(&img, &key, 4096, false), &fuse_mnt, &o);
        let dev = LoopDev::attach(&cryptkeep_fuse::block_file_path(&fuse_mnt, &o));
        assert!(dev.direct_io(), "{} does not do direct I/O", dev.0);
        run("mkfs.ext4", &["-q", &dev.0]);
        let m = Mounted::mount(&dev.0, &ext_mnt, false);
        for d in 0..7 {
            std::fs::create_dir(ext_mnt.join(format!("d{d}"))).unwrap();
        }
        for i in 0..FILES {
            std::fs::write(file_path(&ext_mnt, i), content(i)).unwrap();
        }
        if discards {
            for i in (0..FILES).filter(|&i| !kept(i, true)) {
                std::fs::remove_file(file_path(&ext_mnt, i)).unwrap();
            }
            // syncfs of this file system only: a global sync would also
            // wait on every other mount of the machine.
            run("sync", &["-f", ext_mnt.to_str().unwrap()]);
            run("fstrim", &[ext_mnt.to_str().unwrap()]);
        }
        m.umount();
        dev.detach();
        fuse.unmount();
    }
    let raw = std::fs::read(&img).unwrap();
    assert!(
        !raw.windows(26).any(|w| w == b"CRYPTKEEP-PLAINTEXT-MARKER"),
        "plaintext reached the backing file"
    );
    drop(raw);

    let mut fuse = FuseGuard::mount(engine(&img, &key, 4096, false), &fuse_mnt, &o);
    let dev = LoopDev::attach(&cryptkeep_fuse::block_file_path(&fuse_mnt, &o));
    let fsck = std::process::Command::new("e2fsck")
        .args(["-fn", &dev.0])
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "e2fsck -fn found problems:\n{}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );
    let m = Mounted::mount(&dev.0, &ext_mnt, true);
    for i in 0..FILES {
        let p = file_path(&ext_mnt, i);
        if kept(i, discards) {
            let got = std::fs::read(&p).unwrap();
            assert!(got == content(i), "file {i} differs after remount");
        } else {
            assert!(!p.exists(), "deleted file {i} came back");
        }
    }
    m.umount();
    dev.detach();
    fuse.unmount();
}
