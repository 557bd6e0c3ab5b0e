//! Reverse mode (gocryptfs `-reverse`): a plaintext directory seen as a
//! read-only cipher directory. Everything random in forward mode is derived
//! from the *encrypted* relative path `p` instead (gocryptfs `pathiv`):
//!
//! * directory IV = SHA-256(p ‖ 0x00 ‖ "DIRIV")[..16] (zeros with
//!   deterministic names; the root's `p` is empty);
//! * file ID = SHA-256(p ‖ 0x00 ‖ "FILEID")[..16]; block n's nonce =
//!   SHA-256(p ‖ 0x00 ‖ "BLOCK0IV")[..16] with n added to its low 64 bits
//!   (big-endian);
//! * symlink nonce = SHA-256(p ‖ "/" ‖ name ‖ 0x00 ‖ "SYMLINKIV")[..16]:
//!   gocryptfs 2.x's `Readlink` appends the link's own cipher name to its
//!   path a second time, and the view must match what it shows.
//!
//! Deterministic nonces are only safe with AES-SIV, which reverse mode
//! forces. `.gocryptfs.reverse.conf` appears as `gocryptfs.conf`, and
//! `gocryptfs.diriv` and `.name` files are virtual.

use crate::cipherdir::CipherDir;
use crate::config::{Config, NameMode, CONF_NAME, CONF_REVERSE_NAME};
use crate::content::PLAIN_BS;
use crate::diriv::DIRIV_NAME;
use crate::error::{Error, Result};
use crate::header::{FileHeader, FileId, HEADER_LEN};
use crate::names::{DirIv, LONGNAME_SUFFIX};
use crate::tree::TreeStats;
use crate::ContentAlg;
use cryptkeep_crypto::Backend;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;

/// `SHA-256(path ‖ 0x00 ‖ purpose)[..16]`. Part of the reverse-mode format.
pub fn derive_iv(cipher_rel_path: &[u8], purpose: &str) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(cipher_rel_path);
    h.update([0u8]);
    h.update(purpose.as_bytes());
    let d = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// Block `n`'s nonce: `block0` with `n` added to its big-endian low 64 bits.
pub fn block_iv(block0: &[u8; 16], n: u64) -> [u8; 16] {
    let mut iv = *block0;
    let low = u64::from_be_bytes(iv[8..].try_into().unwrap_or([0; 8]));
    iv[8..].copy_from_slice(&low.wrapping_add(n).to_be_bytes());
    iv
}

/// `parent/name` for cipher-relative paths (`name` alone at the root).
pub fn join_rel(parent: &[u8], name: &[u8]) -> Vec<u8> {
    if parent.is_empty() {
        name.to_vec()
    } else {
        let mut v = parent.to_vec();
        v.push(b'/');
        v.extend_from_slice(name);
        v
    }
}

impl CipherDir {
    /// Opens the plaintext directory `plain_root` for reverse mode with its
    /// `.gocryptfs.reverse.conf` and `password`.
    pub fn open_reverse(plain_root: &Path, password: &[u8]) -> Result<CipherDir> {
        let conf = plain_root.join(CONF_REVERSE_NAME);
        let config = Config::load(&conf)?;
        if config.content_alg() != ContentAlg::AesSiv {
            return Err(Error::ConfigUnsupported {
                path: conf,
                detail: "reverse mode needs AES-SIV (create it with -reverse)".into(),
            });
        }
        let mk = config.unlock(password, &conf)?;
        CipherDir::from_parts(plain_root, config, &mk, Backend::default())
    }

    /// Creates `.gocryptfs.reverse.conf` in the plaintext directory
    /// `plain_root` (`gocryptfs -init -reverse`; AES-SIV is forced) and
    /// returns the opened directory and its master key.
    pub fn init_reverse(
        plain_root: &Path,
        password: &[u8],
        opts: &crate::InitOptions,
    ) -> Result<(CipherDir, crate::MasterKey)> {
        if opts.xchacha {
            return Err(Error::InvalidArgument(
                "reverse mode uses AES-SIV, not XChaCha20-Poly1305".into(),
            ));
        }
        let conf = plain_root.join(CONF_REVERSE_NAME);
        if conf.exists() {
            return Err(Error::InvalidArgument(format!(
                "{} already exists",
                conf.display()
            )));
        }
        let mk = crate::MasterKey::random()?;
        let opts = crate::InitOptions {
            aessiv: true,
            ..opts.clone()
        };
        let config = Config::create(&opts, &mk, password)?;
        config.save(&conf)?;
        let cd = CipherDir::from_parts(plain_root, config, &mk, Backend::default())?;
        Ok((cd, mk))
    }

