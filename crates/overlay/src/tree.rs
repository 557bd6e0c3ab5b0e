//! Offline conversion of whole trees, without a mount: a cipher directory
//! to a plaintext copy ([`CipherDir::decrypt_tree`]) and a plaintext tree
//! into a cipher directory ([`CipherDir::encrypt_tree`]).
//!
//! Both keep names, contents, holes (whole 4 KiB blocks), symlinks, FIFOs
//! and device nodes, hard links, permissions, owners (when allowed),
//! timestamps and `user.*` xattrs.

use crate::cipherdir::CipherDir;
use crate::content::PLAIN_BS;
use crate::error::{Error, Result};
use crate::header::{FileHeader, HEADER_LEN};
use crate::sys;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Cipher blocks handled per read/write.
const BATCH_BLOCKS: usize = 64;

/// What a tree conversion did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Regular files written (hard links counted once).
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Hard links created to files already written.
    pub hardlinks: u64,
    /// FIFOs, sockets and device nodes created.
    pub specials: u64,
    /// Plaintext bytes (file sizes, holes included).
    pub bytes: u64,
}

type Links = HashMap<(u64, u64), std::path::PathBuf>;

fn io<'a>(op: &'static str, p: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(op, p, e)
}

/// Copies permission bits, owner (best effort) and timestamps from `m` to `p`.
fn apply_meta(p: &Path, m: &Metadata) -> Result<()> {
    let is_link = m.file_type().is_symlink();
    // SAFETY-free: std's lchown; EPERM (not root) is ignored.
    let _ = std::os::unix::fs::lchown(p, Some(m.uid()), Some(m.gid()));
    if !is_link {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m.mode() & 0o7777))
            .map_err(io("chmod", p))?;
    }
    sys::set_times(p, (m.atime(), m.atime_nsec()), (m.mtime(), m.mtime_nsec()))
        .map_err(io("set times on", p))
}

/// Creates a FIFO/socket/device node like the one `m` describes.
fn make_special(p: &Path, m: &Metadata) -> Result<()> {
    sys::mknod(p, m.mode(), m.rdev()).map_err(io("mknod", p))
}

fn is_special(m: &Metadata) -> bool {
    let t = m.file_type();
    t.is_fifo() || t.is_socket() || t.is_char_device() || t.is_block_device()
}

impl CipherDir {
    /// Decrypts the whole cipher directory into `out_dir` (created if
    /// missing; existing entries with the same names make it fail).
    pub fn decrypt_tree(&self, out_dir: &Path) -> Result<TreeStats> {
        std::fs::create_dir_all(out_dir).map_err(io("create", out_dir))?;
        let mut st = TreeStats::default();
        let mut links = Links::new();
        self.decrypt_dir(self.root(), out_dir, &mut st, &mut links)?;
        Ok(st)
    }

    fn decrypt_dir(
        &self,
        cdir: &Path,
        pdir: &Path,
        st: &mut TreeStats,
        links: &mut Links,
    ) -> Result<()> {
        for e in self.list_dir(cdir)? {
            let cp = cdir.join(&e.cipher);
            let pp = pdir.join(&e.plain);
            let m = std::fs::symlink_metadata(&cp).map_err(io("stat", &cp))?;
            let t = m.file_type();
            if t.is_dir() {
                std::fs::create_dir(&pp).map_err(io("create", &pp))?;
                std::fs::set_permissions(&pp, std::fs::Permissions::from_mode(0o700))
                    .map_err(io("chmod", &pp))?;
                st.dirs += 1;
                self.decrypt_dir(&cp, &pp, st, links)?;
            } else if t.is_file() {
                if m.nlink() > 1 {
                    if let Some(first) = links.get(&(m.dev(), m.ino())) {
                        std::fs::hard_link(first, &pp).map_err(io("link", &pp))?;
                        st.hardlinks += 1;
                        continue;
                    }
                    links.insert((m.dev(), m.ino()), pp.clone());
                }
                st.bytes += self.decrypt_file_to(&cp, &pp)?;
                st.files += 1;
            } else if t.is_symlink() {
                let stored = std::fs::read_link(&cp).map_err(io("readlink", &cp))?;
                let target = self.decrypt_symlink_target(stored.as_os_str(), &cp)?;
                std::os::unix::fs::symlink(&target, &pp).map_err(io("symlink", &pp))?;
                st.symlinks += 1;
            } else if is_special(&m) {
                make_special(&pp, &m)?;
                st.specials += 1;
            } else {
                continue;
            }
            self.decrypt_xattrs(&cp, &pp)?;
            apply_meta(&pp, &m)?;
        }
        Ok(())
    }

