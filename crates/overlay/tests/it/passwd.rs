//! Password changes both ways: `gocryptfs -passwd` on a config we read, and
//! our `change_password` on a config gocryptfs then mounts.

use crate::common::*;
use cryptkeep_overlay::config::change_password;
use cryptkeep_overlay::{CipherDir, Error};
use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn gocryptfs_passwd_then_we_open() {
    need!(gocryptfs);
    let t = TempDir::new("passwd-theirs");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, &[]);
    // gocryptfs 2.3 -passwd takes both passwords from -passfile if given,
    // so both go through stdin, one per line.
    let mut child = Command::new("gocryptfs")
        .args(["-q", "-passwd"])
        .arg(&cipher)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{PASSWORD}\nnew password\n").as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    assert!(matches!(
        CipherDir::open(&cipher, PASSWORD.as_bytes()),
        Err(Error::WrongPassword { .. })
    ));
    CipherDir::open(&cipher, b"new password").unwrap();
}

#[test]
fn we_change_password_then_gocryptfs_mounts() {
    need!(fuse, gocryptfs);
    let t = TempDir::new("passwd-ours");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, &[]);
    {
        let m = Mount::new(&cipher, &t.join("mnt"), &pf, &[]);
        std::fs::write(m.path().join("f"), b"kept across the change").unwrap();
    }
    let conf = cipher.join("gocryptfs.conf");
    assert!(change_password(&conf, b"wrong", b"x", 10)
        .unwrap_err()
        .is_auth());
    change_password(&conf, PASSWORD.as_bytes(), b"second password", 10).unwrap();
    let pf2 = t.join("passfile2");
    std::fs::write(&pf2, "second password\n").unwrap();
    let m = Mount::new(&cipher, &t.join("mnt2"), &pf2, &[]);
    assert_eq!(
        std::fs::read(m.path().join("f")).unwrap(),
        b"kept across the change"
    );
    assert!(!cipher.join("gocryptfs.conf.tmp").exists());
}
