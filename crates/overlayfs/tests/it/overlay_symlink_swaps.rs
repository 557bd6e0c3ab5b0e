//! An attacker who can write the cipher directory swaps an entry for a
//! symlink after the kernel looked it up: whatever is done through the
//! mount, nothing outside the cipher directory changes or is served.
//! For every operation that names a file, on a swapped file and on a
//! swapped directory component, forward and reverse, and as an
//! unprivileged user on a root `--allow-other` mount (the user owns a
//! cipher directory, as the mount makes new ones belong to their
//! creator).

use crate::common::*;
use cryptkeep_overlay::CipherDir;
use cryptkeep_overlayfs::{mount_overlay, mount_reverse, OverlayMount, OverlayOptions};
use std::ffi::OsString;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const VICTIM: &[u8] = b"root-only secret\n";

/// Everything outside the cipher directory an attack may aim at, and
/// what it looked like before.
struct Outside {
    victim: PathBuf,
    dir: PathBuf,
    before: Vec<(OsString, u32, u32, u64, Vec<u8>)>,
}

impl Outside {
    /// A root-only file and a directory (with `copy_of`'s entries, so a
    /// symlink to it looks like the cipher directory it replaced).
    fn new(t: &TempDir, copy_of: Option<&Path>) -> Outside {
        let victim = t.join("victim");
        fs::write(&victim, VICTIM).unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
        let dir = t.join("outside");
        fs::create_dir(&dir).unwrap();
        if let Some(src) = copy_of {
            run_cmd(
                Command::new("cp")
                    .arg("-a")
                    .arg(format!("{}/.", src.display()))
                    .arg(&dir),
            );
        }
        let mut o = Outside {
            victim,
            dir,
            before: Vec::new(),
        };
        o.before = o.snapshot();
        o
    }

    fn snapshot(&self) -> Vec<(OsString, u32, u32, u64, Vec<u8>)> {
        let mut v = vec![entry(&self.victim)];
        let mut names: Vec<_> = fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        v.extend(names.iter().map(|p| entry(p)));
        v
    }

    fn assert_untouched(&self, what: &str) {
        assert_eq!(
            self.snapshot(),
            self.before,
            "{what} changed something outside"
        );
        let x = xattr_names(&self.victim);
        assert!(x.is_empty(), "{what} set xattrs {x:?} on the victim");
    }
}

/// Name, mode, owner, mtime and content (files) of `p`.
fn entry(p: &Path) -> (OsString, u32, u32, u64, Vec<u8>) {
    let m = fs::symlink_metadata(p).unwrap();
    let content = if m.is_file() {
        fs::read(p).unwrap()
    } else {
        Vec::new()
    };
    (
        p.file_name().unwrap().to_owned(),
        m.mode(),
        m.uid(),
        m.mtime() as u64,
        content,
    )
}

