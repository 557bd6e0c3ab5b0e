//! Read-only integrity check of a whole cipher directory (`fs fsck`, like
//! `gocryptfs -fsck`): every directory IV, name, long-name file, file
//! header, content block, symlink target and xattr is decrypted, and every
//! failure is reported — nothing is ever changed.

use crate::at;
use crate::cipherdir::CipherDir;
use crate::config::NameMode;
use crate::content::PLAIN_BS;
use crate::error::Error;
use crate::header::{FileHeader, HEADER_LEN};
use crate::names::{name_kind, NameKind, LONGNAME_SUFFIX};
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// One problem found.
#[derive(Debug)]
pub struct Problem {
    /// The cipher path concerned.
    pub path: PathBuf,
    /// The content block, for block failures.
    pub block: Option<u64>,
    /// What is wrong.
    pub error: Error,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.error {
            // These already name the file (and the block).
            Error::Auth { path: Some(_), .. }
            | Error::BadHeader { path: Some(_), .. }
            | Error::DirIv { .. }
            | Error::Io { .. } => write!(f, "{}", self.error),
            e => write!(f, "{}: {e}", self.path.display()),
        }
    }
}

/// The outcome of a check.
#[derive(Debug, Default)]
pub struct FsckReport {
    /// Everything that failed, in walk order.
    pub problems: Vec<Problem>,
    /// Entries checked.
    pub entries: u64,
    /// Content blocks checked.
    pub blocks: u64,
}

impl FsckReport {
    /// True when nothing failed.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn add(&mut self, path: &Path, block: Option<u64>, error: Error) {
        self.problems.push(Problem {
            path: path.to_path_buf(),
            block,
            error,
        });
    }
}

impl CipherDir {
    /// Checks the whole file system; never writes. The tree is walked
    /// through directory descriptors, one name at a time and never
    /// following a symlink, so a tree of any depth is checked and nothing
    /// outside the cipher directory is read.
    pub fn fsck(&self) -> FsckReport {
        let mut r = FsckReport::default();
        match File::open(self.root()) {
            Ok(d) => self.fsck_dir(&d, self.root(), true, &mut r),
            Err(e) => r.add(self.root(), None, Error::io("open", self.root(), e)),
        }
        r
    }

    fn fsck_dir(&self, fd: &impl AsFd, dir: &Path, at_root: bool, r: &mut FsckReport) {
        let iv = match self.dir_iv_at(fd, dir) {
            Ok(iv) => iv,
            Err(e) => {
                r.add(dir, None, e);
                return;
            }
        };
        let mut names: Vec<OsString> = match at::list_at(fd) {
            Ok(v) => v.into_iter().map(|e| e.name).collect(),
            Err(e) => return r.add(dir, None, Error::io("read", dir, e)),
        };
        names.sort();
        for cname in names {
            let path = dir.join(&cname);
            if self.is_internal_name(at_root, &cname) {
                // An orphaned .name file (its entry is gone) is worth a note.
                if let Some(s) = cname.to_str() {
                    if self.names().mode() != NameMode::Plain
                        && name_kind(s) == NameKind::LongNameFile
                    {
                        let base = &s[..s.len() - LONGNAME_SUFFIX.len()];
                        if at::stat_at(fd, OsStr::new(base)).is_err() {
                            r.add(
                                &path,
                                None,
                                Error::BadName {
                                    name: s.to_string(),
                                    detail: "long-name file without its entry",
                                },
                            );
                        }
                    }
                }
                continue;
            }
            r.entries += 1;
            if let Err(e) = self.decrypt_entry_at(fd, dir, &iv, &cname) {
                r.add(&path, None, e);
            }
            let st = match at::stat_at(fd, &cname) {
                Ok(st) => st,
                Err(e) => {
                    r.add(&path, None, Error::io("stat", &path, e));
                    continue;
                }
            };
            match st.st_mode & libc::S_IFMT {
                libc::S_IFDIR => match at::open_dir_at(fd, &cname) {
                    Ok(sub) => self.fsck_dir(&sub, &path, false, r),
                    Err(e) => r.add(&path, None, Error::io("open", &path, e)),
                },
                libc::S_IFREG => match at::open_regular_at(fd, &cname, libc::O_RDONLY, 0) {
                    Ok(f) => self.fsck_file(&f, &path, r),
                    Err(e) => r.add(&path, None, Error::io("open", &path, e)),
                },
                libc::S_IFLNK => match at::readlink_at(fd, &cname) {
                    Ok(target) => {
                        if let Err(e) = self.decrypt_symlink_target(&target, &path) {
                            r.add(&path, None, e);
                        }
                    }
                    Err(e) => r.add(&path, None, Error::io("readlink", &path, e)),
                },
                _ => {}
            }
            self.fsck_xattrs(fd, &cname, &path, r);
        }
    }

    fn fsck_xattrs(&self, fd: &impl AsFd, cname: &OsStr, path: &Path, r: &mut FsckReport) {
        let Ok(names) = at::list_xattrs_at(fd, cname) else {
            return;
        };
        for n in names {
            let Some(s) = n.to_str() else { continue };
            match self.names().decrypt_xattr_name(s) {
                Ok(None) => {}
                Ok(Some(_)) => match at::get_xattr_at(fd, cname, &n) {
                    Ok(v) => {
                        if let Err(e) = self.decrypt_xattr_value(&v) {
                            r.add(path, None, e.at(path));
                        }
                    }
                    Err(e) => r.add(path, None, Error::io("read xattr of", path, e)),
                },
                Err(e) => r.add(path, None, e),
            }
        }
    }

    fn fsck_file(&self, f: &File, path: &Path, r: &mut FsckReport) {
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        if size == 0 {
            return;
        }
        let mut hb = [0u8; HEADER_LEN];
        let n = f.read_at(&mut hb, 0).unwrap_or(0);
        let h = match FileHeader::parse(&hb[..n]) {
            Ok(h) => h,
            Err(e) => return r.add(path, None, e.at(path)),
        };
        let c = self.content();
        let cbs = c.cipher_bs();
        let mut cbuf = vec![0u8; cbs];
        let mut pbuf = vec![0u8; PLAIN_BS];
        let mut block = 0u64;
        loop {
            let off = HEADER_LEN as u64 + block * cbs as u64;
            if off >= size {
                break;
            }
            let want = ((size - off) as usize).min(cbs);
            let got = match f.read_at(&mut cbuf[..want], off) {
                Ok(g) => g,
                Err(e) => {
                    r.add(path, Some(block), Error::io("read", path, e));
                    break;
                }
            };
            r.blocks += 1;
            if let Err(e) = c.decrypt_block_into(block, Some(&h.id), &cbuf[..got], &mut pbuf) {
                r.add(path, Some(block), e.at(path));
            }
            block += 1;
        }
    }
}
