//! The reverse mount (read-only cipher view of a plaintext directory)
//! against gocryptfs: our view equals `gocryptfs -reverse`'s byte for byte,
//! and gocryptfs (forward) mounts our view and reads the plaintext back.

use crate::common::*;
use cryptkeep_overlay::CipherDir;
use cryptkeep_overlayfs::{mount_reverse, OverlayOptions};
use std::fs;
use std::path::Path;
use std::sync::Arc;

/// Names, types, contents and symlink targets.
fn same_content(a: &Path, b: &Path) -> usize {
    let list = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let (la, lb) = (list(a), list(b));
    assert_eq!(la, lb, "entries of {} vs {}", a.display(), b.display());
    let mut n = 0;
    for name in la {
        let (pa, pb) = (a.join(&name), b.join(&name));
        let (ma, mb) = (
            fs::symlink_metadata(&pa).unwrap(),
            fs::symlink_metadata(&pb).unwrap(),
        );
        assert_eq!(
            ma.file_type().is_dir(),
            mb.file_type().is_dir(),
            "{}",
            pb.display()
        );
        assert_eq!(ma.len(), mb.len(), "size of {}", pb.display());
        n += 1;
        if ma.is_dir() {
            n += same_content(&pa, &pb);
        } else if ma.file_type().is_symlink() {
            assert_eq!(
                fs::read_link(&pa).unwrap(),
                fs::read_link(&pb).unwrap(),
                "{}",
                pb.display()
            );
        } else {
            assert!(
                fs::read(&pa).unwrap() == fs::read(&pb).unwrap(),
                "content of {}",
                pb.display()
            );
        }
    }
    n
}

fn run(tag: &str, args: &[&str]) {
    need!(root, fuse, gocryptfs);
    alone!(shared);
    let t = TempDir::new(tag);
    let pf = passfile(&t);
    let plain = t.join("plain");
    fs::create_dir(&plain).unwrap();
    make_tree(
        &plain,
        TreeOpts {
            max_name: 255,
            extras: false,
        },
    );
    let mut a = vec!["-reverse"];
    a.extend_from_slice(args);
    gocryptfs_init(&plain, &pf, &a);
    let cd = Arc::new(CipherDir::open_reverse(&plain, PASSWORD.as_bytes()).unwrap());
    let ours = t.join("ours");
    fs::create_dir(&ours).unwrap();
    let m = mount_reverse(cd, &ours, &OverlayOptions::default()).unwrap();
    {
        let g = Mount::new(&plain, &t.join("theirs"), &pf, &["-reverse", "-ro"]);
        let n = same_content(g.path(), m.mountpoint());
        assert!(n > 25, "compared {n}");
    }
    {
        let back = Mount::new(m.mountpoint(), &t.join("back"), &pf, &["-ro"]);
        fs::remove_file(plain.join(".gocryptfs.reverse.conf")).unwrap();
        assert_same_tree(&plain, back.path(), false);
    }
    m.unmount().unwrap();
}

#[test]
fn default() {
    run("ovl-rev-default", &[]);
}

#[test]
fn deterministic_names() {
    run("ovl-rev-det", &["-deterministic-names"]);
}

#[test]
fn plaintextnames() {
    run("ovl-rev-plain", &["-plaintextnames"]);
}
