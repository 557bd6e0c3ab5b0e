//! Reads of the backing store that bypass the page cache (`O_DIRECT`),
//! when it lives on a disk.
//!
//! Every read that reaches the engine is a miss in the cache of whatever
//! sits on the volume (the loop device is direct I/O, the file system on
//! it has its own page cache), so caching the ciphertext a second time buys
//! nothing: a buffered `pread` allocates page-cache pages, has the disk fill
//! them and copies them out. A direct read has the disk write straight into
//! the engine's buffer (the keep's staging slot), the way a plain loop
//! device reads its image: one copy and the page-cache work less per byte.
//!
//! Direct reads are used only where they cost nothing in coherence: the
//! kernel writes back dirty cached pages of a range before reading it
//! directly, so writes (which stay buffered) are always seen. They are not
//! used on file systems in memory (tmpfs, ramfs: nothing to bypass), for
//! buffers or ranges not aligned to [`ALIGN`], or after the backing store
//! refused one (then every read is buffered again).
//! `CRYPTKEEP_DIRECT_READS=0` in the environment turns them off.
//!
//! Writes stay buffered (a direct write would hold a FUSE queue thread
//! until the disk has it, and there are only a few), but on a disk each
//! large one starts its own write-back at once ([`Direct::start_writeback`]):
//! measured with fio writes timed until durable on an ext4 disk, that took
//! the block path from 0.82 to 1.7 of a plain direct-I/O loop device.
//! `CRYPTKEEP_EARLY_WRITEBACK=0` turns it off.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::Error;

/// Buffer address, offset and length of a direct read are multiples of
/// this (the largest logical block size of common disks).
pub(crate) const ALIGN: usize = 4096;

/// `TMPFS_MAGIC` and `RAMFS_MAGIC` from linux/magic.h.
const IN_MEMORY: [i64; 2] = [0x0102_1994, 0x8584_58f6];

/// A second descriptor on the backing store, opened `O_DIRECT`.
#[derive(Debug, Default)]
pub(crate) struct Direct {
    file: Option<File>,
    off: AtomicBool,
    /// Whether the backing store is on a disk (writes start their
    /// write-back at once, see [`Direct::start_writeback`]).
    on_disk: bool,
}

impl Direct {
    /// Opens the direct descriptor of `backing`, or none (see the module
    /// documentation for when).
    pub(crate) fn open(backing: &File) -> Direct {
        let on_disk = !in_memory(backing);
        let file = (enabled() && on_disk)
            .then(|| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
                    .open(format!("/proc/self/fd/{}", backing.as_raw_fd()))
                    .ok()
            })
            .flatten();
        Direct {
            file,
            off: AtomicBool::new(false),
            on_disk: on_disk && writeback_enabled(),
        }
    }

    /// Starts the disk writing `len` bytes just written at `pos` through
    /// the page cache, without waiting for it (`sync_file_range` with
    /// `SYNC_FILE_RANGE_WRITE`): the disk works while the next request is
    /// encrypted, dirty ciphertext does not pile up in memory, and a flush
    /// finds little left to write. Only on a disk, for writes of at least
    /// [`WRITEBACK_MIN`] bytes; best effort (an error here is one a later
    /// flush reports).
    pub(crate) fn start_writeback(&self, backing: &File, pos: u64, len: usize) {
        if !self.on_disk || len < WRITEBACK_MIN {
            return;
        }
        let (Ok(pos), Ok(len)) = (i64::try_from(pos), i64::try_from(len)) else {
            return;
        };
        // SAFETY: sync_file_range on a descriptor borrowed from `backing`;
        // no memory is passed.
        unsafe {
            libc::sync_file_range(backing.as_raw_fd(), pos, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }

    /// Whether direct reads are in use.
    pub(crate) fn is_on(&self) -> bool {
        self.file.is_some() && !self.off.load(Ordering::Relaxed)
    }

    /// Reads exactly `buf.len()` bytes at `pos` directly, if it can be
    /// done: `None` when the read must go through the page cache instead.
    pub(crate) fn read(&self, buf: &mut [u8], pos: u64) -> Option<Result<(), Error>> {
        let f = self.file.as_ref()?;
        if self.off.load(Ordering::Relaxed)
            || !(buf.as_ptr() as usize).is_multiple_of(ALIGN)
            || !buf.len().is_multiple_of(ALIGN)
            || !pos.is_multiple_of(ALIGN as u64)
        {
            return None;
        }
        match f.read_exact_at(buf, pos) {
            Ok(()) => Some(Ok(())),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // The file system takes no direct reads after all.
                self.off.store(true, Ordering::Relaxed);
                None
            }
            Err(e) => Some(Err(Error::io("read", pos, e))),
        }
    }
}