    /// The directory IV of the directory whose cipher path is `cipher_rel`.
    pub fn reverse_dir_iv(&self, cipher_rel: &[u8]) -> DirIv {
        match self.names().mode() {
            NameMode::Eme { diriv: true } => DirIv(derive_iv(cipher_rel, "DIRIV")),
            _ => DirIv([0u8; 16]),
        }
    }

    /// Writes the cipher view of this reverse-mode plaintext directory into
    /// `out` (an empty or missing directory): the bytes a gocryptfs
    /// `-reverse` mount would show, virtual files included.
    pub fn reverse_tree(&self, out: &Path) -> Result<TreeStats> {
        std::fs::create_dir_all(out).map_err(|e| Error::io("create", out, e))?;
        let mut st = TreeStats::default();
        let conf = self.root().join(CONF_REVERSE_NAME);
        if conf.exists() {
            std::fs::copy(&conf, out.join(CONF_NAME)).map_err(|e| Error::io("copy", &conf, e))?;
        }
        self.reverse_dir(self.root(), b"", out, &mut st)?;
        Ok(st)
    }

    fn reverse_dir(&self, pdir: &Path, crel: &[u8], cdir: &Path, st: &mut TreeStats) -> Result<()> {
        let iv = self.reverse_dir_iv(crel);
        if self.names().mode() == (NameMode::Eme { diriv: true }) {
            write_virtual(&cdir.join(DIRIV_NAME), &iv.0)?;
        }
        let mut entries: Vec<_> = std::fs::read_dir(pdir)
            .map_err(|e| Error::io("read", pdir, e))?
            .collect::<std::io::Result<_>>()
            .map_err(|e| Error::io("read", pdir, e))?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name();
            if crel.is_empty() && name.as_bytes() == CONF_REVERSE_NAME.as_bytes() {
                continue;
            }
            let cn = self.encrypt_entry(&iv, &name)?;
            if let Some(long) = &cn.long {
                write_virtual(
                    &cdir.join(format!("{}{LONGNAME_SUFFIX}", cn.on_disk)),
                    long.as_bytes(),
                )?;
            }
            let child_rel = join_rel(crel, cn.on_disk.as_bytes());
            let pp = pdir.join(&name);
            let cp = cdir.join(&cn.on_disk);
            let m = std::fs::symlink_metadata(&pp).map_err(|e| Error::io("stat", &pp, e))?;
            let t = m.file_type();
            if t.is_dir() {
                std::fs::create_dir(&cp).map_err(|e| Error::io("create", &cp, e))?;
                st.dirs += 1;
                self.reverse_dir(&pp, &child_rel, &cp, st)?;
            } else if t.is_file() {
                st.bytes += self.reverse_file(&pp, &child_rel, &cp)?;
                st.files += 1;
            } else if t.is_symlink() {
                let target = std::fs::read_link(&pp).map_err(|e| Error::io("readlink", &pp, e))?;
                // gocryptfs's Readlink derives the nonce from the link's path
                // joined with its own name once more ("dir/name/name").
                let nonce_path = join_rel(&child_rel, cn.on_disk.as_bytes());
                let stored =
                    self.reverse_symlink_target(target.as_os_str().as_bytes(), &nonce_path)?;
                std::os::unix::fs::symlink(stored, &cp)
                    .map_err(|e| Error::io("symlink", &cp, e))?;
                st.symlinks += 1;
            }
        }
        Ok(())
    }

    /// The stored target of a symlink at cipher path `crel` in reverse mode.
    pub fn reverse_symlink_target(&self, target: &[u8], crel: &[u8]) -> Result<String> {
        if self.names().mode() == NameMode::Plain {
            return String::from_utf8(target.to_vec())
                .map_err(|_| Error::InvalidArgument("non-UTF-8 symlink target".into()));
        }
        if target.is_empty() {
            return Ok(String::new());
        }
        let nonce = derive_iv(crel, "SYMLINKIV");
        let c = self.content();
        let mut out = vec![0u8; target.len() + c.block_overhead()];
        c.encrypt_block_with_nonce(0, None, &nonce, target, &mut out)?;
        Ok(self.names().b64_encode(&out))
    }

    /// Reads `len` bytes at cipher offset `off` of the reverse-mode cipher
    /// file for the open plaintext file `f` (plaintext size `plain_size`)
    /// whose cipher path is `crel`.
    pub fn reverse_read(
        &self,
        f: &File,
        plain_size: u64,
        crel: &[u8],
        off: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        let c = self.content();
        let total = c.cipher_size(plain_size);
        if off >= total || len == 0 {
            return Ok(Vec::new());
        }
        let end = total.min(off + len as u64);
        let id: FileId = derive_iv(crel, "FILEID");
        let block0 = derive_iv(crel, "BLOCK0IV");
        let mut out = Vec::with_capacity((end - off) as usize);
        let mut pos = off;
        if pos < HEADER_LEN as u64 {
            let h = FileHeader { id }.to_bytes();
            let stop = end.min(HEADER_LEN as u64);
            out.extend_from_slice(&h[pos as usize..stop as usize]);
            pos = stop;
        }
        let cbs = c.cipher_bs() as u64;
        let mut pbuf = vec![0u8; PLAIN_BS];
        let mut cbuf = vec![0u8; c.cipher_bs()];
        while pos < end {
            let block = (pos - HEADER_LEN as u64) / cbs;
            let skip = ((pos - HEADER_LEN as u64) % cbs) as usize;
            let n = read_full(f, &mut pbuf, block * PLAIN_BS as u64)
                .map_err(|e| Error::io("read", self.root(), e))?;
            if n == 0 {
                break;
            }
            let clen = n + c.block_overhead();
            c.encrypt_block_with_nonce(
                block,
                Some(&id),
                &block_iv(&block0, block),
                &pbuf[..n],
                &mut cbuf[..clen],
            )?;
            let take = (clen - skip).min((end - pos) as usize);
            out.extend_from_slice(&cbuf[skip..skip + take]);
            pos += take as u64;
            if n < PLAIN_BS {
                break;
            }
        }
        Ok(out)
    }

    /// The cipher name and (for hashed names) `.name` content of plaintext
    /// entry `name` in the directory whose cipher path is `crel`.
    pub fn reverse_name(&self, crel: &[u8], name: &std::ffi::OsStr) -> Result<crate::CipherName> {
        if crel.is_empty() && name.as_bytes() == CONF_REVERSE_NAME.as_bytes() {
            return Ok(crate::CipherName {
                on_disk: CONF_NAME.to_string(),
                long: None,
            });
        }
        self.encrypt_entry(&self.reverse_dir_iv(crel), name)
    }

    /// Writes the reverse-mode cipher file for plaintext `src` at cipher
    /// path `crel` into `dst`; returns the plaintext size.
    fn reverse_file(&self, src: &Path, crel: &[u8], dst: &Path) -> Result<u64> {
        let f = File::open(src).map_err(|e| Error::io("open", src, e))?;
        let size = f.metadata().map_err(|e| Error::io("stat", src, e))?.len();
        let out = File::create(dst).map_err(|e| Error::io("create", dst, e))?;
        if size == 0 {
            return Ok(0);
        }
        let id: FileId = derive_iv(crel, "FILEID");
        let block0 = derive_iv(crel, "BLOCK0IV");
        out.write_all_at(&FileHeader { id }.to_bytes(), 0)
            .map_err(|e| Error::io("write", dst, e))?;
        let c = self.content();
        let mut pbuf = vec![0u8; PLAIN_BS];
        let mut cbuf = vec![0u8; c.cipher_bs()];
        let mut block = 0u64;
        loop {
            let n = read_full(&f, &mut pbuf, block * PLAIN_BS as u64)
                .map_err(|e| Error::io("read", src, e))?;
            if n == 0 {
                break;
            }
            let clen = n + c.block_overhead();
            c.encrypt_block_with_nonce(
                block,
                Some(&id),
                &block_iv(&block0, block),
                &pbuf[..n],
                &mut cbuf[..clen],
            )?;
            out.write_all_at(
                &cbuf[..clen],
                HEADER_LEN as u64 + block * c.cipher_bs() as u64,
            )
            .map_err(|e| Error::io("write", dst, e))?;
            block += 1;
            if n < PLAIN_BS {
                break;
            }
        }
        Ok(size)
    }
}

fn write_virtual(p: &Path, content: &[u8]) -> Result<()> {
    std::fs::write(p, content).map_err(|e| Error::io("write", p, e))?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o444))
        .map_err(|e| Error::io("chmod", p, e))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_iv_adds_to_the_low_half() {
        let mut b0 = [0u8; 16];
        b0[15] = 0xff;
        let iv = block_iv(&b0, 1);
        assert_eq!(iv[14..], [1, 0]);
        assert_eq!(iv[..8], [0u8; 8]);
        let b1 = [0xffu8; 16];
        assert_eq!(block_iv(&b1, 1)[8..], [0u8; 8]); // wraps, no carry into the high half
        assert_eq!(block_iv(&b1, 1)[..8], [0xffu8; 8]);
    }

    #[test]
    fn derive_is_sha256_prefix() {
        let d = derive_iv(b"", "DIRIV");
        let full = Sha256::digest(b"\0DIRIV");
        assert_eq!(d[..], full[..16]);
    }
}
