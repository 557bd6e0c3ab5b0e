//! Positioned block I/O for headers and keyslot areas.
//!
//! LUKS metadata lives at fixed byte offsets of a device or image file; every
//! reader and writer in this crate goes through [`BlockIo`], so a header can
//! sit on a regular file, a block device, a detached header file or in memory.

use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

/// Byte-addressed, positioned I/O on a device or file (pread/pwrite semantics).
pub trait BlockIo: Send + Sync {
    /// Fill `buf` from byte offset `off`; a short read fails with
    /// [`io::ErrorKind::UnexpectedEof`].
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()>;
    /// Write all of `buf` at byte offset `off`.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()>;
    /// Size of the device or file in bytes.
    fn size(&self) -> io::Result<u64>;
    /// Flush written data to stable storage (fsync).
    fn sync(&self) -> io::Result<()>;
}

impl BlockIo for std::fs::File {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, off)
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        FileExt::write_all_at(self, buf, off)
    }

    fn size(&self) -> io::Result<u64> {
        let meta = self.metadata()?;
        if meta.file_type().is_file() {
            return Ok(meta.len());
        }
        // Block devices report length 0 in metadata; seek to the end instead.
        let mut f = self;
        io::Seek::seek(&mut f, io::SeekFrom::End(0))
    }

    fn sync(&self) -> io::Result<()> {
        self.sync_all()
    }
}

/// An in-memory [`BlockIo`] of fixed size (for tests, header backups and fuzzing).
#[derive(Debug, Default)]
pub struct MemIo {
    data: Mutex<Vec<u8>>,
}

impl MemIo {
    /// A zero-filled image of `len` bytes.
    pub fn new(len: usize) -> Self {
        Self::from_vec(vec![0; len])
    }

    /// Wrap existing bytes.
    pub fn from_vec(data: Vec<u8>) -> Self {
        Self {
            data: Mutex::new(data),
        }
    }

    /// A copy of the current contents.
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn range(len: usize, off: u64, n: usize) -> io::Result<std::ops::Range<usize>> {
    let start = usize::try_from(off).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    let end = start
        .checked_add(n)
        .filter(|&e| e <= len)
        .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    Ok(start..end)
}

impl BlockIo for MemIo {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<()> {
        let data = self.lock();
        let r = range(data.len(), off, buf.len())?;
        buf.copy_from_slice(&data[r]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut data = self.lock();
        let r = range(data.len(), off, buf.len()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::WriteZero,
                "write beyond the end of the in-memory image",
            )
        })?;
        data[r].copy_from_slice(buf);
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.lock().len() as u64)
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Read `len` bytes at `off`, naming `what` in the error.
pub(crate) fn read_vec(
    io: &dyn BlockIo,
    off: u64,
    len: usize,
    what: &str,
) -> Result<Vec<u8>, crate::Error> {
    let mut buf = vec![0u8; len];
    io.read_at(&mut buf, off).map_err(|source| {
        if source.kind() == std::io::ErrorKind::UnexpectedEof {
            crate::error::bad(format!(
                "{what} truncated: the device ends before {len} bytes at offset {off}"
            ))
        } else {
            crate::Error::Io {
                what: format!("reading {what} ({len} bytes at offset {off})"),
                source,
            }
        }
    })?;
    Ok(buf)
}

/// Write `buf` at `off`, naming `what` in the error.
pub(crate) fn write_all(
    io: &dyn BlockIo,
    buf: &[u8],
    off: u64,
    what: &str,
) -> Result<(), crate::Error> {
    io.write_at(buf, off).map_err(|source| crate::Error::Io {
        what: format!("writing {what} ({} bytes at offset {off})", buf.len()),
        source,
    })
}

/// fsync, naming `what` in the error.
pub(crate) fn sync(io: &dyn BlockIo, what: &str) -> Result<(), crate::Error> {
    io.sync().map_err(|source| crate::Error::Io {
        what: format!("syncing {what}"),
        source,
    })
}