    fn decrypt_xattrs(&self, cp: &Path, pp: &Path) -> Result<()> {
        for name in sys::list_xattrs(cp).map_err(io("list xattrs of", cp))? {
            let Some(s) = name.to_str() else { continue };
            let Some(plain_name) = self.names().decrypt_xattr_name(s)? else {
                continue;
            };
            let v = sys::get_xattr(cp, &name).map_err(io("read xattr of", cp))?;
            let pv = self.decrypt_xattr_value(&v).map_err(|e| e.at(cp))?;
            sys::set_xattr(pp, OsStr::from_bytes(&plain_name), &pv)
                .map_err(io("set xattr on", pp))?;
        }
        Ok(())
    }

    /// Decrypts one cipher file into a new file `dst`, keeping holes;
    /// returns the plaintext size.
    pub fn decrypt_file_to(&self, src: &Path, dst: &Path) -> Result<u64> {
        let f = File::open(src).map_err(io("open", src))?;
        let size = f.metadata().map_err(io("stat", src))?.len();
        let out = File::create(dst).map_err(io("create", dst))?;
        if size == 0 {
            return Ok(0);
        }
        let mut hb = [0u8; HEADER_LEN];
        let n = read_full(&f, &mut hb, 0).map_err(io("read", src))?;
        let header = FileHeader::parse(&hb[..n]).map_err(|e| e.at(src))?;
        let c = self.content();
        let cbs = c.cipher_bs();
        let plain_size = c.plain_size(size);
        let mut cbuf = vec![0u8; cbs * BATCH_BLOCKS];
        let mut pbuf = vec![0u8; PLAIN_BS];
        let mut block = 0u64;
        loop {
            let off = HEADER_LEN as u64 + block * cbs as u64;
            let n = read_full(&f, &mut cbuf, off).map_err(io("read", src))?;
            if n == 0 {
                break;
            }
            for chunk in cbuf[..n].chunks(cbs) {
                if !(chunk.len() == cbs && chunk.iter().all(|&b| b == 0)) {
                    let pn = c
                        .decrypt_block_into(block, Some(&header.id), chunk, &mut pbuf)
                        .map_err(|e| e.at(src))?;
                    out.write_all_at(&pbuf[..pn], block * PLAIN_BS as u64)
                        .map_err(io("write", dst))?;
                }
                block += 1;
            }
            if n < cbuf.len() {
                break;
            }
        }
        out.set_len(plain_size).map_err(io("truncate", dst))?;
        Ok(plain_size)
    }

    /// Encrypts the plaintext tree `plain_dir` into this (freshly
    /// initialised, otherwise empty) cipher directory.
    pub fn encrypt_tree(&self, plain_dir: &Path) -> Result<TreeStats> {
        let mut st = TreeStats::default();
        let mut links = Links::new();
        self.encrypt_dir(plain_dir, self.root(), &mut st, &mut links)?;
        Ok(st)
    }

