//! The allocation map of an engine's data segment: `SEEK_DATA`/`SEEK_HOLE`
//! on a backing file, or what a backing device tells
//! ([`BackingDevice::allocation`], an NBD server's block status), in whole
//! sectors (a sector only partly in a hole counts as data).

use std::io;
use std::os::fd::AsRawFd;

use crate::backing::{Backing, BackingDevice};
use crate::extent::Extent;
use crate::{Engine, Error};

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
/// `SEEK_DATA`, a backing device that cannot tell) is all data. Holes read
/// as zeros only when the engine reads them so
/// ([`Engine::set_holes_read_as_zero`]).
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
    let zero = e.holes_read_as_zero();
    let file = match &e.backing {
        Backing::File(f) => f,
        Backing::Device(d) => {
            return Ok(
                device_extents(&**d, e.data_offset, offset, end, ss, zero).unwrap_or(all_data)
            )
        }
    };
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
                let hole_at = match e.data_run.at(pos) {
                    (Some(h), _) => h,
                    (None, gen) => match seek(file, base + pos, libc::SEEK_HOLE) {
                        Ok(Some(h)) if h >= base + pos => {
                            e.data_run.remember(gen, pos, h - base);
                            h - base
                        }
                        _ => return Ok(all_data),
                    },
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

/// The map of `[pos, end)` of the data segment (at `base` on the device)
/// from the device's own, whole sectors of `ss` bytes only counted as
/// holes. None when the device cannot tell or fails to: all data then.
fn device_extents(
    d: &dyn BackingDevice,
    base: u64,
    pos: u64,
    end: u64,
    ss: u64,
    zero: bool,
) -> Option<Vec<Extent>> {
    // Asked of the device in whole sectors; trimmed to [pos, end) after.
    let (want, want_end) = (pos, end);
    let (pos, end) = (pos / ss * ss, end.div_ceil(ss) * ss);
    let mut runs = d.allocation(base + pos, end - pos).ok()??;
    // Neighbouring holes as one, zero only if every part is: a sector that
    // is a hole throughout counts as one whatever the device's split.
    runs.dedup_by(|next, prev| {
        if prev.hole && next.hole {
            prev.len = prev.len.saturating_add(next.len);
            prev.zero &= next.zero;
            true
        } else {
            false
        }
    });
    let mut out: Vec<Extent> = Vec::new();
    // A hole reads as zeros only if the engine reads all-zero ciphertext
    // so and the device promises zeros there.
    let mut push = |len: u64, hole: bool, zeros: bool| {
        if len == 0 {
            return;
        }
        let zero = hole && zero && zeros;
        match out.last_mut() {
            Some(l) if (l.hole, l.zero) == (hole, zero) => l.len += len,
            _ => out.push(Extent { len, hole, zero }),
        }
    };
    // `done`: where the map so far ends (sector aligned, or `end`).
    let mut done = pos;
    let mut at = pos;
    for r in runs.iter().take(MAX_EXTENTS) {
        let run_end = at.saturating_add(r.len).min(end);
        if r.hole {
            // Only the whole sectors inside the hole count as one.
            let (hs, he) = (at.div_ceil(ss) * ss, run_end / ss * ss);
            if hs < he && hs >= done {
                push(hs - done, false, false);
                push(he - hs, true, r.zero);
                done = he;
            }
        }
        at = run_end;
        if at >= end {
            break;
        }
    }
    // What the device told beyond the last hole is data, up to a sector
    // boundary (or the end asked for).
    let told_end = (at.div_ceil(ss) * ss).min(end);
    if told_end > done {
        push(told_end - done, false, false);
    }
    trim(&mut out, want - pos, want_end - want);
    if out.is_empty() {
        return None;
    }
    Some(out)
}

/// Drops `front` bytes from the start of `map` and keeps at most `len`.
fn trim(map: &mut Vec<Extent>, mut front: u64, len: u64) {
    while front > 0 && !map.is_empty() {
        let cut = front.min(map[0].len);
        map[0].len -= cut;
        front -= cut;
        if map[0].len == 0 {
            map.remove(0);
        }
    }
    let mut left = len;
    map.retain_mut(|x| {
        x.len = x.len.min(left);
        left -= x.len;
        x.len > 0
    });
}
