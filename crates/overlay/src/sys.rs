//! Thin wrappers over the system calls the tree walkers need and `std`
//! lacks: SEEK_DATA/SEEK_HOLE, utimensat without following symlinks,
//! extended attributes on the link itself, mknod/mkfifo.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// The next data offset at or after `off` (`None` past the last data).
pub fn seek_data(f: &std::fs::File, off: u64) -> io::Result<Option<u64>> {
    seek(f, off, libc::SEEK_DATA)
}

/// The next hole offset at or after `off` (end of file counts as a hole).
pub fn seek_hole(f: &std::fs::File, off: u64) -> io::Result<Option<u64>> {
    seek(f, off, libc::SEEK_HOLE)
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
            0,
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
