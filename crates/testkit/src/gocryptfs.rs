//! The gocryptfs binary as an oracle: creating cipher directories with it
//! and mounting them. Tests using these start with `need!(gocryptfs)`, and
//! `need!(fuse)` when they mount.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::run::run_cmd;
use crate::TempDir;

/// The password of every test cipher directory.
pub const PASSWORD: &str = "correct horse battery staple";

/// Writes [`PASSWORD`] to the file `passfile` in `dir`; its path.
pub fn passfile(dir: &TempDir) -> PathBuf {
    let p = dir.join("passfile");
    fs::write(&p, format!("{PASSWORD}\n")).unwrap();
    p
}

/// `gocryptfs -init -passfile F -scryptn 10 EXTRA CIPHER`.
pub fn gocryptfs_init(cipher: &Path, passfile: &Path, extra: &[&str]) {
    fs::create_dir_all(cipher).unwrap();
    run_cmd(
        Command::new("gocryptfs")
            .args(["-q", "-init", "-scryptn", "10", "-passfile"])
            .arg(passfile)
            .args(extra)
            .arg(cipher),
    );
}

/// Runs a command that daemonizes (its child keeps stdout/stderr open, so
/// `output()` would never return): output goes to a log file instead.
fn run_daemonizing(cmd: &mut Command, log: &Path) {
    let f = fs::File::create(log).unwrap();
    let status = cmd
        .stdin(std::process::Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        status.success(),
        "{cmd:?} failed ({status}):\n{}",
        fs::read_to_string(log).unwrap_or_default()
    );
}

/// A gocryptfs mount, unmounted on drop.
#[derive(Debug)]
pub struct Mount {
    mnt: PathBuf,
}

impl Mount {
    /// `gocryptfs -passfile F EXTRA CIPHER MNT` (returns once mounted).
    pub fn new(cipher: &Path, mnt: &Path, passfile: &Path, extra: &[&str]) -> Mount {
        fs::create_dir_all(mnt).unwrap();
        run_daemonizing(
            Command::new("gocryptfs")
                .args(["-q", "-nosyslog", "-passfile"])
                .arg(passfile)
                .args(extra)
                .arg(cipher)
                .arg(mnt),
            &mnt.with_extension("log"),
        );
        Mount {
            mnt: mnt.to_path_buf(),
        }
    }

    /// Mounts with `-masterkey HEX` instead of a password.
    pub fn with_master_key(cipher: &Path, mnt: &Path, hex: &str, extra: &[&str]) -> Mount {
        fs::create_dir_all(mnt).unwrap();
        run_daemonizing(
            Command::new("gocryptfs")
                .args(["-q", "-nosyslog", "-masterkey", hex])
                .args(extra)
                .arg(cipher)
                .arg(mnt),
            &mnt.with_extension("log"),
        );
        Mount {
            mnt: mnt.to_path_buf(),
        }
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        for _ in 0..50 {
            let ok = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.mnt)
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.mnt)
            .status();
    }
}
