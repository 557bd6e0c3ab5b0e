//! System calls relative to an open directory. Each resolves exactly one
//! name in a directory descriptor (never a whole path) and never follows
//! a symlink at that name, so a cipher directory whose entries an
//! attacker swaps for symlinks cannot make them act outside it, and a
//! tree of any depth works (no `PATH_MAX` on the cipher side). An empty
//! name means the directory (or file) the descriptor itself refers to.
//!
//! The calls Linux offers no `*at` form for, or none that refuses to
//! follow a symlink, go through the descriptor's `/proc/self/fd/N` magic
//! link: `chmod` of an `O_PATH` descriptor and the xattr calls (as
//! gocryptfs does), with the final name resolved by the `l*` variants;
//! with an empty name the link itself is followed to the descriptor's
//! file, which callers make sure is not a symlink.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The longest symlink target read (`PATH_MAX` without its NUL).
pub const LINK_MAX: usize = 4095;

fn inval() -> io::Error {
    io::Error::from_raw_os_error(libc::EINVAL)
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on `name` NUL-terminated: on the stack for names up to
/// NAME_MAX (no allocation), else on the heap. A name holding a NUL or a
/// `/` is EINVAL: only single names are resolved here.
pub(crate) fn with_cname<T>(name: &OsStr, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
    let b = name.as_bytes();
    if b.contains(&b'/') {
        return Err(inval());
    }
    let mut buf = [0u8; 256];
    if b.len() < buf.len() {
        buf[..b.len()].copy_from_slice(b);
        f(CStr::from_bytes_with_nul(&buf[..=b.len()]).map_err(|_| inval())?)
    } else {
        f(&CString::new(b).map_err(|_| inval())?)
    }
}

/// The flags that make an `*at` call act on `name` itself, or on the
/// descriptor when `name` is empty.
fn nofollow(name: &OsStr) -> libc::c_int {
    if name.is_empty() {
        libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH
    } else {
        libc::AT_SYMLINK_NOFOLLOW
    }
}

/// `fstatat(2)` of `name` in `dir` without following it (empty: `dir`).
pub fn stat_at(dir: &impl AsFd, name: &OsStr) -> io::Result<libc::stat> {
    with_cname(name, |c| {
        // SAFETY: an all-zero stat is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is NUL-terminated, `dir` an open descriptor, `st` writable.
        let r =
            unsafe { libc::fstatat(dir.as_fd().as_raw_fd(), c.as_ptr(), &mut st, nofollow(name)) };
        check(r).map(|()| st)
    })
}

/// `fstat(2)` of a descriptor (`O_PATH` descriptors too).
pub fn fstat(fd: &impl AsFd) -> io::Result<libc::stat> {
    stat_at(fd, OsStr::new(""))
}

/// `openat(2)` of `name` in `dir` with `flags` plus `O_NOFOLLOW |
/// O_CLOEXEC` and, when created, `mode`: a symlink at `name` is ELOOP.
pub fn open_at(dir: &impl AsFd, name: &OsStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    if name.is_empty() {
        return Err(io::Error::from_raw_os_error(libc::ENOENT));
    }
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor; openat
        // returns a new descriptor or -1.
        let fd = unsafe {
            libc::openat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })
}

/// An `O_PATH` descriptor of the directory `name` in `dir`: ELOOP for a
/// symlink, ENOTDIR for anything else but a directory.
pub fn open_dir_at(dir: &impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    open_at(dir, name, libc::O_PATH | libc::O_DIRECTORY, 0).map_err(|e| {
        let link = e.raw_os_error() == Some(libc::ENOTDIR)
            && stat_at(dir, name).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK);
        if link {
            io::Error::from_raw_os_error(libc::ELOOP)
        } else {
            e
        }
    })
}

/// What [`open_regular_at`] found instead of a regular file.
fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "not a regular file")
}

/// Opens the regular file `name` in `dir` with `flags` (`O_RDONLY`,
/// `O_RDWR`, plus `O_CREAT`/`O_EXCL` and `mode` to create it), without
/// following a symlink (ELOOP) and without blocking on a FIFO or a device
/// put in its place: anything but a regular file is refused
/// ([`io::ErrorKind::InvalidData`], "not a regular file").
pub fn open_regular_at(
    dir: &impl AsFd,
    name: &OsStr,
    flags: i32,
    mode: u32,
) -> io::Result<std::fs::File> {
    let excl = libc::O_CREAT | libc::O_EXCL;
    if flags & excl == excl {
        // Made by this call: a new, empty regular file.
        return open_at(dir, name, flags, mode).map(std::fs::File::from);
    }
    open_regular_stat_at(dir, name, flags).map(|(f, _)| f)
}

