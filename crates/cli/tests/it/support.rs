//! Helpers of the CLI tests for the run directory, open volumes and
//! key-work processes: a work directory with its own run directory that
//! closes, unmounts and detaches everything it opened when dropped.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The cryptkeep binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_cryptkeep");

/// An unprivileged uid/gid for "another user".
pub const OTHER_UID: u32 = 64123;

/// A work directory `/tmp/ck-TAG.XXXXXX` (mode 0700) with a passphrase
/// file `pass` and the run directory `run` (not created).
pub struct Work {
    /// The directory.
    pub dir: PathBuf,
    /// The run directory commands get.
    pub run: PathBuf,
}

/// What a finished command gave.
#[derive(Debug)]
pub struct Out {
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Work {
    /// A new work directory.
    pub fn new(tag: &str) -> Work {
        let out = Command::new("mktemp")
            .args(["-d", &format!("/tmp/ck-{tag}.XXXXXX")])
            .output()
            .unwrap();
        let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        fs::write(dir.join("pass"), b"test passphrase").unwrap();
        let run = dir.join("run");
        Work { dir, run }
    }

    /// A path in the work directory, as a string.
    pub fn p(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A command running `cryptkeep ARGS` with this run directory.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.env("CRYPTKEEP_RUN_DIR", &self.run)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    /// Runs `cryptkeep ARGS` to the end.
    pub fn run(&self, args: &[&str]) -> Out {
        out(self.cmd(args).output().unwrap())
    }

    /// Runs `cryptkeep ARGS`, which must succeed.
    pub fn ok(&self, args: &[&str]) -> Out {
        let o = self.run(args);
        assert_eq!(o.code, Some(0), "cryptkeep {args:?}: {}", o.stderr);
        o
    }

    /// Starts `cryptkeep ARGS` with standard error in the file `err`
    /// (not a pipe: a process left behind would hold a pipe open).
    pub fn start(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::null())
            .stderr(fs::File::create(self.dir.join("err")).unwrap())
            .spawn()
            .unwrap()
    }

    /// What the last command started wrote to standard error.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.dir.join("err")).unwrap_or_default()
    }

    /// A LUKS2 image `name` of 40 MiB with one cheap PBKDF2 keyslot.
    pub fn volume(&self, name: &str) -> String {
        let v = self.p(name);
        let pass = self.p("pass");
        self.ok(&[
            "format",
            &v,
            "--size",
            "40M",
            "--pbkdf",
            "pbkdf2",
            "--pbkdf-force-iterations",
            "1000",
            "--key-file",
            &pass,
            "--batch-mode",
        ]);
        v
    }

    /// A LUKS1 image `name` whose keyslot 0 asks for 2^32 - 16 PBKDF2
    /// iterations (hours; LUKS1 keyslots carry no checksum).
    pub fn slow_luks1(&self, name: &str) -> String {
        let v = self.p(name);
        let pass = self.p("pass");
        self.ok(&[
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
            &pass,
            "--batch-mode",
        ]);
        let mut img = fs::read(&v).unwrap();
        // Keyslot 0 starts at 208; its iteration count is the next field.
        img[212..216].copy_from_slice(&0xFFFF_FFF0u32.to_be_bytes());
        fs::write(&v, img).unwrap();
        v
    }

    /// A LUKS2 image `name` whose argon2id keyslot 0 asks for 2^31 passes
    /// over 64 MiB (both JSON copies rewritten, checksums fixed).
    pub fn slow_luks2(&self, name: &str) -> String {
        let v = self.p(name);
        let pass = self.p("pass");
        self.ok(&[
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
            &pass,
            "--batch-mode",
        ]);
        make_argon2_endless(Path::new(&v));
        v
    }

