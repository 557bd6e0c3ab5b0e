//! System calls on the backing store: positioned reads and writes, hole
//! punching and data sync, with errors that name the offset.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use crate::Error;

/// Reads exactly `buf.len()` bytes at `pos` (one `pread`, repeated only if
/// the kernel returns less).
pub(crate) fn read_exact(file: &File, buf: &mut [u8], pos: u64) -> Result<(), Error> {
    file.read_exact_at(buf, pos)
        .map_err(|e| Error::io("read", pos, e))
}

/// Writes all of `buf` at `pos` (one `pwrite`, repeated only if short).
pub(crate) fn write_all(file: &File, buf: &[u8], pos: u64) -> Result<(), Error> {
    file.write_all_at(buf, pos)
        .map_err(|e| Error::io("write", pos, e))
}

/// Deallocates `[pos, pos + len)` keeping the file size
/// (`fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`).
pub(crate) fn punch_hole(file: &File, pos: u64, len: u64) -> Result<(), Error> {
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

/// `fdatasync` of the backing store.
pub(crate) fn sync_data(file: &File) -> Result<(), Error> {
    file.sync_data().map_err(|e| Error::io("fdatasync", 0, e))
}

/// Length of the backing file or block device in bytes.
pub(crate) fn backing_len(file: &File) -> Result<u64, Error> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::End(0))
        .map_err(|e| Error::io("seek to end", 0, e))
}
