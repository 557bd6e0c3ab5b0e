//! Random-access plaintext I/O on one cipher file, with gocryptfs's rules:
//! the header is written with the first byte of data; partial blocks are
//! read-modify-written; writing past the end first pads the old last block
//! to a full block of zeros and leaves the skipped whole blocks as holes;
//! truncating to 0 removes the header; growing by truncation writes a real
//! last block and holes before it.
//!
//! A `CipherFile` reads through `&self` (concurrent readers are fine) and
//! writes through `&mut self`: callers serialise writers against readers
//! (the FUSE frontend holds one read-write lock per inode).

use crate::content::{ContentCipher, PLAIN_BS};
use crate::copy_align::{file_aligned, COPY_ALIGN};
use crate::error::{Error, Result};
use crate::header::{FileHeader, HEADER_LEN};
use crate::stream::{Stamp, Stream};
use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// An open cipher file seen as plaintext.
#[derive(Debug)]
pub struct CipherFile {
    file: File,
    path: PathBuf,
    header: OnceLock<FileHeader>,
    /// Sequential reads straight from the disk, when asked for
    /// ([`CipherFile::with_streaming`]).
    stream: Option<Stream>,
}

impl CipherFile {
    /// Wraps an open cipher file (opened read-write for writes); `path` is
    /// used in errors.
    pub fn new(file: File, path: &Path) -> CipherFile {
        CipherFile {
            file,
            path: path.to_path_buf(),
            header: OnceLock::new(),
            stream: None,
        }
    }

    /// Lets sequential reads of a cipher file on a disk bypass the page
    /// cache, read ahead in chunks of about 1 MiB by threads of their own
    /// (see `stream.rs`); other reads, and files on a file system in
    /// memory, are read as before.
    pub fn with_streaming(mut self) -> CipherFile {
        self.stream = Some(Stream::new());
        self
    }

    /// How many reads were served from ciphertext read directly (see
    /// [`CipherFile::with_streaming`]); 0 without streaming.
    pub fn streamed_reads(&self) -> u64 {
        self.stream.as_ref().map_or(0, Stream::served)
    }

    /// Drops what was read ahead: the file is about to change.
    fn changing(&mut self) {
        if let Some(s) = &mut self.stream {
            s.reset();
        }
    }

    /// Opens `path` read-write.
    pub fn open(path: &Path) -> Result<CipherFile> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        Ok(CipherFile::new(f, path))
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The underlying file.
    pub fn file(&self) -> &File {
        &self.file
    }

