//! Both directions against the real gocryptfs, for every variant:
//! gocryptfs writes a tree through its mount and our `decrypt_tree`
//! reproduces it byte for byte (names, contents, holes, symlinks, xattrs,
//! hard links); our `init` + `encrypt_tree` is mounted by gocryptfs, reads
//! back identical, and `gocryptfs -fsck` is clean.

use crate::common::*;
use cryptkeep_overlay::{CipherDir, Config, InitOptions};
use std::process::Command;

struct Variant {
    args: &'static [&'static str],
    opts: InitOptions,
    tree: TreeOpts,
}

fn variant(name: &str) -> Variant {
    let base = InitOptions {
        scrypt_log_n: 10,
        ..InitOptions::default()
    };
    let tree = TreeOpts::default();
    match name {
        "default" => Variant {
            args: &[],
            opts: base,
            tree,
        },
        "aessiv" => Variant {
            args: &["-aessiv"],
            opts: InitOptions {
                aessiv: true,
                ..base
            },
            tree,
        },
        "xchacha" => Variant {
            args: &["-xchacha"],
            opts: InitOptions {
                xchacha: true,
                ..base
            },
            tree,
        },
        "plaintextnames" => Variant {
            args: &["-plaintextnames"],
            opts: InitOptions {
                plaintext_names: true,
                ..base
            },
            tree,
        },
        "deterministic" => Variant {
            args: &["-deterministic-names"],
            opts: InitOptions {
                deterministic_names: true,
                ..base
            },
            tree,
        },
        "longnamemax" => Variant {
            args: &["-longnamemax", "100"],
            opts: InitOptions {
                long_name_max: 100,
                ..base
            },
            tree,
        },
        _ => unreachable!(),
    }
}

/// gocryptfs writes the tree; we decrypt it.
fn forward(name: &str) {
    need!(fuse, gocryptfs);
    let v = variant(name);
    let t = TempDir::new(&format!("fwd-{name}"));
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, v.args);
    let reference = t.join("ref");
    std::fs::create_dir(&reference).unwrap();
    make_tree(&reference, v.tree);
    {
        let m = Mount::new(&cipher, &t.join("mnt"), &pf, &[]);
        make_tree(m.path(), v.tree);
    }
    let out = t.join("out");
    let st = cryptkeep_overlay::decrypt_tree(&cipher, PASSWORD.as_bytes(), &out)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        st.files >= 15 && st.symlinks == 5 && st.hardlinks == 1,
        "{st:?}"
    );
    let n = assert_same_tree(&reference, &out, true);
    assert!(n > 25, "compared only {n} entries");
}

/// We create the file system and write the tree; gocryptfs reads it.
fn reverse(name: &str) {
    need!(fuse, gocryptfs);
    let v = variant(name);
    let t = TempDir::new(&format!("rev-{name}"));
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    let reference = t.join("ref");
    std::fs::create_dir(&reference).unwrap();
    make_tree(&reference, v.tree);
    let (cd, mk) = CipherDir::init(&cipher, PASSWORD.as_bytes(), &v.opts).unwrap();
    cd.encrypt_tree(&reference)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    {
        let m = Mount::new(&cipher, &t.join("mnt"), &pf, &["-ro"]);
        assert_same_tree(&reference, m.path(), true);
    }
    // The master key we report mounts too (gocryptfs then ignores the
    // config, so the variant's flags are repeated on the command line).
    {
        let m = Mount::with_master_key(&cipher, &t.join("mnt2"), &mk.to_display_hex(), v.args);
        assert_eq!(
            std::fs::read(m.path().join("size-4097")).unwrap(),
            std::fs::read(reference.join("size-4097")).unwrap()
        );
    }
    let out = Command::new("gocryptfs")
        .args(["-fsck", "-q", "-passfile"])
        .arg(&pf)
        .arg(&cipher)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: gocryptfs -fsck failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // And our own reader agrees with our writer.
    let back = t.join("back");
    cd.decrypt_tree(&back).unwrap();
    assert_same_tree(&reference, &back, true);
}

/// Our `init` writes the same feature flags (in the same order) and
/// LongNameMax as `gocryptfs -init` with the same options.
fn same_config(name: &str) {
    need!(gocryptfs);
    let v = variant(name);
    let t = TempDir::new(&format!("conf-{name}"));
    let pf = passfile(&t);
    let theirs = t.join("theirs");
    gocryptfs_init(&theirs, &pf, v.args);
    let ours = t.join("ours");
    CipherDir::init(&ours, PASSWORD.as_bytes(), &v.opts).unwrap();
    let a = Config::load(&theirs.join("gocryptfs.conf")).unwrap();
    let b = Config::load(&ours.join("gocryptfs.conf")).unwrap();
    assert_eq!(a.flags(), b.flags(), "{name}");
    assert_eq!(a.long_name_max(), b.long_name_max(), "{name}");
    assert_eq!(a.scrypt().n, b.scrypt().n);
    let list = |d: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(&theirs), list(&ours), "{name}: files created by init");
    // Our config is valid for gocryptfs (it unlocks it and prints its info).
    run_cmd(
        Command::new("gocryptfs")
            .arg("-info")
            .arg("-passfile")
            .arg(&pf)
            .arg(&ours),
    );
}

macro_rules! variant_tests {
    ($($v:ident),*) => {
        mod forward { $( #[test] fn $v() { super::forward(stringify!($v)); } )* }
        mod reverse { $( #[test] fn $v() { super::reverse(stringify!($v)); } )* }
        mod same_config { $( #[test] fn $v() { super::same_config(stringify!($v)); } )* }
    };
}

variant_tests!(
    default,
    aessiv,
    xchacha,
    plaintextnames,
    deterministic,
    longnamemax
);