/// [`open_regular_at`] of an existing file, with its `fstat`.
pub fn open_regular_stat_at(
    dir: &impl AsFd,
    name: &OsStr,
    flags: i32,
) -> io::Result<(std::fs::File, libc::stat)> {
    let fd = open_at(dir, name, flags | libc::O_NONBLOCK | libc::O_NOCTTY, 0)?;
    let st = fstat(&fd)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(not_regular());
    }
    // The status flags F_SETFL may change, as asked, without O_NONBLOCK.
    let keep = flags & (libc::O_APPEND | libc::O_DIRECT | libc::O_NOATIME);
    // SAFETY: F_SETFL on a descriptor we own; no memory involved.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, keep) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((std::fs::File::from(fd), st))
}

/// Reads the small regular file `name` in `dir` whole: at most `max`
/// bytes. A longer file is [`io::ErrorKind::FileTooLarge`]; a symlink is
/// ELOOP and anything but a regular file InvalidData (never read, so a
/// FIFO or `/dev/zero` cannot hang or flood the caller).
pub fn read_small_at(dir: &impl AsFd, name: &OsStr, max: usize) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let f = open_regular_at(dir, name, libc::O_RDONLY, 0)?;
    let mut buf = Vec::with_capacity(max.min(4096) + 1);
    f.take(max as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!("longer than {max} bytes"),
        ));
    }
    Ok(buf)
}

/// `mkdirat(2)`.
pub fn mkdir_at(dir: &impl AsFd, name: &OsStr, mode: u32) -> io::Result<()> {
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor.
        check(unsafe { libc::mkdirat(dir.as_fd().as_raw_fd(), c.as_ptr(), mode as libc::mode_t) })
    })
}

/// `mknodat(2)`: a FIFO, socket or device node (type and permission bits
/// in `mode`, device number `rdev`).
pub fn mknod_at(dir: &impl AsFd, name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor.
        check(unsafe {
            libc::mknodat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                mode as libc::mode_t,
                rdev as libc::dev_t,
            )
        })
    })
}

/// `symlinkat(2)`: a symlink `name` in `dir` pointing at `target`.
pub fn symlink_at(target: &OsStr, dir: &impl AsFd, name: &OsStr) -> io::Result<()> {
    let t = CString::new(target.as_bytes()).map_err(|_| inval())?;
    with_cname(name, |c| {
        // SAFETY: both strings are NUL-terminated; `dir` is an open descriptor.
        check(unsafe { libc::symlinkat(t.as_ptr(), dir.as_fd().as_raw_fd(), c.as_ptr()) })
    })
}

/// `linkat(2)` without following a symlink at `old`: a new name `new` in
/// `new_dir` for the file `old` in `old_dir`.
pub fn link_at(
    old_dir: &impl AsFd,
    old: &OsStr,
    new_dir: &impl AsFd,
    new: &OsStr,
) -> io::Result<()> {
    with_cname(old, |o| {
        with_cname(new, |n| {
            // SAFETY: both names are NUL-terminated; both descriptors are open.
            check(unsafe {
                libc::linkat(
                    old_dir.as_fd().as_raw_fd(),
                    o.as_ptr(),
                    new_dir.as_fd().as_raw_fd(),
                    n.as_ptr(),
                    0,
                )
            })
        })
    })
}

/// `renameat2(2)` with `flags` (0, `RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
pub fn rename_at(
    old_dir: &impl AsFd,
    old: &OsStr,
    new_dir: &impl AsFd,
    new: &OsStr,
    flags: u32,
) -> io::Result<()> {
    with_cname(old, |o| {
        with_cname(new, |n| {
            // SAFETY: both names are NUL-terminated; both descriptors are open.
            check(unsafe {
                libc::renameat2(
                    old_dir.as_fd().as_raw_fd(),
                    o.as_ptr(),
                    new_dir.as_fd().as_raw_fd(),
                    n.as_ptr(),
                    flags,
                )
            })
        })
    })
}