/// The xattr names of `p` itself (NUL-separated, lossy).
fn xattr_names(p: &Path) -> String {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: `c` is NUL-terminated and `buf` writable for its length.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(
        n >= 0,
        "llistxattr {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
    String::from_utf8_lossy(&buf[..n as usize]).into_owned()
}

/// `setxattr(p, "user.evil", "1")`, following symlinks as a caller would.
fn set_evil_xattr(p: &Path) -> std::io::Result<()> {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: both strings are NUL-terminated; the value is one byte.
    let r = unsafe {
        libc::setxattr(
            c.as_ptr(),
            c"user.evil".as_ptr(),
            b"1".as_ptr().cast(),
            1,
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The one entry of cipher directory `dir` that is not the file
/// system's own.
fn only_entry(dir: &Path) -> PathBuf {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            !n.starts_with("gocryptfs.") || n.starts_with("gocryptfs.longname.")
        })
        .collect();
    assert_eq!(v.len(), 1, "entries of {}: {v:?}", dir.display());
    v.pop().unwrap()
}

/// Waits until this process (which serves the mount) holds no regular
/// file under `cipher` open: the kernel sends `RELEASE` after `close(2)`
/// returns, and a file still open is shared by the next `open` of its
/// inode, which then reaches the original file even after a swap (as any
/// open descriptor does after a rename). The attacks must find it closed.
fn wait_released(cipher: &Path) {
    let cipher = &fs::canonicalize(cipher).unwrap();
    let held = || {
        fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
            .filter(|l| l.starts_with(cipher) && fs::metadata(l).is_ok_and(|m| m.is_file()))
            .collect::<Vec<_>>()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let h = held();
        if h.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cipher files still open 10 s after close: {h:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Replaces `entry` (moved aside to `entry.orig`) with a symlink to `to`.
fn swap(entry: &Path, to: &Path) {
    let mut aside = entry.as_os_str().to_owned();
    aside.push(".orig");
    fs::rename(entry, &aside).unwrap();
    std::os::unix::fs::symlink(to, entry).unwrap();
}

fn shared_storage() -> OverlayOptions {
    OverlayOptions {
        cache_ttl: Duration::ZERO,
        writeback_cache: false,
        ..OverlayOptions::default()
    }
}

struct Fx {
    _t: TempDir,
    cipher: PathBuf,
    mnt: PathBuf,
    m: Option<OverlayMount>,
}

impl Fx {
    fn new(tag: &str, opts: &OverlayOptions) -> Fx {
        let t = TempDir::new(tag);
        let cipher = t.join("cipher");
        let cd = init_cheap(&cipher);
        let mnt = t.join("mnt");
        fs::create_dir(&mnt).unwrap();
        let m = mount_overlay(Arc::new(cd), &mnt, opts).unwrap();
        Fx {
            _t: t,
            cipher,
            mnt,
            m: Some(m),
        }
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        if let Some(m) = self.m.take() {
            let _ = m.unmount();
        }
    }
}

/// One attack on the file `f` (at the mount's root).
type FileAttack = (&'static str, fn(&Path) -> std::io::Result<()>);

fn file_attacks() -> Vec<FileAttack> {
    use std::os::unix::fs::OpenOptionsExt;
    vec![
        ("chmod", |f| {
            fs::set_permissions(f, fs::Permissions::from_mode(0o4777))
        }),
        ("chown", |f| {
            std::os::unix::fs::chown(f, Some(4321), Some(4321))
        }),
        ("truncate", |f| {
            fs::OpenOptions::new().write(true).open(f)?.set_len(0)
        }),
        ("utimens", |f| {
            let t = std::time::UNIX_EPOCH + Duration::from_secs(1);
            fs::File::options()
                .write(true)
                .open(f)?
                .set_times(fs::FileTimes::new().set_modified(t))
        }),
        ("setattr-times", |f| {
            let c = std::ffi::CString::new(f.as_os_str().as_encoded_bytes()).unwrap();
            let ts = [libc::timespec {
                tv_sec: 1,
                tv_nsec: 0,
            }; 2];
            // SAFETY: `c` is NUL-terminated and `ts` two valid timespecs.
            match unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), ts.as_ptr(), 0) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }),
        ("open-read", |f| {
            let mut s = Vec::new();
            fs::File::open(f)?.read_to_end(&mut s)?;
            assert!(
                !s.windows(6).any(|w| w == b"secret"),
                "the victim was served"
            );
            Ok(())
        }),
        ("open-write", |f| {
            fs::OpenOptions::new()
                .append(true)
                .custom_flags(libc::O_DIRECT)
                .open(f)?
                .write_all(&[b'x'; 4096])
        }),
        ("setxattr", |f| set_evil_xattr(f)),
        ("link", |f| fs::hard_link(f, f.with_file_name("linked"))),
    ]
}

/// A swapped file: every operation on it fails and nothing outside changes.
#[test]
fn operations_on_a_file_swapped_for_a_symlink_touch_nothing_outside() {
    need!(root, fuse);
    alone!(shared);
    for opts in [OverlayOptions::default(), shared_storage()] {
        for (what, attack) in file_attacks() {
            let fx = Fx::new("swap-file", &opts);
            fs::write(fx.p("f"), b"hello\n").unwrap();
            fs::metadata(fx.p("f")).unwrap();
            wait_released(&fx.cipher);
            let out = Outside::new(&fx._t, None);
            swap(&only_entry(&fx.cipher), &out.victim);
            let r = attack(&fx.p("f"));
            out.assert_untouched(what);
            if opts.cache_ttl.is_zero() {
                // The kernel looks it up again and finds a symlink whose
                // target does not decrypt: nothing but errors (a hard link
                // to the symlink itself is what link(2) makes of one).
                assert!(
                    r.is_err() || what == "link",
                    "{what} succeeded on a planted symlink"
                );
            } else {
                let e = r.expect_err(what);
                let code = e.raw_os_error();
                assert!(
                    matches!(code, Some(libc::ELOOP | libc::EIO | libc::ESTALE)),
                    "{what}: {e}"
                );
            }
        }
    }
}

/// One attack inside the directory `d` (at the mount's root), which holds
/// the file `f` and the empty directory `sub`; `f0` sits at the root.
type DirAttack = (&'static str, fn(&Path) -> std::io::Result<()>);

fn dir_attacks() -> Vec<DirAttack> {
    vec![
        ("create", |m| fs::write(m.join("d/new"), b"x")),
        ("mkdir", |m| fs::create_dir(m.join("d/newdir"))),
        ("mknod", |m| {
            let c =
                std::ffi::CString::new(m.join("d/fifo").as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: `c` is a NUL-terminated path.
            match unsafe { libc::mkfifo(c.as_ptr(), 0o644) } {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        }),
        ("symlink", |m| {
            std::os::unix::fs::symlink("t", m.join("d/sl"))
        }),
        ("link", |m| fs::hard_link(m.join("f0"), m.join("d/lnk"))),
        ("rename-into", |m| {
            fs::rename(m.join("f0"), m.join("d/moved"))
        }),
        ("rename-out", |m| fs::rename(m.join("d/f"), m.join("out"))),
        ("unlink", |m| fs::remove_file(m.join("d/f"))),
        ("rmdir", |m| fs::remove_dir(m.join("d/sub"))),
        ("chmod", |m| {
            fs::set_permissions(m.join("d/f"), fs::Permissions::from_mode(0o777))
        }),
        ("truncate", |m| {
            fs::OpenOptions::new()
                .write(true)
                .open(m.join("d/f"))?
                .set_len(0)
        }),
        ("open-write", |m| {
            fs::OpenOptions::new()
                .append(true)
                .open(m.join("d/f"))?
                .write_all(b"x")?;
            fs::File::open(m.join("d/f"))?.sync_all()
        }),
        ("setxattr", |m| set_evil_xattr(&m.join("d/f"))),
    ]
}

/// A swapped directory: whatever is done in it, the directory the symlink
/// points at (a copy of it, outside) stays as it was.
#[test]
fn operations_in_a_directory_swapped_for_a_symlink_touch_nothing_outside() {
    need!(root, fuse);
    alone!(shared);
    for opts in [OverlayOptions::default(), shared_storage()] {
        for (what, attack) in dir_attacks() {
            let fx = Fx::new("swap-dir", &opts);
            fs::create_dir(fx.p("d")).unwrap();
            fs::write(fx.p("d/f"), b"hello\n").unwrap();
            fs::create_dir(fx.p("d/sub")).unwrap();
            fs::metadata(fx.p("d/f")).unwrap();
            fs::metadata(fx.p("d/sub")).unwrap();
            let d = only_entry(&fx.cipher);
            fs::write(fx.p("f0"), b"zero\n").unwrap();
            wait_released(&fx.cipher);
            let out = Outside::new(&fx._t, Some(&d));
            swap(&d, &out.dir);
            let r = attack(&fx.mnt);
            out.assert_untouched(what);
            if opts.cache_ttl.is_zero() {
                assert!(r.is_err(), "{what} succeeded through a planted symlink");
            }
        }
    }
}

/// The reverse view: a source file (or directory) swapped for a symlink
/// after lookup is never read through it.
#[test]
fn reverse_mode_never_serves_a_swapped_source() {
    need!(root, fuse);
    alone!(shared);
    let t = TempDir::new("swap-reverse");
    let plain = t.join("plain");
    fs::create_dir_all(plain.join("d")).unwrap();
    fs::write(plain.join("f"), b"public\n").unwrap();
    fs::write(plain.join("d/g"), b"public too\n").unwrap();
    let opts = cryptkeep_overlay::InitOptions {
        scrypt_log_n: 10,
        ..cryptkeep_overlay::InitOptions::default()
    };
    CipherDir::init_reverse(&plain, PASSWORD.as_bytes(), &opts).unwrap();
    let cd = Arc::new(CipherDir::open_reverse(&plain, PASSWORD.as_bytes()).unwrap());
    let mnt = t.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mount_reverse(cd, &mnt, &OverlayOptions::default()).unwrap();
    // Read both once: looked up, attributes cached.
    let names = |d: &Path| {
        let mut v: Vec<_> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                !p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("gocryptfs.")
            })
            .collect();
        v.sort();
        v
    };
    let top = names(&mnt);
    assert_eq!(top.len(), 2, "{top:?}");
    let (cf, cd_) = if top[0].is_dir() {
        (top[1].clone(), top[0].clone())
    } else {
        (top[0].clone(), top[1].clone())
    };
    let cg = names(&cd_).pop().unwrap();
    let before = [fs::read(&cf).unwrap(), fs::read(&cg).unwrap()];
    // Open both: reads through these handles go to the daemon once the
    // page cache is dropped.
    let (f, g) = (fs::File::open(&cf).unwrap(), fs::File::open(&cg).unwrap());
    let secret = t.join("secret");
    fs::write(&secret, vec![b'S'; 4096]).unwrap();
    let secret_dir = t.join("secretdir");
    fs::create_dir(&secret_dir).unwrap();
    fs::write(secret_dir.join("g"), vec![b'S'; 4096]).unwrap();
    swap(&plain.join("f"), &secret);
    swap(&plain.join("d"), &secret_dir);
    fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    for ((file, name), was) in [(&f, "f"), (&g, "d/g")].into_iter().zip(&before) {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; 8192];
        match file.read_at(&mut buf, 0) {
            // Only ever the bytes of the file that was looked up.
            Ok(n) => assert_eq!(&buf[..n], &was[..n], "{name}: served something else"),
            Err(e) => assert!(
                matches!(
                    e.raw_os_error(),
                    Some(libc::ELOOP | libc::ESTALE | libc::EIO)
                ),
                "{name}: {e}"
            ),
        }
    }
    // Closed first: a mount with open files is busy and would stay behind.
    drop((f, g));
    m.unmount().unwrap();
}

/// The privilege escalation: as root with `--allow-other`, an unprivileged
/// user who owns a cipher directory plants a symlink to a root-only file
/// and chmods it through the mount.
#[test]
fn an_unprivileged_user_cannot_reach_outside_through_an_allow_other_mount() {
    need!(root, fuse);
    need!(tool "setpriv");
    alone!(shared);
    const UID: u32 = 64_123;
    let fx = Fx::new(
        "swap-user",
        &OverlayOptions {
            allow_other: true,
            ..OverlayOptions::default()
        },
    );
    for p in [fx._t.path(), &fx.cipher] {
        fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::set_permissions(&fx.mnt, fs::Permissions::from_mode(0o777)).unwrap();
    let out = Outside::new(&fx._t, None);
    let as_user = |script: &str| {
        Command::new("setpriv")
            .args([
                &format!("--reuid={UID}"),
                &format!("--regid={UID}"),
                "--clear-groups",
                "--",
                "sh",
                "-c",
                script,
            ])
            .status()
            .unwrap()
            .success()
    };
    let m = fx.mnt.display().to_string();
    assert!(as_user(&format!(
        "mkdir {m}/u && echo mine > {m}/u/f && stat {m}/u/f >/dev/null"
    )));
    let u = only_entry(&fx.cipher);
    assert_eq!(
        fs::metadata(&u).unwrap().uid(),
        UID,
        "the user owns their cipher dir"
    );
    let f = only_entry(&u);
    // The attacker's own moves, in the directory they own.
    let victim = out.victim.display().to_string();
    assert!(as_user(&format!(
        "mv {f} {f}.orig && ln -s {victim} {f}",
        f = f.display()
    )));
    let chmod = as_user(&format!("chmod 0666 {m}/u/f"));
    let read = as_user(&format!("cat {victim} >/dev/null 2>&1"));
    out.assert_untouched("the unprivileged user's chmod");
    assert!(!chmod, "chmod through the planted symlink succeeded");
    assert!(!read, "the user read the root-only file");
}