/// Writes smaller than this leave their write-back to the kernel.
const WRITEBACK_MIN: usize = 128 << 10;

/// Whether `CRYPTKEEP_EARLY_WRITEBACK` leaves early write-back on (anything
/// but "0").
fn writeback_enabled() -> bool {
    std::env::var("CRYPTKEEP_EARLY_WRITEBACK").map_or(true, |v| v.trim() != "0")
}

/// Whether `CRYPTKEEP_DIRECT_READS` leaves direct reads on (anything but "0").
fn enabled() -> bool {
    std::env::var("CRYPTKEEP_DIRECT_READS").map_or(true, |v| v.trim() != "0")
}

/// Whether `f` lives on a file system in memory.
fn in_memory(f: &File) -> bool {
    // SAFETY: an all-zero statfs is a valid value to be overwritten.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into `st`, which lives across the call; the fd
    // is borrowed from `f`.
    if unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) } != 0 {
        return true;
    }
    IN_MEMORY.contains(&(st.f_type as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 4096-aligned buffer of `n` bytes.
    fn aligned(n: usize) -> (Vec<u8>, usize) {
        let v = vec![0u8; n + ALIGN];
        let skip = (ALIGN - v.as_ptr() as usize % ALIGN) % ALIGN;
        (v, skip)
    }

    /// A new empty file named `name`-PID in the crate's target directory,
    /// which is on a disk in most setups (on a tmpfs the direct descriptor
    /// is simply not opened).
    fn scratch_file(name: &str) -> (std::path::PathBuf, std::fs::File) {
        let dir = std::env::var_os("CARGO_TARGET_TMPDIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let p = dir.join(format!("{name}-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&p)
            .unwrap();
        (p, f)
    }

    #[test]
    fn direct_reads_see_buffered_writes_or_step_aside() {
        let (p, f) = scratch_file("ck-direct");
        f.write_all_at(&vec![5u8; 4 * ALIGN], 0).unwrap();
        let d = Direct::open(&f);
        // A buffered write, still dirty in the page cache.
        f.write_all_at(&vec![9u8; ALIGN], ALIGN as u64).unwrap();
        let (mut v, s) = aligned(2 * ALIGN);
        let buf = &mut v[s..s + 2 * ALIGN];
        match d.read(buf, 0) {
            Some(r) => {
                r.unwrap();
                assert!(buf[..ALIGN].iter().all(|&b| b == 5));
                assert!(buf[ALIGN..].iter().all(|&b| b == 9));
            }
            None => assert!(!d.is_on() || in_memory(&f)),
        }
        // Unaligned: left to the page cache.
        assert!(d.read(&mut v[s + 1..s + 1 + ALIGN], 0).is_none());
        assert!(d.read(&mut v[s..s + ALIGN], 1).is_none());
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn early_writeback_keeps_what_was_written() {
        let (p, f) = scratch_file("ck-direct-wb");
        let d = Direct::open(&f);
        let data: Vec<u8> = (0..WRITEBACK_MIN * 2).map(|i| (i % 251) as u8).collect();
        f.write_all_at(&data, 4096).unwrap();
        d.start_writeback(&f, 4096, data.len());
        // Rewritten while (maybe) under write-back: the last write wins.
        f.write_all_at(&data[..4096], 0).unwrap();
        f.write_all_at(&[7u8; 4096], 4096).unwrap();
        d.start_writeback(&f, 0, 2 * 4096);
        f.sync_data().unwrap();
        let mut back = vec![0u8; 4096 + data.len()];
        f.read_exact_at(&mut back, 0).unwrap();
        assert_eq!(&back[..4096], &data[..4096]);
        assert!(back[4096..8192].iter().all(|&b| b == 7));
        assert_eq!(&back[8192..], &data[4096..]);
        std::fs::remove_file(&p).unwrap();
    }
}
