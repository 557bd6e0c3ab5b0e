//! Reading `gocryptfs.conf`: hostile scrypt parameters are refused at load
//! time, naming the file and the parameter, before any key derivation; the
//! config inside a directory is never read through a symbolic link, nor
//! from a FIFO, device or directory, nor past `CONF_MAX_LEN` bytes.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::common::{init_cheap, TempDir};

use cryptkeep_overlay::config::CONF_MAX_LEN;
use cryptkeep_overlay::{Config, Error};
use serde_json::Value;

/// A fresh cipher directory (scrypt N = 2^10), removed on drop.
struct Dir(TempDir);

impl Dir {
    fn new(tag: &str) -> Dir {
        let t = TempDir::new(tag);
        init_cheap(&t.join("c"));
        Dir(t)
    }

    fn conf(&self) -> PathBuf {
        self.0.join("c/gocryptfs.conf")
    }

    /// Rewrites the config's JSON with `f`.
    fn edit(&self, f: impl Fn(&mut Value)) {
        let mut v: Value = serde_json::from_slice(&fs::read(self.conf()).unwrap()).unwrap();
        f(&mut v);
        fs::remove_file(self.conf()).unwrap();
        fs::write(self.conf(), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    }
}

fn load_err(p: &Path) -> String {
    let e = Config::load(p).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ConfigSyntax { .. } | Error::ConfigUnsupported { .. }
        ),
        "{e:?}"
    );
    let s = e.to_string();
    assert!(s.contains(&p.display().to_string()), "{s}");
    assert!(!s.contains('\n'), "{s}");
    s
}

#[test]
fn hostile_scrypt_parameters_are_refused_at_load() {
    let d = Dir::new("scrypt");
    let cases: [(&str, Value, &str); 7] = [
        ("P", (1u64 << 31).into(), "P=2147483648"),
        ("P", 0.into(), "P=0"),
        ("R", (1u64 << 27).into(), "R=134217728"),
        ("R", 4.into(), "R=4"),
        ("N", (1u64 << 23).into(), "N=2^23"),
        ("N", 1000.into(), "N=1000"),
        ("KeyLen", 64.into(), "KeyLen=64"),
    ];
    for (field, value, want) in cases {
        let keep = fs::read(d.conf()).unwrap();
        d.edit(|v| v["ScryptObject"][field] = value.clone());
        let s = load_err(&d.conf());
        assert!(s.contains(want), "{field}: {s}");
        fs::remove_file(d.conf()).unwrap();
        fs::write(d.conf(), &keep).unwrap();
    }
    d.edit(|v| v["ScryptObject"]["Salt"] = "YWJj".into());
    assert!(load_err(&d.conf()).contains("salt of 3 bytes"));
}

#[test]
fn the_config_in_a_directory_is_not_followed_through_a_symlink() {
    let d = Dir::new("link");
    let real = d.0.join("real.conf");
    fs::rename(d.conf(), &real).unwrap();
    symlink(&real, d.conf()).unwrap();
    assert!(load_err(&d.conf()).contains("symbolic link"));
    // Named explicitly (gocryptfs -config), a link is followed.
    Config::load_named(&d.conf()).unwrap();
    Config::load(&real).unwrap();
}

#[test]
fn only_regular_files_of_bounded_size_are_read() {
    let d = Dir::new("kinds");
    fs::remove_file(d.conf()).unwrap();
    // A FIFO nobody writes to: opening it must not block.
    let c = std::ffi::CString::new(d.conf().to_str().unwrap()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(load_err(&d.conf()).contains("a FIFO"));
    assert!(Config::load_named(&d.conf())
        .unwrap_err()
        .to_string()
        .contains("a FIFO"));
    fs::remove_file(d.conf()).unwrap();
    fs::create_dir(d.conf()).unwrap();
    assert!(load_err(&d.conf()).contains("a directory"));
    fs::remove_dir(d.conf()).unwrap();
    symlink("/dev/zero", d.conf()).unwrap();
    assert!(Config::load_named(&d.conf())
        .unwrap_err()
        .to_string()
        .contains("a character device"));
    fs::remove_file(d.conf()).unwrap();
    // Sparse, so the size costs no disk.
    let f = fs::File::create(d.conf()).unwrap();
    f.set_len(CONF_MAX_LEN + 1).unwrap();
    assert!(load_err(&d.conf()).contains(&format!("{} bytes", CONF_MAX_LEN + 1)));
    f.set_len(10 << 30).unwrap();
    assert!(load_err(&d.conf()).contains("more than the"));
}