/// `unlinkat(2)` of `name` in `dir` (`flags`: 0 for a file,
/// `AT_REMOVEDIR` for a directory).
pub fn unlink_at(dir: &impl AsFd, name: &OsStr, flags: i32) -> io::Result<()> {
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor.
        check(unsafe { libc::unlinkat(dir.as_fd().as_raw_fd(), c.as_ptr(), flags) })
    })
}

/// `readlinkat(2)` of the symlink `name` in `dir` (empty: the `O_PATH`
/// descriptor of a symlink itself); at most [`LINK_MAX`] bytes.
pub fn readlink_at(dir: &impl AsFd, name: &OsStr) -> io::Result<OsString> {
    with_cname(name, |c| {
        let mut buf = vec![0u8; LINK_MAX + 1];
        // SAFETY: `c` is NUL-terminated, `dir` an open descriptor and `buf`
        // writable for its length.
        let n = unsafe {
            libc::readlinkat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n > LINK_MAX {
            return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
        }
        buf.truncate(n);
        Ok(OsString::from_vec(buf))
    })
}

/// `fchownat(2)` of `name` in `dir` itself (empty: the descriptor's file);
/// `None` keeps the owner or group.
pub fn chown_at(
    dir: &impl AsFd,
    name: &OsStr,
    uid: Option<u32>,
    gid: Option<u32>,
) -> io::Result<()> {
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor.
        check(unsafe {
            libc::fchownat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                uid.unwrap_or(u32::MAX),
                gid.unwrap_or(u32::MAX),
                nofollow(name),
            )
        })
    })
}

/// A time to set: `None` keeps it, `Some(None)` is now, else seconds
/// and nanoseconds.
pub type TimeSet = Option<Option<(i64, i64)>>;

fn timespec(t: TimeSet) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(None) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(Some((s, n))) => libc::timespec {
            tv_sec: s,
            tv_nsec: n,
        },
    }
}

/// `utimensat(2)` of `name` in `dir` itself, not following a symlink; an
/// empty name sets the times of the descriptor's file (through its
/// `/proc/self/fd` link; the descriptor must not be a symlink's).
pub fn utimens_at(dir: &impl AsFd, name: &OsStr, atime: TimeSet, mtime: TimeSet) -> io::Result<()> {
    let t = [timespec(atime), timespec(mtime)];
    if name.is_empty() {
        let p = proc_path(dir, name)?;
        // SAFETY: `p` is NUL-terminated and `t` two valid timespecs.
        return check(unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), t.as_ptr(), 0) });
    }
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated, `dir` open, `t` two valid timespecs.
        check(unsafe {
            libc::utimensat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                t.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    })
}

/// Sets the permission bits of the file an `O_PATH` (or any) descriptor
/// refers to, through its `/proc/self/fd` link. Callers make sure it is
/// not a symlink's descriptor (Linux symlinks have no mode to set).
pub fn chmod_fd(fd: &impl AsFd, mode: u32) -> io::Result<()> {
    let p = proc_path(fd, OsStr::new(""))?;
    // SAFETY: `p` is NUL-terminated.
    check(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) })
}

/// `/proc/self/fd/N` for descriptor `dir`, or `/proc/self/fd/N/name`: the
/// magic link resolves to exactly the descriptor's file, and `name` is
/// then one name in it.
fn proc_path(dir: &impl AsFd, name: &OsStr) -> io::Result<CString> {
    if name.as_bytes().contains(&b'/') {
        return Err(inval());
    }
    let mut p = format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd()).into_bytes();
    if !name.is_empty() {
        p.push(b'/');
        p.extend_from_slice(name.as_bytes());
    }
    CString::new(p).map_err(|_| inval())
}

fn cname(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| inval())
}

/// Calls `f` with a buffer that starts at 4 KiB and grows while the kernel
/// answers ERANGE (up to the 64 KiB an xattr value or list can have).
fn grow(mut f: impl FnMut(&mut [u8]) -> isize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    loop {
        let n = f(&mut buf);
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && buf.len() < (1 << 16) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return Err(e);
    }
}

/// The extended attribute names of `name` in `dir` itself (empty: `dir`).
pub fn list_xattrs_at(dir: &impl AsFd, name: &OsStr) -> io::Result<Vec<OsString>> {
    let p = proc_path(dir, name)?;
    let follow = name.is_empty();
    let r = grow(|buf| {
        let (p, b, n) = (p.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: `p` is NUL-terminated; `buf` is writable for its length.
        unsafe {
            if follow {
                libc::listxattr(p, b, n)
            } else {
                libc::llistxattr(p, b, n)
            }
        }
    });
    let buf = match r {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        r => r?,
    };
    Ok(buf
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| OsString::from_vec(s.to_vec()))
        .collect())
}

