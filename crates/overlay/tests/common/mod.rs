//! Shared helpers for the gocryptfs oracle tests: temp dirs, mounts with a
//! Drop guard, a deterministic test tree and a tree comparison.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub const PASSWORD: &str = "correct horse battery staple";

/// A new cipher directory at `cipher` in gocryptfs's default format, with
/// a cheap scrypt cost (N = 2^10) and [`PASSWORD`], unlocked.
pub fn init_cheap(cipher: &Path) -> cryptkeep_overlay::CipherDir {
    let opts = cryptkeep_overlay::InitOptions {
        scrypt_log_n: 10,
        ..cryptkeep_overlay::InitOptions::default()
    };
    cryptkeep_overlay::CipherDir::init(cipher, PASSWORD.as_bytes(), &opts)
        .unwrap()
        .0
}

/// A directory under /tmp removed (after unmounting anything in it) on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "ck-overlay-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, s: &str) -> PathBuf {
        self.0.join(s)
    }

    /// Writes the password file and returns its path.
    pub fn passfile(&self) -> PathBuf {
        let p = self.join("passfile");
        fs::write(&p, format!("{PASSWORD}\n")).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Fails the test with a clear message when a tool is missing.
pub fn require(tool: &str) {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "this test needs `{tool}` (Debian: apt-get install gocryptfs fuse3); install it or run \
         scripts/install-deps.sh"
    );
}