    /// Processes (other than zombies) whose command line names this
    /// directory, as "PID: ARGS".
    pub fn leftovers(&self) -> Vec<String> {
        let mark = self.dir.display().to_string();
        let me = std::process::id().to_string();
        let mut v = Vec::new();
        for e in fs::read_dir("/proc").unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.parse::<u32>().is_err() || name == me {
                continue;
            }
            let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&mark) {
                v.push(format!("{name}: {cmd}"));
            }
        }
        v
    }

    /// Waits up to `secs` for [`Work::leftovers`] to be empty; returns them.
    pub fn leftovers_after(&self, secs: u64) -> Vec<String> {
        let end = Instant::now() + Duration::from_secs(secs);
        loop {
            let l = self.leftovers();
            if l.is_empty() || Instant::now() > end {
                return l;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        if let Ok(rd) = fs::read_dir(&self.run) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().to_string();
                if !n.starts_with('.') && n != "fs" {
                    let _ = self.cmd(&["close", &n]).output();
                }
            }
        }
        let mark = self.dir.display().to_string();
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mps: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| m.starts_with(&mark))
            .collect();
        mps.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mps {
            let _ = Command::new("umount").args(["-l", m]).output();
        }
        if let Ok(o) = Command::new("losetup")
            .args(["-n", "-O", "NAME,BACK-FILE"])
            .output()
        {
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                let mut it = l.split_whitespace();
                if let (Some(dev), Some(back)) = (it.next(), it.next()) {
                    if back.starts_with(&mark) {
                        let _ = Command::new("losetup").args(["-d", dev]).output();
                    }
                }
            }
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// An [`Out`] from a finished process.
pub fn out(o: std::process::Output) -> Out {
    Out {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Waits up to `secs` for `child` to end; its exit code (`None`: killed).
pub fn wait_for(child: &mut Child, secs: u64) -> Option<i32> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill with a positive pid and a valid signal.
    unsafe { libc::kill(pid as i32, sig) };
}

/// SHA-256 of a file, hex.
pub fn file_hash(p: &Path) -> String {
    let o = Command::new("sha256sum").arg(p).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The mode bits (0o7777) of `p`, not following a symlink.
pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// Runs `prog ARGS` as [`OTHER_UID`] (setpriv); its output.
pub fn as_other_user(prog: &str, args: &[&str]) -> Out {
    let uid = OTHER_UID.to_string();
    out(Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", prog])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap())
}

/// Field 22 of /proc/PID/stat: the process's start time.
pub fn start_time(pid: u32) -> u64 {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = s.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            !s.rsplit_once(')')
                .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// Asserts `o` failed with `code` and one line on standard error that
/// starts with `cryptkeep: ` and contains every one of `parts`.
pub fn assert_error(o: &Out, code: i32, parts: &[&str]) {
    assert_eq!(o.code, Some(code), "{o:?}");
    assert_eq!(o.stderr.lines().count(), 1, "{o:?}");
    assert!(o.stderr.starts_with("cryptkeep: "), "{o:?}");
    for p in parts {
        assert!(o.stderr.contains(p), "{p:?} not in {:?}", o.stderr);
    }
}

/// Rewrites the LUKS2 image at `v` so that keyslot 0's argon2id asks for
/// 2^31 passes over 64 MiB: both JSON copies, checksums fixed.
pub fn make_argon2_endless(v: &Path) {
    let mut img = fs::read(v).unwrap();
    let hdr = u64::from_be_bytes(img[8..16].try_into().unwrap()) as usize;
    for base in [0, hdr] {
        let area = &img[base + 4096..base + hdr];
        let end = area.iter().position(|&b| b == 0).unwrap();
        let mut j: serde_json::Value = serde_json::from_slice(&area[..end]).unwrap();
        j["keyslots"]["0"]["kdf"]["time"] = (1u32 << 31).into();
        j["keyslots"]["0"]["kdf"]["memory"] = 65536.into();
        let text = serde_json::to_vec(&j).unwrap();
        let area = &mut img[base + 4096..base + hdr];
        area.fill(0);
        area[..text.len()].copy_from_slice(&text);
        let mut copy = img[base..base + hdr].to_vec();
        copy[448..512].fill(0);
        let sum = cryptkeep_crypto::HashAlg::Sha256.digest(&copy);
        img[base + 448..base + 512].fill(0);
        img[base + 448..base + 480].copy_from_slice(&sum);
    }
    fs::write(v, img).unwrap();
}