/// The value of xattr `xname` of `name` in `dir` itself (empty: `dir`).
pub fn get_xattr_at(dir: &impl AsFd, name: &OsStr, xname: &OsStr) -> io::Result<Vec<u8>> {
    let (p, x) = (proc_path(dir, name)?, cname(xname)?);
    let follow = name.is_empty();
    grow(|buf| {
        let (p, x, b, n) = (p.as_ptr(), x.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        // SAFETY: both strings are NUL-terminated; `buf` is writable for its length.
        unsafe {
            if follow {
                libc::getxattr(p, x, b, n)
            } else {
                libc::lgetxattr(p, x, b, n)
            }
        }
    })
}

/// Sets xattr `xname` of `name` in `dir` itself to `value`, with
/// `XATTR_CREATE`/`XATTR_REPLACE` `flags`.
pub fn set_xattr_at(
    dir: &impl AsFd,
    name: &OsStr,
    xname: &OsStr,
    value: &[u8],
    flags: i32,
) -> io::Result<()> {
    let (p, x) = (proc_path(dir, name)?, cname(xname)?);
    let (pp, xp, v, n) = (p.as_ptr(), x.as_ptr(), value.as_ptr().cast(), value.len());
    // SAFETY: both strings are NUL-terminated; `value` is readable for its length.
    check(unsafe {
        if name.is_empty() {
            libc::setxattr(pp, xp, v, n, flags)
        } else {
            libc::lsetxattr(pp, xp, v, n, flags)
        }
    })
}

/// Removes xattr `xname` of `name` in `dir` itself.
pub fn remove_xattr_at(dir: &impl AsFd, name: &OsStr, xname: &OsStr) -> io::Result<()> {
    let (p, x) = (proc_path(dir, name)?, cname(xname)?);
    // SAFETY: both strings are NUL-terminated.
    check(unsafe {
        if name.is_empty() {
            libc::removexattr(p.as_ptr(), x.as_ptr())
        } else {
            libc::lremovexattr(p.as_ptr(), x.as_ptr())
        }
    })
}

/// `fstatvfs(3)` of the file system holding the descriptor's file.
pub fn statvfs_fd(fd: &impl AsFd) -> io::Result<libc::statvfs> {
    let p = proc_path(fd, OsStr::new(""))?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `p` is NUL-terminated and `st` is writable.
    check(unsafe { libc::statvfs(p.as_ptr(), &mut st) }).map(|()| st)
}

/// One entry of a directory listing, as `getdents64(2)` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// The name.
    pub name: OsString,
    /// Its inode number.
    pub ino: u64,
    /// Its `DT_*` type (`DT_UNKNOWN` where the file system does not say).
    pub kind: u8,
}

/// The entries of the directory `dir` (an `O_PATH` descriptor will do),
/// without "." and "..", read from a descriptor of its own.
pub fn list_at(dir: &impl AsFd) -> io::Result<Vec<RawEntry>> {
    let fd = with_cname(OsStr::new("."), |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor.
        let fd = unsafe {
            libc::openat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    })?;
    read_entries(&fd)
}

