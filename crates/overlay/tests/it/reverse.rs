//! Reverse mode against `gocryptfs -reverse`: our materialised cipher view
//! of a plaintext tree equals gocryptfs's view byte for byte (names,
//! diriv and .name files, contents, symlink targets), for configs made by
//! either tool; and the view decrypts back to the plaintext.

use crate::common::*;
use cryptkeep_overlay::{CipherDir, InitOptions};
use std::fs;
use std::path::Path;

/// Names, types, contents and symlink targets (not modes or times: our
/// materialised copy has its own).
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

fn run(tag: &str, gocryptfs_args: &[&str], ours_init: Option<InitOptions>) {
    need!(fuse, gocryptfs);
    let t = TempDir::new(tag);
    let pf = passfile(&t);
    let plain = t.join("plain");
    fs::create_dir(&plain).unwrap();
    let tree = TreeOpts {
        max_name: 255,
        extras: false,
    };
    make_tree(&plain, tree);
    match &ours_init {
        Some(o) => {
            CipherDir::init_reverse(&plain, PASSWORD.as_bytes(), o).unwrap();
        }
        None => {
            let mut args = vec!["-reverse"];
            args.extend_from_slice(gocryptfs_args);
            gocryptfs_init(&plain, &pf, &args);
        }
    }
    let cd = CipherDir::open_reverse(&plain, PASSWORD.as_bytes()).unwrap();
    let ours = t.join("ours");
    let st = cd.reverse_tree(&ours).unwrap();
    assert!(st.files > 10, "{st:?}");
    {
        let m = Mount::new(&plain, &t.join("mnt"), &pf, &["-reverse", "-ro"]);
        let n = same_content(m.path(), &ours);
        assert!(n > 25, "compared {n}");
    }
    // The view is an ordinary (forward) cipher directory: it decrypts back.
    let back = t.join("back");
    cryptkeep_overlay::decrypt_tree(&ours, PASSWORD.as_bytes(), &back).unwrap();
    fs::remove_file(plain.join(".gocryptfs.reverse.conf")).unwrap();
    same_content(&plain, &back);
}

#[test]
fn gocryptfs_config_default() {
    run("rev-default", &[], None);
}

#[test]
fn gocryptfs_config_deterministic_names() {
    run("rev-det", &["-deterministic-names"], None);
}

#[test]
fn gocryptfs_config_plaintextnames() {
    run("rev-plain", &["-plaintextnames"], None);
}

#[test]
fn our_config_default() {
    run(
        "rev-ours",
        &[],
        Some(InitOptions {
            scrypt_log_n: 10,
            ..InitOptions::default()
        }),
    );
}

#[test]
fn our_config_longnamemax() {
    run(
        "rev-ours-lnm",
        &[],
        Some(InitOptions {
            scrypt_log_n: 10,
            long_name_max: 100,
            ..InitOptions::default()
        }),
    );
}
