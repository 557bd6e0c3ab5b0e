//! Two overlay mounts of one cipher directory, set up for shared storage
//! (`fs mount --sharedstorage`: no entry or attribute caching, no kernel
//! write cache): what one mount changes, the other shows at once, down to
//! a directory removed and recreated (with a new IV) behind its back.

use crate::common::*;
use cryptkeep_overlayfs::{mount_overlay, OverlayOptions};
use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn shared(o: OverlayOptions) -> OverlayOptions {
    OverlayOptions {
        cache_ttl: Duration::ZERO,
        writeback_cache: false,
        ..o
    }
}

fn names(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn changes_through_one_mount_show_in_the_other_at_once() {
    need!(root, fuse_uring);
    alone!(shared);
    let t = TempDir::new("shared");
    let cipher = t.join("cipher");
    init_cheap(&cipher);
    let (ma, mb) = (t.join("a"), t.join("b"));
    fs::create_dir(&ma).unwrap();
    fs::create_dir(&mb).unwrap();
    let open = || {
        cryptkeep_overlay::CipherDir::open(&cipher, PASSWORD.as_bytes())
            .map(Arc::new)
            .unwrap()
    };
    let a = mount_overlay(
        open(),
        &ma,
        &shared(OverlayOptions::default().over_io_uring().unwrap()),
    )
    .unwrap();
    let b = mount_overlay(open(), &mb, &shared(OverlayOptions::default())).unwrap();
    let (a_, b_) = (a.mountpoint(), b.mountpoint());

    fs::write(b_.join("f"), "one").unwrap();
    assert_eq!(fs::read_to_string(a_.join("f")).unwrap(), "one");
    assert_eq!(names(a_), ["f"]);

    fs::OpenOptions::new()
        .append(true)
        .open(b_.join("f"))
        .unwrap()
        .write_all(b"two")
        .unwrap();
    assert_eq!(fs::metadata(a_.join("f")).unwrap().len(), 6);
    assert_eq!(fs::read_to_string(a_.join("f")).unwrap(), "onetwo");

    fs::create_dir(b_.join("d")).unwrap();
    fs::write(b_.join("d/x"), "x").unwrap();
    assert_eq!(fs::read_to_string(a_.join("d/x")).unwrap(), "x");
    // Recreated behind A's back: a new directory IV.
    fs::remove_file(b_.join("d/x")).unwrap();
    fs::remove_dir(b_.join("d")).unwrap();
    fs::create_dir(b_.join("d")).unwrap();
    fs::write(b_.join("d/y"), "new").unwrap();
    assert_eq!(names(&a_.join("d")), ["y"]);
    assert_eq!(fs::read_to_string(a_.join("d/y")).unwrap(), "new");

    fs::write(a_.join("back"), "from a").unwrap();
    assert_eq!(fs::read_to_string(b_.join("back")).unwrap(), "from a");

    fs::remove_file(b_.join("f")).unwrap();
    assert!(!a_.join("f").exists(), "removed in B, still in A");
    assert_eq!(names(a_), ["back", "d"]);
    a.unmount().unwrap();
    b.unmount().unwrap();
}