/// The entries of the directory open (for reading) as `dir`, without "."
/// and "..": `getdents64(2)` from the descriptor's current position.
pub fn read_entries(dir: &impl AsFd) -> io::Result<Vec<RawEntry>> {
    // d_ino (8), d_off (8), d_reclen (2), d_type (1), then the name.
    const NAME_AT: usize = 19;
    let mut buf = vec![0u8; 32 << 10];
    let mut out = Vec::new();
    loop {
        // SAFETY: `buf` is writable for its length; getdents64 writes at
        // most that many bytes of whole records.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_fd().as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n == 0 {
            return Ok(out);
        }
        let mut at = 0;
        while at + NAME_AT <= n {
            let field = |o: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&buf[at + o..at + o + 8]);
                u64::from_ne_bytes(b)
            };
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            if reclen < NAME_AT || at + reclen > n {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let rec = &buf[at + NAME_AT..at + reclen];
            let name = &rec[..rec.iter().position(|&b| b == 0).unwrap_or(rec.len())];
            if name != b"." && name != b".." {
                out.push(RawEntry {
                    name: OsString::from_vec(name.to_vec()),
                    ino: field(0),
                    kind: buf[at + 18],
                });
            }
            at += reclen;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("ck-at-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
        fn fd(&self) -> OwnedFd {
            OwnedFd::from(std::fs::File::open(&self.0).unwrap())
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn nothing_follows_a_symlink_at_the_name() {
        let s = Scratch::new("nofollow");
        let victim = s.0.join("victim");
        std::fs::write(&victim, b"secret").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&victim, s.0.join("l")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", s.0.join("z")).unwrap();
        let d = s.fd();
        let l = OsStr::new("l");
        let loops = |e: io::Error| assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        loops(open_regular_at(&d, l, libc::O_RDWR, 0).unwrap_err());
        loops(read_small_at(&d, OsStr::new("z"), 16).unwrap_err());
        loops(open_dir_at(&d, l).unwrap_err());
        // chown/utimes/xattrs act on the link itself, never on its target.
        let _ = chown_at(&d, l, Some(1234), None);
        let _ = utimens_at(&d, l, Some(Some((5, 0))), None);
        let _ = set_xattr_at(&d, l, OsStr::new("user.x"), b"v", 0);
        let m = std::fs::metadata(&victim).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_ne!(m.uid(), 1234);
        assert_ne!(m.atime(), 5);
        assert!(get_xattr_at(&d, OsStr::new("victim"), OsStr::new("user.x")).is_err());
        assert_eq!(mode(&victim), 0o600);
        assert_eq!(readlink_at(&d, l).unwrap(), victim.as_os_str());
        assert_eq!(
            stat_at(&d, l).unwrap().st_mode & libc::S_IFMT,
            libc::S_IFLNK
        );
        // A name with a slash is refused, not walked.
        let e = stat_at(&d, OsStr::new("../x")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn small_reads_are_bounded_and_refuse_fifos() {
        let s = Scratch::new("small");
        std::fs::write(s.0.join("ok"), b"0123456789").unwrap();
        let big = std::fs::File::create(s.0.join("big")).unwrap();
        big.set_len(1 << 30).unwrap();
        mknod_at(&s.fd(), OsStr::new("fifo"), libc::S_IFIFO | 0o644, 0).unwrap();
        let d = s.fd();
        assert_eq!(
            read_small_at(&d, OsStr::new("ok"), 10).unwrap(),
            b"0123456789"
        );
        let e = read_small_at(&d, OsStr::new("ok"), 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        let e = read_small_at(&d, OsStr::new("big"), 344).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        // Opened without blocking and refused before any read.
        let e = read_small_at(&d, OsStr::new("fifo"), 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn chmod_and_times_through_descriptors() {
        let s = Scratch::new("chmod");
        std::fs::write(s.0.join("f"), b"x").unwrap();
        let d = s.fd();
        let f = open_at(&d, OsStr::new("f"), libc::O_PATH, 0).unwrap();
        chmod_fd(&f, 0o640).unwrap();
        assert_eq!(mode(&s.0.join("f")), 0o640);
        utimens_at(&f, OsStr::new(""), Some(Some((7, 0))), Some(Some((9, 0)))).unwrap();
        let st = stat_at(&d, OsStr::new("f")).unwrap();
        assert_eq!((st.st_atime, st.st_mtime), (7, 9));
        mkdir_at(&d, OsStr::new("sub"), 0o700).unwrap();
        let sub = open_dir_at(&d, OsStr::new("sub")).unwrap();
        symlink_at(OsStr::new("t"), &sub, OsStr::new("l")).unwrap();
        link_at(&d, OsStr::new("f"), &sub, OsStr::new("g")).unwrap();
        rename_at(&sub, OsStr::new("g"), &d, OsStr::new("h"), 0).unwrap();
        let mut names: Vec<_> = list_at(&sub).unwrap().into_iter().map(|e| e.name).collect();
        names.sort();
        assert_eq!(names, vec![OsString::from("l")]);
        assert_eq!(
            stat_at(&d, OsStr::new("h")).unwrap().st_ino,
            stat_at(&d, OsStr::new("f")).unwrap().st_ino
        );
        let v = statvfs_fd(&sub).unwrap();
        assert!(v.f_bsize > 0);
    }
}