/// Runs a command, panicking with its output on failure.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `gocryptfs -init -passfile F -scryptn 10 <extra> CIPHER`.
pub fn gocryptfs_init(cipher: &Path, passfile: &Path, extra: &[&str]) {
    require("gocryptfs");
    fs::create_dir_all(cipher).unwrap();
    run(Command::new("gocryptfs")
        .args(["-q", "-init", "-scryptn", "10", "-passfile"])
        .arg(passfile)
        .args(extra)
        .arg(cipher));
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
pub struct Mount {
    mnt: PathBuf,
}

impl Mount {
    /// `gocryptfs -passfile F <extra> CIPHER MNT` (returns once mounted).
    pub fn new(cipher: &Path, mnt: &Path, passfile: &Path, extra: &[&str]) -> Mount {
        require("gocryptfs");
        require("fusermount3");
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
        require("gocryptfs");
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

/// Deterministic pseudo-random bytes.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Options for [`make_tree`].
#[derive(Clone, Copy)]
pub struct TreeOpts {
    /// Longest name component (255 for default, fewer is fine).
    pub max_name: usize,
    /// Also create xattrs, a FIFO and hard links.
    pub extras: bool,
}

impl Default for TreeOpts {
    fn default() -> Self {
        TreeOpts {
            max_name: 255,
            extras: true,
        }
    }
}

/// Writes the test tree into `root`: files of sizes 0, 1, 4095, 4096, 4097
/// and 1 MiB, sparse files, long and odd names, symlinks, nested dirs, and
/// (with extras) a hard link, xattrs and a FIFO.
pub fn make_tree(root: &Path, o: TreeOpts) {
    for (i, size) in [0usize, 1, 4095, 4096, 4097, 1 << 20]
        .into_iter()
        .enumerate()
    {
        fs::write(root.join(format!("size-{size}")), bytes(i as u64 + 1, size)).unwrap();
    }
    // Sparse: a hole in the middle and at the end of a block-aligned region.
    let f = fs::File::create(root.join("sparse")).unwrap();
    f.write_all_at(b"head", 0).unwrap();
    f.write_all_at(b"middle", 5 * 4096 + 7).unwrap();
    f.set_len(3 << 20).unwrap();
    f.write_all_at(b"tail", (3 << 20) - 4).unwrap();
    drop(f);
    let f = fs::File::create(root.join("sparse-only")).unwrap();
    f.set_len(40000).unwrap();
    drop(f);
    // Names.
    let long = |c: char, n: usize| c.to_string().repeat(n);
    fs::write(root.join(long('L', o.max_name)), b"longest name").unwrap();
    fs::write(
        root.join(long('m', 176)),
        b"176: first length that gets hashed",
    )
    .unwrap();
    fs::write(
        root.join(long('s', 175)),
        b"175: last length that stays short",
    )
    .unwrap();
    fs::write(root.join("with space & ünïcödé ✓"), b"odd name").unwrap();
    fs::write(root.join(".hidden"), b"dot").unwrap();
    fs::write(root.join("-dash"), b"dash").unwrap();
    // Nested dirs, one with a long name.
    let d = root.join("a").join("b").join(long('d', 200));
    fs::create_dir_all(&d).unwrap();
    fs::write(d.join("deep"), bytes(99, 10000)).unwrap();
    fs::create_dir(root.join("empty-dir")).unwrap();
    fs::create_dir(root.join("mode-0750")).unwrap();
    fs::set_permissions(root.join("mode-0750"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(root.join("mode-0600"), b"private").unwrap();
    fs::set_permissions(root.join("mode-0600"), fs::Permissions::from_mode(0o600)).unwrap();
    // Symlinks: relative, absolute, dangling, long target, long link name.
    std::os::unix::fs::symlink("size-1", root.join("link-rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("link-abs")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", root.join("a").join("dangling")).unwrap();
    std::os::unix::fs::symlink(long('t', 2000), root.join("link-long-target")).unwrap();
    std::os::unix::fs::symlink("size-0", root.join(long('k', 220))).unwrap();
    if o.extras {
        fs::hard_link(root.join("size-4097"), root.join("a").join("hardlink")).unwrap();
        let x = root.join("size-1");
        set_xattr(&x, "user.comment", b"an xattr value");
        set_xattr(&x, "user.empty", b"");
        set_xattr(&root.join("a"), "user.dirattr", &bytes(5, 300));
        let c = std::ffi::CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o640) }, 0);
    }
}

pub fn set_xattr(p: &Path, name: &str, v: &[u8]) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a readable buffer.
    let r = unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(
        r,
        0,
        "setxattr {name} on {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

fn user_xattrs(p: &Path) -> BTreeMap<String, Vec<u8>> {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid path and writable buffer.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let mut out = BTreeMap::new();
    if n <= 0 {
        return out;
    }
    for name in buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
    {
        let s = String::from_utf8_lossy(name).into_owned();
        if !s.starts_with("user.") {
            continue;
        }
        let cn = std::ffi::CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: valid strings and writable buffer.
        let k = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        assert!(k >= 0);
        v.truncate(k as usize);
        out.insert(s, v);
    }
    out
}

/// Compares two trees: names, types, permission bits, contents, symlink
/// targets, link counts and `user.*` xattrs (with `xattrs`). Panics with
/// the first difference. Returns the number of entries compared.
pub fn assert_same_tree(expected: &Path, got: &Path, xattrs: bool) -> usize {
    let list = |d: &Path| -> Vec<OsString> {
        let mut v: Vec<OsString> = fs::read_dir(d)
            .unwrap_or_else(|e| panic!("read_dir {}: {e}", d.display()))
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != "gocryptfs.conf" && n != ".gocryptfs.reverse.conf")
            .collect();
        v.sort();
        v
    };
    let (a, b) = (list(expected), list(got));
    assert_eq!(
        a,
        b,
        "entries of {} vs {}",
        expected.display(),
        got.display()
    );
    let mut count = 0;
    for n in a {
        let (pa, pb) = (expected.join(&n), got.join(&n));
        let (ma, mb) = (
            fs::symlink_metadata(&pa).unwrap(),
            fs::symlink_metadata(&pb).unwrap(),
        );
        let (ta, tb) = (ma.file_type(), mb.file_type());
        assert_eq!(
            (ta.is_dir(), ta.is_file(), ta.is_symlink(), ta.is_fifo()),
            (tb.is_dir(), tb.is_file(), tb.is_symlink(), tb.is_fifo()),
            "type of {}",
            pb.display()
        );
        count += 1;
        if !ta.is_symlink() {
            assert_eq!(
                ma.mode() & 0o7777,
                mb.mode() & 0o7777,
                "mode of {}",
                pb.display()
            );
        }
        if ta.is_dir() {
            count += assert_same_tree(&pa, &pb, xattrs);
        } else if ta.is_file() {
            assert_eq!(ma.len(), mb.len(), "size of {}", pb.display());
            assert!(
                fs::read(&pa).unwrap() == fs::read(&pb).unwrap(),
                "content of {}",
                pb.display()
            );
            assert_eq!(ma.nlink(), mb.nlink(), "link count of {}", pb.display());
        } else if ta.is_symlink() {
            assert_eq!(
                fs::read_link(&pa).unwrap(),
                fs::read_link(&pb).unwrap(),
                "target of {}",
                pb.display()
            );
        }
        if xattrs && !ta.is_symlink() {
            assert_eq!(
                user_xattrs(&pa),
                user_xattrs(&pb),
                "xattrs of {}",
                pb.display()
            );
        }
    }
    count
}
