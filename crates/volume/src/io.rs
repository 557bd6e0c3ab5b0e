//! I/O on the backing store: positioned reads and writes, hole punching
//! and data sync (system calls on a file, or the [`crate::BackingDevice`]),
//! with errors that name the offset.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use crate::backing::Backing;
use crate::Error;

/// Reads exactly `buf.len()` bytes at `pos` (one `pread`, repeated only if
/// the kernel returns less).
pub(crate) fn read_exact(backing: &Backing, buf: &mut [u8], pos: u64) -> Result<(), Error> {
    match backing {
        Backing::File(file) => file.read_exact_at(buf, pos),
        Backing::Device(d) => d.read_at(buf, pos),
    }
    .map_err(|e| Error::io("read", pos, e))
}

/// Writes all of `buf` at `pos` (one `pwrite`, repeated only if short).
pub(crate) fn write_all(backing: &Backing, buf: &[u8], pos: u64) -> Result<(), Error> {
    match backing {
        Backing::File(file) => file.write_all_at(buf, pos),
        Backing::Device(d) => d.write_at(buf, pos),
    }
    .map_err(|e| Error::io("write", pos, e))
}

/// Deallocates `[pos, pos + len)` keeping the size: on a file
/// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`, on a device its
/// discard (which reads back as zeros, as a punched hole does).
pub(crate) fn punch_hole(backing: &Backing, pos: u64, len: u64) -> Result<(), Error> {
    let file = match backing {
        Backing::File(f) => f,
        Backing::Device(d) => {
            return d
                .discard(pos, len)
                .map_err(|e| Error::io("punch hole", pos, e))
        }
    };
    let (Ok(off), Ok(l)) = (libc::off_t::try_from(pos), libc::off_t::try_from(len)) else {
        return Err(Error::io(
            "punch hole",
            pos,
            io::Error::from_raw_os_error(libc::EINVAL),
        ));
    };
    loop {
        // SAFETY: fallocate only reads its integer arguments; the fd is owned
        // by `file`, which outlives the call.
        let r = unsafe {
            libc::fallocate(
                file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off,
                l,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(Error::io("punch hole", pos, e));
        }
    }
}

/// `fdatasync` of the backing store (a device's flush).
pub(crate) fn sync_data(backing: &Backing) -> Result<(), Error> {
    match backing {
        Backing::File(file) => file.sync_data(),
        Backing::Device(d) => d.sync_data(),
    }
    .map_err(|e| Error::io("fdatasync", 0, e))
}

/// Length of the backing file, block device or device in bytes.
pub(crate) fn backing_len(backing: &Backing) -> Result<u64, Error> {
    use std::io::{Seek, SeekFrom};
    match backing {
        Backing::File(file) => {
            let mut f = file;
            f.seek(SeekFrom::End(0))
        }
        Backing::Device(d) => d.len(),
    }
    .map_err(|e| Error::io("seek to end", 0, e))
}

/// The file behind `backing`, if it is one.
pub(crate) fn as_file(backing: &Backing) -> Option<&File> {
    match backing {
        Backing::File(f) => Some(f),
        Backing::Device(_) => None,
    }
}