    fn encrypt_dir(
        &self,
        pdir: &Path,
        cdir: &Path,
        st: &mut TreeStats,
        links: &mut Links,
    ) -> Result<()> {
        let iv = self.dir_iv(cdir)?;
        let mut entries: Vec<_> = std::fs::read_dir(pdir)
            .map_err(io("read", pdir))?
            .collect::<std::io::Result<_>>()
            .map_err(io("read", pdir))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            if cdir == self.root() && name.as_bytes() == crate::config::CONF_NAME.as_bytes() {
                return Err(Error::InvalidName {
                    name: name.to_string_lossy().into_owned(),
                    detail: "gocryptfs.conf at the top is reserved for the config",
                });
            }
            let pp = pdir.join(&name);
            let cn = self.encrypt_entry(&iv, &name)?;
            let cp = cdir.join(&cn.on_disk);
            let m = std::fs::symlink_metadata(&pp).map_err(io("stat", &pp))?;
            let t = m.file_type();
            if t.is_dir() {
                std::fs::create_dir(&cp).map_err(io("create", &cp))?;
                std::fs::set_permissions(&cp, std::fs::Permissions::from_mode(0o700))
                    .map_err(io("chmod", &cp))?;
                self.init_dir(&cp)?;
                st.dirs += 1;
                self.encrypt_dir(&pp, &cp, st, links)?;
            } else if t.is_file() {
                if m.nlink() > 1 {
                    if let Some(first) = links.get(&(m.dev(), m.ino())) {
                        std::fs::hard_link(first, &cp).map_err(io("link", &cp))?;
                        self.write_long_name(cdir, &cn)?;
                        st.hardlinks += 1;
                        continue;
                    }
                    links.insert((m.dev(), m.ino()), cp.clone());
                }
                st.bytes += self.encrypt_file_to(&pp, &cp)?;
                st.files += 1;
            } else if t.is_symlink() {
                let target = std::fs::read_link(&pp).map_err(io("readlink", &pp))?;
                let stored = self.encrypt_symlink_target(target.as_os_str())?;
                std::os::unix::fs::symlink(&stored, &cp).map_err(io("symlink", &cp))?;
                st.symlinks += 1;
            } else if is_special(&m) {
                make_special(&cp, &m)?;
                st.specials += 1;
            } else {
                continue;
            }
            self.write_long_name(cdir, &cn)?;
            self.encrypt_xattrs(&pp, &cp)?;
            apply_meta(&cp, &m)?;
        }
        Ok(())
    }

    fn encrypt_xattrs(&self, pp: &Path, cp: &Path) -> Result<()> {
        for name in sys::list_xattrs(pp).map_err(io("list xattrs of", pp))? {
            if !name.as_bytes().starts_with(b"user.") {
                continue;
            }
            let v = sys::get_xattr(pp, &name).map_err(io("read xattr of", pp))?;
            let cname = self.names().encrypt_xattr_name(name.as_bytes())?;
            let cv = self.encrypt_xattr_value(&v)?;
            sys::set_xattr(cp, OsStr::new(&cname), &cv).map_err(io("set xattr on", cp))?;
        }
        Ok(())
    }

    /// Encrypts one plaintext file into a new cipher file `dst`; whole
    /// 4 KiB blocks that are holes in `src` (except the last block) stay
    /// holes. Returns the plaintext size.
    pub fn encrypt_file_to(&self, src: &Path, dst: &Path) -> Result<u64> {
        let f = File::open(src).map_err(io("open", src))?;
        let size = f.metadata().map_err(io("stat", src))?.len();
        let out = File::create(dst).map_err(io("create", dst))?;
        if size == 0 {
            return Ok(0);
        }
        let data = data_ranges(&f, size);
        let header = FileHeader::random()?;
        out.write_all_at(&header.to_bytes(), 0)
            .map_err(io("write", dst))?;
        let c = self.content();
        let cbs = c.cipher_bs() as u64;
        let nblocks = size.div_ceil(PLAIN_BS as u64);
        let mut pbuf = vec![0u8; PLAIN_BS * BATCH_BLOCKS];
        let mut cbuf = vec![0u8; cbs as usize];
        let mut block = 0u64;
        while block < nblocks {
            let off = block * PLAIN_BS as u64;
            let n = read_full(&f, &mut pbuf, off).map_err(io("read", src))?;
            if n == 0 {
                return Err(Error::io(
                    "read",
                    src,
                    std::io::ErrorKind::UnexpectedEof.into(),
                ));
            }
            for chunk in pbuf[..n].chunks(PLAIN_BS) {
                let start = block * PLAIN_BS as u64;
                let hole = block + 1 < nblocks
                    && !data
                        .iter()
                        .any(|&(a, b)| a < start + PLAIN_BS as u64 && b > start);
                if !hole {
                    let clen = chunk.len() + c.block_overhead();
                    c.encrypt_block_into(block, Some(&header.id), chunk, &mut cbuf[..clen])?;
                    out.write_all_at(&cbuf[..clen], HEADER_LEN as u64 + block * cbs)
                        .map_err(io("write", dst))?;
                }
                block += 1;
            }
        }
        out.set_len(c.cipher_size(size))
            .map_err(io("truncate", dst))?;
        Ok(size)
    }
}

/// The data (non-hole) byte ranges of `f`; the whole file when the file
/// system cannot tell.
fn data_ranges(f: &File, size: u64) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let start = match sys::seek_data(f, pos) {
            Ok(Some(s)) => s,
            Ok(None) => break,
            Err(_) => return vec![(0, size)],
        };
        let end = match sys::seek_hole(f, start) {
            Ok(Some(e)) => e.min(size),
            Ok(None) => size,
            Err(_) => return vec![(0, size)],
        };
        if end <= start {
            break;
        }
        v.push((start, end));
        pos = end;
    }
    v
}

/// Reads until `buf` is full or end of file; returns the bytes read.
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
