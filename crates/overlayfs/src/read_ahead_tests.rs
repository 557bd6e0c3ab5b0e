//! Directory read-ahead on an unmounted [`OverlayFs`]: a listing read
//! ahead is served (with its attributes) only while no change was made
//! through the mount and it is younger than the attribute time-out.

use cryptkeep_overlay::{CipherDir, InitOptions};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::fs::OverlayFs;
use super::nodes::ROOT_INO;

/// The mount's cache time-out in these tests.
const TTL: Duration = Duration::from_millis(700);

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fs_in(s: &Scratch) -> OverlayFs {
    let opts = InitOptions {
        scrypt_log_n: 10,
        ..InitOptions::default()
    };
    let (cd, _) = CipherDir::init(&s.0.join("cipher"), b"pw", &opts).unwrap();
    OverlayFs::new(Arc::new(cd), false, false, TTL).unwrap()
}

fn names(fs: &OverlayFs, ino: u64) -> (Vec<String>, bool) {
    let (l, _) = fs.dir_items(ino, 0).unwrap();
    let mut v: Vec<String> = l.items[2..]
        .iter()
        .map(|i| i.name.to_string_lossy().into_owned())
        .collect();
    v.sort();
    (v, l.stats.is_some())
}

fn wait_ready(fs: &OverlayFs, ino: u64) {
    let t = Instant::now();
    while !fs.prefetch.is_ready(ino) {
        assert!(t.elapsed() < Duration::from_secs(10), "never read ahead");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn read_ahead_listings_follow_changes_through_the_mount() {
    let s = Scratch(std::env::temp_dir().join(format!("ck-readahead-{}", std::process::id())));
    let fs = fs_in(&s);
    let mkdir = |parent, name: &str| {
        fs.do_mkdir(parent, OsStr::new(name), 0o755, u32::MAX, u32::MAX)
            .unwrap()
            .ino
            .0
    };
    let mkfile = |parent, name: &str| {
        fs.do_mknod(
            parent,
            OsStr::new(name),
            libc::S_IFREG | 0o644,
            0,
            u32::MAX,
            u32::MAX,
        )
        .unwrap();
    };
    let p = mkdir(ROOT_INO, "p");
    let (c1, c2) = (mkdir(p, "c1"), mkdir(p, "c2"));
    mkfile(c1, "x");
    mkfile(c2, "y");
    // Read-ahead waits until the mount has been left alone for a while.
    std::thread::sleep(Duration::from_millis(120));

    // Listing p reads c1 and c2 ahead; c1's listing is served from there.
    assert_eq!(names(&fs, p), (vec!["c1".into(), "c2".into()], false));
    wait_ready(&fs, c1);
    wait_ready(&fs, c2);
    assert_eq!(names(&fs, c1), (vec!["x".into()], true));

    // A file created in c2 after its read-ahead: c2 is listed afresh.
    mkfile(c2, "z");
    assert_eq!(names(&fs, c2), (vec!["y".into(), "z".into()], false));

    // Read ahead again, then left longer than the attribute time-out.
    std::thread::sleep(Duration::from_millis(120));
    names(&fs, p);
    wait_ready(&fs, c1);
    std::thread::sleep(TTL + Duration::from_millis(100));
    assert_eq!(names(&fs, c1), (vec!["x".into()], false));
    fs.prefetch.stop();
}

#[test]
fn read_ahead_runs_down_the_tree_ahead_of_the_walk() {
    let s = Scratch(std::env::temp_dir().join(format!("ck-readahead-deep-{}", std::process::id())));
    let fs = fs_in(&s);
    let mut chain = vec![ROOT_INO];
    for name in ["a", "b", "c", "d"] {
        let parent = *chain.last().unwrap();
        let ino = fs
            .do_mkdir(parent, OsStr::new(name), 0o755, u32::MAX, u32::MAX)
            .unwrap()
            .ino
            .0;
        chain.push(ino);
    }
    fs.prefetch.stop();
    // A fresh mount of the same directory: the kernel knows none of them.
    let cd = CipherDir::open(&s.0.join("cipher"), b"pw").unwrap();
    let fs = OverlayFs::new(Arc::new(cd), false, false, TTL).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(names(&fs, ROOT_INO), (vec!["a".into()], false));
    // Listing the root alone reads a, and below it b, c and d, ahead.
    for &ino in &chain[1..] {
        wait_ready(&fs, ino);
    }
    assert_eq!(names(&fs, chain[3]), (vec!["d".into()], true));
    fs.prefetch.stop();
}