    fn cipher_len(&self) -> Result<u64> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?
            .len())
    }

    /// The plaintext size.
    pub fn plain_size(&self, c: &ContentCipher) -> Result<u64> {
        Ok(c.plain_size(self.cipher_len()?))
    }

    /// The header, read once; `None` for an empty file.
    fn header(&self) -> Result<Option<FileHeader>> {
        if let Some(h) = self.header.get() {
            return Ok(Some(*h));
        }
        let mut b = [0u8; HEADER_LEN];
        let n = read_full(&self.file, &mut b, 0).map_err(|e| Error::io("read", &self.path, e))?;
        if n == 0 {
            return Ok(None);
        }
        let h = FileHeader::parse(&b[..n]).map_err(|e| e.at(&self.path))?;
        // Two readers may both parse it; they read the same bytes.
        let _ = self.header.set(h);
        Ok(Some(h))
    }

    /// The header, created and written if the file is empty.
    fn header_or_create(&mut self) -> Result<FileHeader> {
        if let Some(h) = self.header()? {
            return Ok(h);
        }
        let h = FileHeader::random()?;
        self.file
            .write_all_at(&h.to_bytes(), 0)
            .map_err(|e| Error::io("write", &self.path, e))?;
        self.header = OnceLock::from(h);
        Ok(h)
    }

    /// Reads and decrypts plaintext block `block` (shorter at EOF, empty past it).
    fn read_block(&self, c: &ContentCipher, block: u64, out: &mut [u8]) -> Result<usize> {
        let Some(h) = self.header()? else {
            return Ok(0);
        };
        let cbs = c.cipher_bs();
        let off = HEADER_LEN as u64 + block * cbs as u64;
        let mut room = vec![0u8; cbs + COPY_ALIGN];
        let cbuf = file_aligned(&mut room, off, cbs);
        let n = read_full(&self.file, cbuf, off).map_err(|e| Error::io("read", &self.path, e))?;
        c.decrypt_block_into(block, Some(&h.id), &cbuf[..n], out)
            .map_err(|e| e.at(&self.path))
    }

    /// Encrypts and writes consecutive plaintext blocks from `block` on
    /// (the last may be partial) with one `pwrite` (with a key holder, a
    /// large run inside the file or appended to it may go as two, one per
    /// half, each from the keep's slot); into an empty file the new header
    /// goes with block 0 in the same `pwrite`. `clen` is the
    /// cipher length as the caller knows it (never more than the file's),
    /// moved past what this writes.
    ///
    /// A full disk never leaves a torn block: a write that only appends
    /// (starts at or past `clen`) is cut back to `clen` when it fails; any
    /// other first reserves its whole range (see [`Self::reserve_range`]),
    /// which matters where it rewrites the last block and grows the file,
    /// and where it fills a hole (writes that arrive out of order, the
    /// later one first, leave one).
    fn write_block(
        &mut self,
        c: &ContentCipher,
        block: u64,
        data: &[u8],
        clen: &mut u64,
    ) -> Result<()> {
        let on_disk = self.header()?;
        let (h, with_header) = match on_disk {
            Some(h) => (h, false),
            None if block == 0 => (FileHeader::random()?, true),
            None => (self.header_or_create()?, false),
        };
        let hl = if with_header { HEADER_LEN } else { 0 };
        let nblocks = data.len().div_ceil(PLAIN_BS);
        let off = (HEADER_LEN - hl) as u64 + block * c.cipher_bs() as u64;
        let end = off + (hl + data.len() + nblocks * c.block_overhead()) as u64;
        let append = off >= *clen;
        let header_bytes = h.to_bytes();
        let prefix = &header_bytes[..hl];
        let written = if c.is_held() {
            // Sealed in the keep's slot and written from there.
            if !append {
                self.reserve_range(off, end)?;
            }
            let write_at = |bytes: &[u8], at: usize| {
                self.file
                    .write_all_at(bytes, off + at as u64)
                    .map_err(|e| Error::io("write", &self.path, e))
            };
            // Two writes in either order only where a crash between them
            // tears nothing: inside the file (each block is old or new),
            // or appended to a file whose header is there (a missing first
            // half reads as a hole). Not with the header, and not over the
            // last block when the file grows: that one write goes whole.
            let split = end <= *clen || (append && !with_header);
            c.seal_and_write(block, &h.id, prefix, data, off, split, &write_at)
        } else {
            None
        };
        let result = match written {
            Some(r) => r,
            None => {
                let len = (end - off) as usize;
                let mut room = vec![0u8; len + COPY_ALIGN];
                let cbuf = file_aligned(&mut room, off, len);
                cbuf[..hl].copy_from_slice(prefix);
                c.encrypt_blocks_into(block, &h.id, data, &mut cbuf[hl..])?;
                if !append && !c.is_held() {
                    self.reserve_range(off, end)?;
                }
                self.file
                    .write_all_at(cbuf, off)
                    .map_err(|e| Error::io("write", &self.path, e))
            }
        };
        if let Err(e) = result {
            if append {
                // Whatever part of it landed goes again (a header written
                // earlier stays).
                let keep = if self.header.get().is_some() {
                    (*clen).max(HEADER_LEN as u64)
                } else {
                    *clen
                };
                let _ = self.file.set_len(keep);
            }
            return Err(e);
        }
        if with_header {
            self.header = OnceLock::from(h);
        }
        *clen = (*clen).max(end);
        Ok(())
    }

    /// Allocates cipher bytes `start..end` (`FALLOC_FL_KEEP_SIZE`), past
    /// the end of the file and in any hole inside it, so that a full disk
    /// fails the write before any byte of it lands: a short write would
    /// leave a torn block that no longer authenticates. Where nothing is
    /// missing this allocates nothing. File systems without `fallocate`
    /// are written to directly.
    fn reserve_range(&self, start: u64, end: u64) -> Result<()> {
        if end <= start {
            return Ok(());
        }
        match crate::sys::fallocate(&self.file, libc::FALLOC_FL_KEEP_SIZE, start, end - start) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
                Err(Error::io("write", &self.path, e))
            }
            _ => Ok(()),
        }
    }

    /// Reads up to `buf.len()` plaintext bytes at `off`; returns the count
    /// (short at end of file). A block that fails authentication fails the
    /// read with [`Error::Auth`] naming it.
    pub fn read_at(&self, c: &ContentCipher, buf: &mut [u8], off: u64) -> Result<usize> {
        let meta = self
            .file
            .metadata()
            .map_err(|e| Error::io("stat", &self.path, e))?;
        let cipher_len = meta.len();
        let size = c.plain_size(cipher_len);
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let Some(h) = self.header()? else {
            return Ok(0);
        };
        let bs = PLAIN_BS as u64;
        let end = size.min(off + buf.len() as u64);
        let (first, last) = (off / bs, (end - 1) / bs);
        let nblocks = (last - first + 1) as usize;
        let coff = HEADER_LEN as u64 + first * c.cipher_bs() as u64;
        let clen = (nblocks * c.cipher_bs()).min(cipher_len.saturating_sub(coff) as usize);
        let start = (off - first * bs) as usize;
        let want = (end - off) as usize;
        // Opens the blocks into `out` (room for all of them): from what
        // was read ahead directly, or with one `pread` into `cbuf`.
        let open = |cbuf: &mut Vec<u8>, out: &mut [u8]| -> Result<usize> {
            if let Some(s) = &self.stream {
                let stamp = Stamp::of(&meta);
                let r = s.read(
                    &self.file,
                    c,
                    &h.id,
                    first,
                    nblocks as u64,
                    cipher_len,
                    stamp,
                    out,
                );
                if let Some(r) = r {
                    return r.map_err(|e| e.at(&self.path));
                }
            }
            let read_at = |buf: &mut [u8], at: usize| {
                read_full(&self.file, buf, coff + at as u64)
                    .map_err(|e| Error::io("read", &self.path, e))
            };
            if let Some(r) = c.read_and_open(first, &h.id, clen, coff, &read_at, out) {
                return r.map_err(|e| e.at(&self.path));
            }
            let cbuf = file_aligned(grown(cbuf, clen + COPY_ALIGN), coff, clen);
            let got =
                read_full(&self.file, cbuf, coff).map_err(|e| Error::io("read", &self.path, e))?;
            c.decrypt_blocks_into(first, &h.id, &cbuf[..got], out)
                .map_err(|e| e.at(&self.path))
        };
        SCRATCH.with(|scratch| {
            let (cipher, plain) = &mut *scratch.borrow_mut();
            if start == 0 && buf.len() >= nblocks * PLAIN_BS {
                // Block-aligned (every kernel read): decrypt in place, no copy.
                let n = open(cipher, &mut buf[..nblocks * PLAIN_BS])?;
                return Ok(want.min(n));
            }
            let pbuf = grown(plain, nblocks * PLAIN_BS);
            let n = open(cipher, pbuf)?;
            let stop = (start + want).min(n);
            if stop <= start {
                return Ok(0);
            }
            buf[..stop - start].copy_from_slice(&pbuf[start..stop]);
            Ok(stop - start)
        })
    }

    /// Pads a partial last block to a full block of zeros (before writing
    /// beyond it); `clen` as in [`Self::write_block`].
    fn pad_last_block(&mut self, c: &ContentCipher, size: u64, clen: &mut u64) -> Result<()> {
        let rem = (size % PLAIN_BS as u64) as usize;
        if rem == 0 {
            return Ok(());
        }
        let block = size / PLAIN_BS as u64;
        let mut p = vec![0u8; PLAIN_BS];
        let n = self.read_block(c, block, &mut p)?;
        if n != rem {
            return Err(Error::BadHeader {
                path: Some(self.path.clone()),
                detail: format!("last block holds {n} bytes, expected {rem}"),
            });
        }
        p[n..].fill(0);
        self.write_block(c, block, &p, clen)
    }

    /// Writes `data` at plaintext offset `off`.
    pub fn write_at(&mut self, c: &ContentCipher, data: &[u8], off: u64) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.changing();
        let size = self.plain_size(c)?;
        // At most the file's length (a header-only file counts 0).
        let mut clen = c.cipher_size(size);
        let bs = PLAIN_BS as u64;
        // Writing past the block that would hold the next appended byte
        // leaves a hole: the old last block is padded first.
        if off / bs > size / bs {
            self.pad_last_block(c, size, &mut clen)?;
        }
        let mut pbuf = vec![0u8; PLAIN_BS];
        let mut pos = off;
        let end = off + data.len() as u64;
        while pos < end {
            let block = pos / bs;
            let skip = (pos % bs) as usize;
            let take = ((end - pos) as usize).min(PLAIN_BS - skip);
            let src = &data[(pos - off) as usize..(pos - off) as usize + take];
            let block_start = block * bs;
            if skip == 0 && take == PLAIN_BS {
                // A run of whole blocks, with the partial last one when
                // the write reaches the end of the file (nothing of that
                // block is kept then): one bulk encryption and one pwrite.
                let run = if end >= size {
                    (end - pos) as usize
                } else {
                    ((end - pos) / bs) as usize * PLAIN_BS
                };
                let at = (pos - off) as usize;
                self.write_block(c, block, &data[at..at + run], &mut clen)?;
                pos += run as u64;
                continue;
            }
            if skip == 0 && block_start + take as u64 >= size {
                // The whole block, or everything of it that will exist.
                self.write_block(c, block, src, &mut clen)?;
            } else {
                let old = if block_start < size {
                    self.read_block(c, block, &mut pbuf)?
                } else {
                    0
                };
                pbuf[old..].fill(0);
                pbuf[skip..skip + take].copy_from_slice(src);
                let len = old.max(skip + take);
                let (b, p) = (block, pbuf[..len].to_vec());
                self.write_block(c, b, &p, &mut clen)?;
            }
            pos += take as u64;
        }
        Ok(())
    }

    /// The cipher byte range holding plaintext bytes `off..off + len`
    /// (whole cipher blocks).
    fn cipher_range(c: &ContentCipher, off: u64, len: u64) -> (u64, u64) {
        let (bs, cbs) = (PLAIN_BS as u64, c.cipher_bs() as u64);
        let (first, last) = (off / bs, (off + len.max(1) - 1) / bs);
        let start = HEADER_LEN as u64 + first * cbs;
        (start, (last - first + 1) * cbs)
    }

    /// Reserves disk space for plaintext bytes `off..off + len` without
    /// changing the size (`fallocate(FALLOC_FL_KEEP_SIZE)` on the cipher
    /// blocks that hold them; zeroed cipher blocks read as holes).
    pub fn reserve(&mut self, c: &ContentCipher, off: u64, len: u64) -> Result<()> {
        self.changing();
        if len == 0 {
            return Ok(());
        }
        let (start, clen) = Self::cipher_range(c, off, len);
        crate::sys::fallocate(&self.file, libc::FALLOC_FL_KEEP_SIZE, start, clen)
            .map_err(|e| Error::io("fallocate", &self.path, e))
    }

    /// Zeroes plaintext bytes `off..off + len` inside the file, keeping
    /// the size (`FALLOC_FL_PUNCH_HOLE`): whole blocks before the last one
    /// become holes in the cipher file, the partial edges and the last
    /// block are rewritten as zeros.
    pub fn punch_hole(&mut self, c: &ContentCipher, off: u64, len: u64) -> Result<()> {
        self.changing();
        let size = self.plain_size(c)?;
        let end = off.saturating_add(len).min(size);
        if off >= end {
            return Ok(());
        }
        let bs = PLAIN_BS as u64;
        let (a, b) = (off.div_ceil(bs), (end / bs).min((size - 1) / bs));
        let zero = |s: &mut Self, from: u64, to: u64| -> Result<()> {
            let z = vec![0u8; PLAIN_BS * 16];
            let mut pos = from;
            while pos < to {
                let n = ((to - pos) as usize).min(z.len());
                s.write_at(c, &z[..n], pos)?;
                pos += n as u64;
            }
            Ok(())
        };
        if a >= b {
            return zero(self, off, end);
        }
        let (start, _) = Self::cipher_range(c, a * bs, 1);
        let clen = (b - a) * c.cipher_bs() as u64;
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        match crate::sys::fallocate(&self.file, mode, start, clen) {
            Ok(()) => {}
            // A backing file system without holes: zeros the long way.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => zero(self, a * bs, b * bs)?,
            Err(e) => return Err(Error::io("punch a hole in", &self.path, e)),
        }
        zero(self, off, a * bs)?;
        zero(self, b * bs, end)
    }

    /// Sets the plaintext size.
    pub fn truncate(&mut self, c: &ContentCipher, new_size: u64) -> Result<()> {
        self.changing();
        let size = self.plain_size(c)?;
        let set_len =
            |f: &File, l: u64, p: &Path| f.set_len(l).map_err(|e| Error::io("truncate", p, e));
        if new_size == 0 {
            set_len(&self.file, 0, &self.path)?;
            self.header = OnceLock::new();
            return Ok(());
        }
        if new_size == size {
            return Ok(());
        }
        if new_size > size {
            let bs = PLAIN_BS as u64;
            if size > 0 && (size - 1) / bs == (new_size - 1) / bs {
                // Growing inside the last block: a zero byte at the new end.
                return self.write_at(c, &[0u8], new_size - 1);
            }
            let mut clen = c.cipher_size(size);
            self.pad_last_block(c, size, &mut clen)?;
            if new_size / bs * bs == new_size {
                // Block-aligned: the new blocks are all holes.
                self.header_or_create()?;
                return set_len(&self.file, c.cipher_size(new_size), &self.path);
            }
            return self.write_at(c, &[0u8], new_size - 1);
        }
        // Shrink.
        let block = new_size / PLAIN_BS as u64;
        let rem = (new_size % PLAIN_BS as u64) as usize;
        if rem == 0 {
            return set_len(&self.file, c.cipher_size(new_size), &self.path);
        }
        let mut p = vec![0u8; PLAIN_BS];
        let n = self.read_block(c, block, &mut p)?;
        let keep = rem.min(n);
        let cut = HEADER_LEN as u64 + block * c.cipher_bs() as u64;
        set_len(&self.file, cut, &self.path)?;
        let mut last = p[..keep].to_vec();
        last.resize(rem, 0);
        let mut clen = cut;
        self.write_block(c, block, &last, &mut clen)
    }
}

/// Reads until `buf` is full or end of file.
fn read_full(f: &File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

thread_local! {
    /// Per-thread cipher and plaintext buffers for [`CipherFile::read_at`],
    /// reused so a read neither allocates nor zeroes.
    static SCRATCH: RefCell<(Vec<u8>, Vec<u8>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The first `n` bytes of `v`, growing it (zero-filled) when shorter.
fn grown(v: &mut Vec<u8>, n: usize) -> &mut [u8] {
    if v.len() < n {
        v.resize(n, 0);
    }
    &mut v[..n]
}
