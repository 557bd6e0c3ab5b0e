//! Thin wrappers over the system calls the tree walkers need and `std`
//! lacks: SEEK_DATA/SEEK_HOLE, utimensat without following symlinks,
//! extended attributes on the link itself, mknod/mkfifo, renameat2,
//! statvfs, and the `*at` calls that resolve one name in an open
//! directory. Used by the tree walkers and the FUSE frontend.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `TMPFS_MAGIC` and `RAMFS_MAGIC` from linux/magic.h.
const IN_MEMORY: [i64; 2] = [0x0102_1994, 0x8584_58f6];

/// Whether `f` lives on a file system in memory (tmpfs, ramfs), where
/// reading ahead or around the page cache buys nothing. Unknown counts as
/// in memory.
pub fn in_memory(f: impl AsFd) -> bool {
    // SAFETY: an all-zero statfs is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into `st`, which lives across the call; the fd
    // is borrowed for the call (O_PATH descriptors are accepted).
    if unsafe { libc::fstatfs(f.as_fd().as_raw_fd(), &mut st) } != 0 {
        return true;
    }
    IN_MEMORY.contains(&(st.f_type as i64))
}

/// The next data offset at or after `off` (`None` past the last data).
pub fn seek_data(f: &std::fs::File, off: u64) -> io::Result<Option<u64>> {
    seek(f, off, libc::SEEK_DATA)
}

/// The next hole offset at or after `off` (end of file counts as a hole).
pub fn seek_hole(f: &std::fs::File, off: u64) -> io::Result<Option<u64>> {
    seek(f, off, libc::SEEK_HOLE)
}

/// `fallocate(2)` of `len` bytes at `off` with `mode` (`FALLOC_FL_*`).
pub fn fallocate(f: &std::fs::File, mode: i32, off: u64, len: u64) -> io::Result<()> {
    let bad = |_| io::Error::from_raw_os_error(libc::EFBIG);
    let (off, len) = (
        i64::try_from(off).map_err(bad)?,
        i64::try_from(len).map_err(bad)?,
    );
    // SAFETY: fallocate on a descriptor we borrow for the call; no memory involved.
    if unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn seek(f: &std::fs::File, off: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let off = i64::try_from(off).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: lseek on a descriptor we borrow for the call; no memory involved.
    let r = unsafe { libc::lseek(f.as_raw_fd(), off, whence) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENXIO) {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(r as u64))
}

/// Sets atime and mtime (seconds, nanoseconds) of `p` without following a
/// final symlink.
pub fn set_times(p: &Path, atime: (i64, i64), mtime: (i64, i64)) -> io::Result<()> {
    let c = cpath(p)?;
    let ts = [
        libc::timespec {
            tv_sec: atime.0,
            tv_nsec: atime.1,
        },
        libc::timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1,
        },
    ];
    // SAFETY: `c` is a NUL-terminated path and `ts` two valid timespecs, both
    // alive for the call.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The extended attribute names of `p` itself (not a symlink's target).
pub fn list_xattrs(p: &Path) -> io::Result<Vec<OsString>> {
    let c = cpath(p)?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: `c` is NUL-terminated; `buf` is writable for buf.len() bytes.
        let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            break;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < (1 << 20) => buf.resize(buf.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    }
    Ok(buf
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| OsString::from_vec(s.to_vec()))
        .collect())
}

/// The value of xattr `name` of `p` itself.
pub fn get_xattr(p: &Path, name: &OsStr) -> io::Result<Vec<u8>> {
    let c = cpath(p)?;
    let n =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: both strings are NUL-terminated; `buf` is writable for its length.
        let r =
            unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if r >= 0 {
            buf.truncate(r as usize);
            return Ok(buf);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return Err(e);
    }
}

/// Sets xattr `name` of `p` itself to `value`.
pub fn set_xattr(p: &Path, name: &OsStr, value: &[u8]) -> io::Result<()> {
    set_xattr_flags(p, name, value, 0)
}

