//! Opening a device: its size (a file's length, or `BLKGETSIZE64` of a
//! block device) and its superblock, for every entry point of the crate.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::superblock::SB_SECTORS;
use crate::{Error, Superblock};

/// Opens the device at `path` (for writing too with `write`) and sizes it.
pub(crate) fn open_device(path: &Path, write: bool) -> Result<(File, u64), Error> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|source| Error::Io {
            what: path.display().to_string(),
            source,
        })?;
    let size = device_size(&file, path)?;
    Ok((file, size))
}

/// Reads and parses the superblock at byte `start` of an open device.
pub(crate) fn superblock_at(file: &File, start: u64) -> Result<Superblock, Error> {
    let mut b = vec![0u8; (SB_SECTORS * 512) as usize];
    file.read_exact_at(&mut b, start)
        .map_err(|source| Error::Io {
            what: format!("the superblock at byte {start}"),
            source,
        })?;
    Superblock::parse(&b)
}

/// Reads the superblock of the device at `path` (for `dump`).
pub fn read_superblock(path: &Path) -> Result<Superblock, Error> {
    read_superblock_at(path, 0)
}

/// Reads the superblock at byte `start` of `path` (a LUKS2 data segment).
pub fn read_superblock_at(path: &Path, start: u64) -> Result<Superblock, Error> {
    let (file, _) = open_device(path, false)?;
    superblock_at(&file, start)
}

/// The size in bytes of an image file or a block device.
fn device_size(file: &File, path: &Path) -> Result<u64, Error> {
    let m = file.metadata().map_err(|source| Error::Io {
        what: path.display().to_string(),
        source,
    })?;
    if m.is_file() {
        return Ok(m.len());
    }
    block_device_size(file).ok_or_else(|| {
        Error::Unsupported(format!(
            "{}: neither a regular file nor a block device",
            path.display()
        ))
    })
}

/// The size of a block device, through `BLKGETSIZE64`.
fn block_device_size(file: &File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut size = 0u64;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which
    // outlives the call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size) };
    (r == 0).then_some(size)
}
