//! The allocation map of an engine's data segment: `SEEK_DATA`/`SEEK_HOLE`
//! on the backing store, in whole sectors (a sector only partly in a hole
//! counts as data).

use std::io;
use std::os::fd::AsRawFd;

use crate::{Engine, Error};

/// One run of bytes with the same allocation state, as
/// [`crate::BlockStore::extents`] answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes.
    pub len: u64,
    /// Not allocated in the backing store (a hole).
    pub hole: bool,
    /// Reads as zeros.
    pub zero: bool,
}

/// The most extents one answer carries; the caller asks again for the rest.
const MAX_EXTENTS: usize = 4096;

/// Where `lseek(fd, pos, whence)` lands; `None` for `ENXIO` (no data at or
/// after `pos`).
fn seek(file: &std::fs::File, pos: u64, whence: i32) -> io::Result<Option<u64>> {
    let off = libc::off_t::try_from(pos).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: lseek only reads its integer arguments; the fd is owned by
    // `file`, which outlives the call. The file position it moves is used
    // by nobody: the engine does positioned I/O only.
    let r = unsafe { libc::lseek(file.as_raw_fd(), off, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENXIO) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// The allocation map of `[offset, offset + len)` of the data segment. A
/// backing store that cannot answer (a block device, a file system without
/// `SEEK_DATA`, a backing device) is all data. Holes read as zeros only when the engine reads
/// them so ([`Engine::set_holes_read_as_zero`]).
pub(crate) fn extents(e: &Engine, offset: u64, len: u64) -> Result<Vec<Extent>, Error> {
    let all_data = vec![Extent {
        len,
        hole: false,
        zero: false,
    }];
    let end = offset.saturating_add(len).min(e.size);
    if end <= offset {
        return Ok(all_data);
    }
    let ss = e.sector_size as u64;
    let up = |x: u64| x.div_ceil(ss) * ss;
    let down = |x: u64| x / ss * ss;
    // A backing device (an NBD export) tells no holes: all data.
    let Some(file) = crate::io::as_file(&e.backing) else {
        return Ok(all_data);
    };
    let zero = e.holes_read_as_zero();
    let base = e.data_offset;
    let mut out: Vec<Extent> = Vec::new();
    let mut pos = offset;
    while pos < end && out.len() < MAX_EXTENTS {
        let data_at = match seek(file, base + pos, libc::SEEK_DATA) {
            Ok(d) => d.map(|d| d - base),
            Err(_) => return Ok(all_data),
        };
        let (run_end, hole) = match data_at {
            Some(d) if d <= pos => {
                let hole_at = match seek(file, base + pos, libc::SEEK_HOLE) {
                    Ok(Some(h)) => h - base,
                    _ => return Ok(all_data),
                };
                (up(hole_at).min(end), false)
            }
            Some(d) if down(d) > pos => (down(d).min(end), true),
            Some(d) => (up(d + 1).min(end), false),
            None => (end, true),
        };
        let run_end = run_end.max(pos + 1).min(end);
        let ext = Extent {
            len: run_end - pos,
            hole,
            zero: hole && zero,
        };
        match out.last_mut() {
            Some(l) if l.hole == ext.hole => l.len += ext.len,
            _ => out.push(ext),
        }
        pos = run_end;
    }
    Ok(out)
}
