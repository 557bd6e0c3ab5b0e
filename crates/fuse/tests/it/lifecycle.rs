//! Mount lifecycle: bad mount points, mounts visible in the mount table,
//! unmount refused while a loop device holds the file (and serving goes
//! on), and `wait` returning after an outside `fusermount3 -u`.

use crate::common::*;

use std::sync::mpsc;
use std::time::Duration;

use cryptkeep_fuse::{mount_block_file, Error};

const SIZE: u64 = 8 << 20;

#[test]
fn bad_mountpoints_are_refused() {
    need!(root, fuse);
    let dir = TempDir::new("badmp");
    let img = dir.join("vol.img");
    backing(&img, SIZE);
    let eng = engine(&img, &random_key(64), 4096, false);
    for mp in [dir.join("missing"), img.clone()] {
        match mount_block_file(eng.clone(), &mp, &opts(false, false)) {
            Err(Error::Mountpoint { .. }) => {}
            other => panic!("mount on {} gave {other:?}", mp.display()),
        }
    }
    let mut o = opts(false, false);
    o.file_name = "a/b".into();
    assert!(matches!(
        mount_block_file(eng, &dir.sub("mnt"), &o),
        Err(Error::Mountpoint { .. })
    ));
}

#[test]
fn busy_unmount_is_refused_then_wait_ends_on_outside_unmount() {
    need!(root, fuse, loop_dev);
    for t in ["losetup", "fusermount3"] {
        need!(tool t);
    }
    let dir = TempDir::new("life");
    let img = dir.join("vol.img");
    backing(&img, SIZE);
    let eng = engine(&img, &random_key(64), 4096, false);
    let mnt = dir.sub("mnt");
    let o = opts(false, false);
    let mut guard = FuseGuard::mount(eng, &mnt, &o);
    let canon = mnt.canonicalize().unwrap();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    // " - fuse cryptkeep:test " (direct mount) or " - fuse.cryptkeep ..." (fusermount3).
    let line = table
        .lines()
        .find(|l| l.split(' ').nth(4) == canon.to_str())
        .expect("mount not in /proc/self/mountinfo");
    let after: Vec<&str> = line.split(" - ").nth(1).unwrap().split(' ').collect();
    assert!(after[0].starts_with("fuse"), "{line}");
    assert_eq!(after[1], "cryptkeep:test", "{line}");

    // A loop device holds the file: unmount must fail and keep serving.
    let dev = LoopDev::attach(&cryptkeep_fuse::block_file_path(&mnt, &o));
    let m = guard.0.as_mut().unwrap();
    match m.try_unmount() {
        Err(Error::Unmount { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::EBUSY), "{source}")
        }
        other => panic!("unmount with an attached loop device gave {other:?}"),
    }
    let md = std::fs::metadata(cryptkeep_fuse::block_file_path(&mnt, &o)).unwrap();
    assert_eq!(md.len(), SIZE);
    dev.detach();

    // fusermount3 -u from outside: wait() returns.
    let m = guard.0.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        m.wait();
        let _ = tx.send(());
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut unmounted = false;
    for _ in 0..100 {
        let st = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&mnt)
            .status()
            .unwrap();
        if st.success() {
            unmounted = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(unmounted, "fusermount3 -u kept failing");
    rx.recv_timeout(Duration::from_secs(10))
        .expect("wait() did not return after fusermount3 -u");
}
