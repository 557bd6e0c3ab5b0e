//! A key derivation that takes long (a large but valid scrypt N, PBKDF2
//! or Argon2 costs from a hostile header) never holds a command hostage:
//! SIGTERM to `fs mount` or `open` (background, foreground, with or without
//! a keep) ends it within a second or two with exit 143 and one line on
//! standard error, leaving nothing mounted, no state and no process of
//! ours behind; SIGKILL to it takes every child doing key work along
//! (parent-death signal). And a config with scrypt parameters gocryptfs
//! calls too large is refused with exit 6 before any derivation (it used
//! to abort on a 2 TiB allocation). Needs root and /dev/fuse.

// Not every shared helper is used here.
use crate::common::{ck, tempdir};
#[allow(dead_code)]
use cryptkeep_testkit::need;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A test directory, unmounted and removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(self.0.join("m"))
            .output();
        let _ = fs::remove_dir_all(&self.0);
    }
}

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = Dir(tempdir(&format!("ck-intr-{tag}")));
        fs::create_dir(d.0.join("m")).unwrap();
        fs::write(d.0.join("pw"), b"interrupt password\n").unwrap();
        d
    }

    fn p(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }

    /// A cipher directory whose config asks for scrypt N = 2^22 (4 GiB,
    /// about ten seconds here): valid, and slow to unlock.
    fn slow_cipherdir(&self) -> String {
        let (c, pw) = (self.p("c"), self.p("pw"));
        ck(
            &self.0,
            &["fs", "init", &c, "--passfile", &pw, "--scryptn", "10"],
        );
        edit_conf(&self.0.join("c/gocryptfs.conf"), |v| {
            v["ScryptObject"]["N"] = (1u64 << 22).into()
        });
        c
    }

    /// Starts `cryptkeep ARGS` with its run directory here and its
    /// standard error in the file `err` (not a pipe: a process left behind
    /// would hold a pipe open).
    fn start(&self, args: &[&str]) -> Child {
        Command::new(crate::common::BIN)
            .env("CRYPTKEEP_RUN_DIR", self.0.join("run"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(self.0.join("err")).unwrap())
            .spawn()
            .unwrap()
    }

    /// What the last command started wrote to standard error.
    fn stderr(&self) -> String {
        fs::read_to_string(self.0.join("err")).unwrap_or_default()
    }

    /// Processes (other than zombies) whose command line names this directory.
    fn leftovers(&self) -> Vec<String> {
        let mark = self.0.display().to_string();
        let me = std::process::id().to_string();
        fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .filter(|e| e.file_name().to_str() != Some(me.as_str()))
            .filter_map(|e| {
                let cmd = fs::read(e.path().join("cmdline")).ok()?;
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                cmd.contains(&mark)
                    .then(|| format!("{}: {cmd}", e.file_name().to_string_lossy()))
            })
            .collect()
    }

    /// Whether anything is mounted at or below this directory.
    fn mounted(&self) -> Vec<String> {
        let mark = self.0.display().to_string();
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .filter(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&mark)))
            .map(str::to_string)
            .collect()
    }

    /// Runs `cryptkeep ARGS`, sends `sig` after half a second and checks it
    /// ends within 2 s, leaving nothing behind. Returns its exit status
    /// code (None if killed) and standard error.
    fn interrupt(&self, args: &[&str], sig: i32) -> (Option<i32>, String) {
        let mut child = self.start(args);
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            child.try_wait().unwrap().is_none(),
            "{args:?} ended before the signal: {}",
            self.stderr()
        );
        // SAFETY: kill with our child's pid and a valid signal.
        unsafe { libc::kill(child.id() as i32, sig) };
        let sent = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if sent.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                panic!("{args:?} still runs 5 s after signal {sig}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = sent.elapsed();
        assert!(took < Duration::from_secs(2), "{args:?} took {took:?}");
        let err = self.stderr();
        // Give a killed process's children the moment the kernel needs.
        let deadline = Instant::now() + Duration::from_secs(1);
        while !self.leftovers().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(self.leftovers(), Vec::<String>::new(), "{args:?}: {err}");
        assert_eq!(self.mounted(), Vec::<String>::new(), "{args:?}: {err}");
        (status.code(), err)
    }
}

