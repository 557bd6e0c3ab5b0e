//! Extended attributes: names are stored as `user.gocryptfs.` +
//! EME(name), values sealed like a content block without a file ID; POSIX
//! ACLs pass through unencrypted (as in gocryptfs).

use cryptkeep_fuse::ops::Errno;
use cryptkeep_overlay::at;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use super::attr::{errno, io_errno};
use super::fs::OverlayFs;
use super::resolve::shown;

type R<T> = Result<T, Errno>;

/// Asked by the kernel before the first write to every file and on every
/// chown (to drop file capabilities). File capabilities mean nothing on a
/// `nosuid` overlay, so, as in gocryptfs, it is never stored and the answer
/// comes without touching the disk.
const CAPABILITY: &str = "security.capability";

fn is_acl(name: &OsStr) -> bool {
    name == "system.posix_acl_access" || name == "system.posix_acl_default"
}

impl OverlayFs {
    fn stored_name(&self, name: &OsStr) -> R<OsString> {
        if is_acl(name) {
            return Ok(name.to_os_string());
        }
        let s = self
            .cd
            .names()
            .encrypt_xattr_name(name.as_bytes())
            .map_err(|_| Errno::EINVAL)?;
        Ok(OsString::from(s))
    }

    pub(crate) fn do_getxattr(&self, ino: u64, name: &OsStr) -> R<Vec<u8>> {
        if name == CAPABILITY {
            return Err(Errno::ENODATA);
        }
        let (a, _) = self.stat_of(ino)?;
        let stored = self.stored_name(name)?;
        let v = at::get_xattr_at(&*a.dir, &a.name, &stored).map_err(|e| io_errno(&e))?;
        if is_acl(name) {
            return Ok(v);
        }
        self.cd
            .decrypt_xattr_value(&v)
            .map_err(|e| errno(&e.at(shown(&a.name))))
    }

    pub(crate) fn do_setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        if name == CAPABILITY {
            return Err(Errno::EOPNOTSUPP);
        }
        let (a, _) = self.stat_of(ino)?;
        let stored = self.stored_name(name)?;
        let v = if is_acl(name) {
            value.to_vec()
        } else {
            self.cd.encrypt_xattr_value(value).map_err(|e| errno(&e))?
        };
        self.with_room(|| {
            at::set_xattr_at(&*a.dir, &a.name, &stored, &v, flags).map_err(|e| io_errno(&e))
        })
    }

    pub(crate) fn do_removexattr(&self, ino: u64, name: &OsStr) -> R<()> {
        let _changing = self.prefetch.changing();
        if self.read_only {
            return Err(Errno::EROFS);
        }
        let (a, _) = self.stat_of(ino)?;
        at::remove_xattr_at(&*a.dir, &a.name, &self.stored_name(name)?).map_err(|e| io_errno(&e))
    }

    /// The NUL-separated list of plaintext xattr names.
    pub(crate) fn do_listxattr(&self, ino: u64) -> R<Vec<u8>> {
        let (a, _) = self.stat_of(ino)?;
        let mut out = Vec::new();
        for n in at::list_xattrs_at(&*a.dir, &a.name).map_err(|e| io_errno(&e))? {
            let plain = if is_acl(&n) {
                Some(n.as_bytes().to_vec())
            } else {
                n.to_str()
                    .and_then(|s| self.cd.names().decrypt_xattr_name(s).ok().flatten())
            };
            if let Some(pn) = plain {
                out.extend_from_slice(&pn);
                out.push(0);
            }
        }
        Ok(out)
    }
}
