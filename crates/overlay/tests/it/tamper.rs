//! Tampering and bad input, with gocryptfs as the oracle where it has an
//! opinion: a flipped byte fails exactly its block (for us and for
//! gocryptfs), wrong passwords and altered keys give the opaque password
//! error, unknown or conflicting flags are refused by name, a missing
//! diriv or an undecryptable name is a clear error.

use crate::common::*;
use cryptkeep_overlay::{CipherDir, Error, FileHeader, HEADER_LEN, PLAIN_BS};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A gocryptfs-made file system with one 3-block file "f"; returns the
/// temp dir, the cipher dir and the cipher path of "f".
fn fs_with_file(tag: &str) -> (TempDir, PathBuf, PathBuf) {
    let t = TempDir::new(tag);
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, &[]);
    {
        let m = Mount::new(&cipher, &t.join("mnt"), &pf, &[]);
        fs::write(m.path().join("f"), bytes(7, 3 * PLAIN_BS)).unwrap();
    }
    let cd = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap();
    let cf = cd.encrypt_path(Path::new("f")).unwrap();
    assert!(cf.exists());
    (t, cipher, cf)
}

fn flip(path: &Path, off: usize) {
    let mut b = fs::read(path).unwrap();
    b[off] ^= 0x20;
    let mut perm = fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perm.set_readonly(false);
    fs::set_permissions(path, perm).unwrap();
    fs::write(path, b).unwrap();
}

#[test]
fn flipped_byte_fails_only_its_block() {
    need!(fuse, gocryptfs);
    let (t, cipher, cf) = fs_with_file("flip");
    let cd = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap();
    let cbs = cd.content().cipher_bs();
    flip(&cf, HEADER_LEN + cbs + 500); // block 1
    match cd.decrypt_file_to(&cf, &t.join("out")) {
        Err(Error::Auth {
            path: Some(p),
            block: Some(1),
        }) => assert_eq!(p, cf),
        other => panic!("expected an auth error for block 1, got {other:?}"),
    }
    let ct = fs::read(&cf).unwrap();
    let h = FileHeader::parse(&ct[..HEADER_LEN]).unwrap();
    let plain = bytes(7, 3 * PLAIN_BS);
    for k in 0..3usize {
        let blk = &ct[HEADER_LEN + k * cbs..HEADER_LEN + (k + 1) * cbs];
        let r = cd.content().decrypt_block(k as u64, &h.id, blk);
        if k == 1 {
            let e = r.unwrap_err();
            assert!(e.is_auth());
            assert!(e.to_string().contains("block 1"), "{e}");
        } else {
            assert_eq!(r.unwrap(), plain[k * PLAIN_BS..(k + 1) * PLAIN_BS]);
        }
    }
    // gocryptfs agrees: block 0 and 2 read, block 1 is EIO.
    let m = Mount::new(&cipher, &t.join("mnt2"), &passfile(&t), &[]);
    let f = fs::File::open(m.path().join("f")).unwrap();
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; PLAIN_BS];
    f.read_exact_at(&mut buf, 0).unwrap();
    f.read_exact_at(&mut buf, 2 * PLAIN_BS as u64).unwrap();
    let e = f.read_exact_at(&mut buf, PLAIN_BS as u64).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
}

#[test]
fn altered_header_or_truncation_is_caught() {
    need!(fuse, gocryptfs);
    let (t, cipher, cf) = fs_with_file("header");
    let cd = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap();
    let orig = fs::read(&cf).unwrap();
    flip(&cf, 5); // the file ID: every block's AD changes
    assert!(matches!(
        cd.decrypt_file_to(&cf, &t.join("o1")),
        Err(Error::Auth { block: Some(0), .. })
    ));
    flip(&cf, 5);
    flip(&cf, 1); // version 2 -> 34
    assert!(matches!(
        cd.decrypt_file_to(&cf, &t.join("o2")),
        Err(Error::BadHeader { path: Some(_), .. })
    ));
    fs::write(&cf, &orig[..orig.len() - 100]).unwrap(); // cut into the last block
    assert!(matches!(
        cd.decrypt_file_to(&cf, &t.join("o3")),
        Err(Error::Auth { block: Some(2), .. })
    ));
    fs::write(&cf, &orig).unwrap();
    assert_eq!(
        cd.decrypt_file_to(&cf, &t.join("o4")).unwrap(),
        3 * PLAIN_BS as u64
    );
}

#[test]
fn wrong_password_and_altered_key() {
    need!(gocryptfs);
    let t = TempDir::new("pw");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, &[]);
    let e = CipherDir::open(&cipher, b"not the password").unwrap_err();
    assert!(matches!(e, Error::WrongPassword { .. }), "{e:?}");
    assert!(e.is_auth());
    assert!(e.to_string().contains("password"), "{e}");
    // Altering the encrypted master key gives the same opaque error.
    let conf = cipher.join("gocryptfs.conf");
    let text = fs::read_to_string(&conf).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let k = v["EncryptedKey"].as_str().unwrap().to_string();
    let first = if k.as_bytes()[0] == b'A' { 'B' } else { 'A' };
    let alt = format!("{first}{}", &k[1..]);
    v["EncryptedKey"] = serde_json::Value::String(alt);
    write_conf(&conf, &v);
    let e = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap_err();
    assert!(matches!(e, Error::WrongPassword { .. }), "{e:?}");
}