/// Sets xattr `name` of `p` itself with `XATTR_CREATE`/`XATTR_REPLACE` `flags`.
pub fn set_xattr_flags(p: &Path, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let c = cpath(p)?;
    let n =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: both strings are NUL-terminated; `value` is readable for its length.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates a FIFO, socket or device node at `p` with `mode` (type and
/// permission bits) and device number `rdev`.
pub fn mknod(p: &Path, mode: u32, rdev: u64) -> io::Result<()> {
    let c = cpath(p)?;
    // SAFETY: `c` is a NUL-terminated path alive for the call.
    let r = unsafe { libc::mknod(c.as_ptr(), mode as libc::mode_t, rdev as libc::dev_t) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes xattr `name` of `p` itself.
pub fn remove_xattr(p: &Path, name: &OsStr) -> io::Result<()> {
    let c = cpath(p)?;
    let n =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: both strings are NUL-terminated and alive for the call.
    let r = unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `renameat2(2)` with `flags` (0, `RENAME_NOREPLACE`, `RENAME_EXCHANGE`).
pub fn rename2(old: &Path, new: &Path, flags: u32) -> io::Result<()> {
    let (a, b) = (cpath(old)?, cpath(new)?);
    // SAFETY: two NUL-terminated paths alive for the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            flags,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Runs `f` on `name` NUL-terminated: on the stack for names up to
/// NAME_MAX (no allocation), else on the heap. A name holding a NUL is
/// EINVAL.
fn with_cname<T>(name: &OsStr, f: impl FnOnce(&CStr) -> io::Result<T>) -> io::Result<T> {
    let b = name.as_bytes();
    let inval = || io::Error::from_raw_os_error(libc::EINVAL);
    let mut buf = [0u8; 256];
    if b.len() < buf.len() {
        buf[..b.len()].copy_from_slice(b);
        f(CStr::from_bytes_with_nul(&buf[..=b.len()]).map_err(|_| inval())?)
    } else {
        f(&CString::new(b).map_err(|_| inval())?)
    }
}

/// `fstatat(2)` of `name` in the open directory `dir`, not following a
/// final symlink: one path component to resolve, where a stat by full
/// path walks every component from `/` again.
pub fn lstat_at(dir: &impl AsFd, name: &OsStr) -> io::Result<libc::stat> {
    with_cname(name, |c| {
        // SAFETY: an all-zero stat is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is NUL-terminated, `dir` is an open descriptor and `st` is writable.
        let r = unsafe {
            libc::fstatat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st)
    })
}

/// `openat(2)` of `name` in the open directory `dir` with `flags`
/// (`O_CLOEXEC` added) and, when created, `mode`.
pub fn open_at(dir: &impl AsFd, name: &OsStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor; openat
        // returns a new descriptor or -1.
        let fd = unsafe {
            libc::openat(
                dir.as_fd().as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_CLOEXEC,
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

/// `unlinkat(2)` of `name` in the open directory `dir` (`flags`:
/// 0 for a file, `AT_REMOVEDIR` for a directory).
pub fn unlink_at(dir: &impl AsFd, name: &OsStr, flags: i32) -> io::Result<()> {
    with_cname(name, |c| {
        // SAFETY: `c` is NUL-terminated and `dir` an open descriptor.
        if unsafe { libc::unlinkat(dir.as_fd().as_raw_fd(), c.as_ptr(), flags) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    })
}

/// The names in the directory open (for reading) as `dir`, without "."
/// and "..": `getdents64(2)` from the descriptor's current position.
pub fn dir_names(dir: &impl AsFd) -> io::Result<Vec<OsString>> {
    // d_ino (8), d_off (8), d_reclen (2), d_type (1), then the name.
    const NAME_AT: usize = 19;
    let mut buf = vec![0u8; 8192];
    let mut names = Vec::new();
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
            return Ok(names);
        }
        let mut at = 0;
        while at + NAME_AT <= n {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            if reclen < NAME_AT || at + reclen > n {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let rec = &buf[at + NAME_AT..at + reclen];
            let name = &rec[..rec.iter().position(|&b| b == 0).unwrap_or(rec.len())];
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
            at += reclen;
        }
    }
}

/// `statvfs(3)` of the file system holding `p`.
pub fn statvfs(p: &Path) -> io::Result<libc::statvfs> {
    let c = cpath(p)?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` is writable.
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// Sets atime/mtime of `p` (not following a final symlink); `None` leaves
/// a time unchanged, `Some(None)` sets it to now.
pub fn set_times_opt(
    p: &Path,
    atime: Option<Option<(i64, i64)>>,
    mtime: Option<Option<(i64, i64)>>,
) -> io::Result<()> {
    let c = cpath(p)?;
    let ts = |t: Option<Option<(i64, i64)>>| match t {
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
    };
    let t = [ts(atime), ts(mtime)];
    // SAFETY: `c` is NUL-terminated and `t` two valid timespecs.
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            t.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets or keeps (`None`) the access and modification times of an open
/// file (futimens(2)); `Some(None)` means now.
pub fn set_times_fd(
    f: &std::fs::File,
    atime: Option<Option<(i64, i64)>>,
    mtime: Option<Option<(i64, i64)>>,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let ts = |t: Option<Option<(i64, i64)>>| match t {
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
    };
    let t = [ts(atime), ts(mtime)];
    // SAFETY: the descriptor is open for the call; `t` is two valid timespecs.
    let r = unsafe { libc::futimens(f.as_raw_fd(), t.as_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