/// Rewrites a gocryptfs.conf (mode 0400) with `f`.
fn edit_conf(path: &Path, f: impl Fn(&mut Value)) {
    let mut v: Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
    f(&mut v);
    fs::remove_file(path).unwrap();
    fs::write(path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

/// Checks the one-line message of an interrupted command (after the line
/// announcing a long key derivation, if there is one).
fn assert_interrupted(code: Option<i32>, err: &str, what: &str) {
    assert_eq!(code, Some(143), "{what}: {err}");
    let err = match err.split_once('\n') {
        Some((first, rest)) if first.starts_with("cryptkeep: the key derivation will take ") => {
            rest
        }
        _ => err,
    };
    assert!(
        err.starts_with("cryptkeep: interrupted by SIGTERM while unlocking"),
        "{what}: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{what}: {err}");
}

#[test]
fn sigterm_stops_fs_mount_during_scrypt() {
    need!(root, fuse);
    let d = Dir::new("fs");
    let c = d.slow_cipherdir();
    let (m, pw) = (d.p("m"), d.p("pw"));
    let base = ["fs", "mount", &c, &m, "--passfile", &pw];
    for extra in [
        &[][..],
        &["--foreground"],
        &["--keep"],
        &["--keep", "--foreground"],
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let (code, err) = d.interrupt(&args, libc::SIGTERM);
        assert_interrupted(code, &err, &format!("fs mount {extra:?}"));
    }
}

#[test]
fn sigkill_of_fs_mount_takes_its_children_along() {
    need!(root, fuse);
    let d = Dir::new("fskill");
    let c = d.slow_cipherdir();
    let (m, pw) = (d.p("m"), d.p("pw"));
    for keep in [false, true] {
        let mut args = vec!["fs", "mount", &c, &m, "--passfile", &pw];
        if keep {
            args.push("--keep");
        }
        let (code, _) = d.interrupt(&args, libc::SIGKILL);
        assert_eq!(code, None, "killed");
    }
}

/// A LUKS1 volume whose keyslot 0 asks for 2^32 - 16 PBKDF2 iterations
/// (hours; LUKS1 keyslots carry no checksum).
fn slow_luks1(d: &Dir) -> String {
    let (v, pw) = (d.p("v1.img"), d.p("pw"));
    ck(
        &d.0,
        &[
            "format",
            &v,
            "--size",
            "20M",
            "--type",
            "luks1",
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
            "--key-file",
            &pw,
            "--batch-mode",
        ],
    );
    let mut img = fs::read(&v).unwrap();
    // Keyslot 0 starts at 208; its iteration count is the next field.
    img[212..216].copy_from_slice(&0xFFFF_FFF0u32.to_be_bytes());
    fs::write(&v, img).unwrap();
    v
}

/// A LUKS2 volume whose argon2id keyslot 0 asks for 2^31 passes over
/// 64 MiB (both JSON copies rewritten, checksums fixed).
fn slow_luks2(d: &Dir) -> String {
    let (v, pw) = (d.p("v2.img"), d.p("pw"));
    ck(
        &d.0,
        &[
            "format",
            &v,
            "--size",
            "40M",
            "--pbkdf",
            "argon2id",
            "--pbkdf-force-iterations",
            "4",
            "--pbkdf-memory",
            "32",
            "--pbkdf-parallel",
            "1",
            "--key-file",
            &pw,
            "--batch-mode",
        ],
    );
    crate::support::make_argon2_endless(Path::new(&v));
    v
}

#[test]
fn sigterm_stops_open_during_the_keyslot_kdf() {
    need!(root, fuse);
    let d = Dir::new("open");
    let pw = d.p("pw");
    let v1 = slow_luks1(&d);
    let v2 = slow_luks2(&d);
    let run = d.0.join("run");
    for v in [&v1, &v2] {
        for extra in [&[][..], &["--keep", "inline"], &["--foreground"]] {
            let mut args = vec!["open", v.as_str(), "intr", "--key-file", &pw];
            args.extend_from_slice(extra);
            let (code, err) = d.interrupt(&args, libc::SIGTERM);
            assert_interrupted(code, &err, &format!("open {v} {extra:?}"));
            assert!(!run.join("intr").exists(), "open {extra:?} left its state");
        }
    }
    // Killed outright, open takes the daemon and the keep along.
    let (code, _) = d.interrupt(&["open", &v2, "intr", "--key-file", &pw], libc::SIGKILL);
    assert_eq!(code, None);
}

#[test]
fn scrypt_parameters_gocryptfs_calls_too_large_exit_6() {
    need!(root, fuse);
    let d = Dir::new("conf");
    let (c, m, pw) = (d.p("c"), d.p("m"), d.p("pw"));
    ck(
        &d.0,
        &["fs", "init", &c, "--passfile", &pw, "--scryptn", "10"],
    );
    let conf = d.0.join("c/gocryptfs.conf");
    edit_conf(&conf, |v| v["ScryptObject"]["P"] = (1u64 << 31).into());
    for args in [
        vec!["fs", "fsck", &c, "--passfile", &pw],
        vec!["fs", "passwd", &c, "--passfile", &pw, "--new-passfile", &pw],
        vec!["fs", "mount", &c, &m, "--passfile", &pw],
        vec!["fs", "mount", &c, &m, "--passfile", &pw, "--keep"],
        vec!["fs", "info", &c],
    ] {
        let out = Command::new(crate::common::BIN)
            .env("CRYPTKEEP_RUN_DIR", d.0.join("run"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("gocryptfs.conf"), "{args:?}: {err}");
        assert!(err.contains("P=2147483648"), "{args:?}: {err}");
    }
    // A symbolic link in its place is not followed.
    let real = d.0.join("real.conf");
    fs::rename(&conf, &real).unwrap();
    std::os::unix::fs::symlink(&real, &conf).unwrap();
    let out = Command::new(crate::common::BIN)
        .args(["fs", "info", &c])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert!(err.contains("symbolic link"), "{err}");
}