fn write_conf(conf: &Path, v: &serde_json::Value) {
    let _ = fs::remove_file(conf);
    fs::write(conf, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

fn conf_value(cipher: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(cipher.join("gocryptfs.conf")).unwrap()).unwrap()
}

#[test]
fn unknown_and_conflicting_flags_are_refused() {
    need!(gocryptfs);
    let t = TempDir::new("flags");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, &[]);
    let conf = cipher.join("gocryptfs.conf");
    let orig = conf_value(&cipher);

    let mut v = orig.clone();
    v["FeatureFlags"]
        .as_array_mut()
        .unwrap()
        .push("QuantumNames".into());
    write_conf(&conf, &v);
    let e = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap_err();
    assert!(
        matches!(&e, Error::UnknownFeatureFlag { flag, .. } if flag == "QuantumNames"),
        "{e:?}"
    );
    assert!(e.to_string().contains("\"QuantumNames\""), "{e}");
    // gocryptfs refuses it too.
    let st = std::process::Command::new("gocryptfs")
        .args(["-fsck", "-q", "-passfile"])
        .arg(&pf)
        .arg(&cipher)
        .output()
        .unwrap();
    assert!(!st.status.success(), "gocryptfs accepted an unknown flag");

    let mut v = orig.clone();
    v["FeatureFlags"]
        .as_array_mut()
        .unwrap()
        .push("XChaCha20Poly1305".into());
    write_conf(&conf, &v);
    let e = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap_err();
    assert!(matches!(e, Error::ConfigUnsupported { .. }), "{e:?}");

    let mut v = orig.clone();
    v["Version"] = 3.into();
    write_conf(&conf, &v);
    assert!(matches!(
        CipherDir::open(&cipher, PASSWORD.as_bytes()),
        Err(Error::ConfigUnsupported { .. })
    ));

    let mut v = orig.clone();
    v["ScryptObject"]["N"] = 512.into();
    write_conf(&conf, &v);
    assert!(matches!(
        CipherDir::open(&cipher, PASSWORD.as_bytes()),
        Err(Error::ConfigUnsupported { .. })
    ));

    fs::write(&conf, "{ not json").unwrap();
    assert!(matches!(
        CipherDir::open(&cipher, PASSWORD.as_bytes()),
        Err(Error::ConfigSyntax { .. })
    ));
    fs::write(&conf, "").unwrap();
    assert!(matches!(
        CipherDir::open(&cipher, PASSWORD.as_bytes()),
        Err(Error::ConfigSyntax { .. })
    ));
    fs::remove_file(&conf).unwrap();
    assert!(matches!(
        CipherDir::open(&cipher, PASSWORD.as_bytes()),
        Err(Error::Io { .. })
    ));
}

#[test]
fn missing_diriv_and_bad_names_are_reported() {
    need!(fuse, gocryptfs);
    let t = TempDir::new("names");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, &[]);
    {
        let m = Mount::new(&cipher, &t.join("mnt"), &pf, &[]);
        fs::create_dir(m.path().join("dir")).unwrap();
        fs::write(m.path().join("dir").join("x"), b"x").unwrap();
    }
    let cd = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap();
    let cdir = cd.encrypt_path(Path::new("dir")).unwrap();

    // A stray file whose name is not an encrypted name.
    fs::write(cipher.join("not-base64!"), b"junk").unwrap();
    let e = cd.decrypt_tree(&t.join("out1")).unwrap_err();
    assert!(
        matches!(&e, Error::BadName { name, .. } if name == "not-base64!"),
        "{e:?}"
    );
    fs::remove_file(cipher.join("not-base64!")).unwrap();
    // Valid base64 of 16 bytes that is not an encryption under this IV.
    // About 1 in 256 such blocks decrypts to valid padding by chance (and
    // is then a legal, if odd, name), so try up to three.
    let mut reported = false;
    for c in [
        "AAAAAAAAAAAAAAAAAAAAAA",
        "BBBBBBBBBBBBBBBBBBBBBA",
        "CCCCCCCCCCCCCCCCCCCCCA",
    ] {
        fs::write(cipher.join(c), b"junk").unwrap();
        let r = cd.decrypt_tree(&t.join(&format!("out-{c}")));
        fs::remove_file(cipher.join(c)).unwrap();
        if matches!(r, Err(Error::BadName { .. })) {
            reported = true;
            break;
        }
    }
    assert!(reported, "three undecryptable names were all accepted");

    // The subdirectory's diriv is gone: a clear error naming it.
    let diriv = cdir.join("gocryptfs.diriv");
    let saved = fs::read(&diriv).unwrap();
    fs::remove_file(&diriv).unwrap();
    let e = cd.decrypt_tree(&t.join("out3")).unwrap_err();
    assert!(
        matches!(&e, Error::DirIv { path, .. } if *path == diriv),
        "{e:?}"
    );
    assert!(e.to_string().contains("gocryptfs.diriv"), "{e}");
    fs::write(&diriv, &saved[..8]).unwrap();
    assert!(matches!(
        cd.decrypt_tree(&t.join("out4")),
        Err(Error::DirIv { .. })
    ));
    fs::remove_file(&diriv).unwrap();
    fs::write(&diriv, &saved).unwrap();
    let st = cd.decrypt_tree(&t.join("out5")).unwrap();
    assert_eq!((st.files, st.dirs), (1, 1));
    let mut s = String::new();
    fs::File::open(t.join("out5").join("dir").join("x"))
        .unwrap()
        .read_to_string(&mut s)
        .unwrap();
    assert_eq!(s, "x");
}

#[test]
fn init_refuses_a_non_empty_directory() {
    let t = TempDir::new("init");
    fs::write(t.join("something"), b"").unwrap();
    let e = CipherDir::init(
        t.path(),
        b"pw",
        &cryptkeep_overlay::InitOptions {
            scrypt_log_n: 10,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::NotEmpty { .. }), "{e:?}");
}
