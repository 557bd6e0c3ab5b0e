//! `gocryptfs.diriv`: the 16 random bytes in every directory (DirIV flag)
//! that tweak the EME encryption of the names in it.

use crate::at;
use crate::error::{Error, Result};
use crate::names::DirIv;
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;

/// The file's name. Part of the on-disk format.
pub const DIRIV_NAME: &str = "gocryptfs.diriv";
/// Its length.
pub const DIRIV_LEN: usize = 16;
/// The mode gocryptfs creates it with.
pub const DIRIV_MODE: u32 = 0o444;

/// Reads `dir/gocryptfs.diriv`: exactly 16 bytes, not all zero.
pub fn read_dir_iv(dir: &Path) -> Result<DirIv> {
    let d = std::fs::File::open(dir).map_err(|e| Error::io("open", dir, e))?;
    read_dir_iv_at(&d, dir)
}

/// Reads the `gocryptfs.diriv` of the directory open as `dir` (`shown`
/// names it in errors): a regular file (never a symlink followed, a FIFO
/// opened or more than 17 bytes read) of exactly 16 bytes, not all zero.
pub fn read_dir_iv_at(dir: &impl AsFd, shown: &Path) -> Result<DirIv> {
    let path = shown.join(DIRIV_NAME);
    let buf = at::read_small_at(dir, OsStr::new(DIRIV_NAME), DIRIV_LEN).map_err(|e| {
        let detail = match e.kind() {
            std::io::ErrorKind::FileTooLarge => format!("more than {DIRIV_LEN} bytes"),
            _ => format!("cannot read it: {e}"),
        };
        Error::DirIv {
            path: path.clone(),
            detail,
        }
    })?;
    if buf.len() != DIRIV_LEN {
        return Err(Error::DirIv {
            path,
            detail: format!("{} bytes, expected {DIRIV_LEN}", buf.len()),
        });
    }
    let mut iv = [0u8; DIRIV_LEN];
    iv.copy_from_slice(&buf);
    if iv == [0u8; DIRIV_LEN] {
        return Err(Error::DirIv {
            path,
            detail: "all zeros".into(),
        });
    }
    Ok(DirIv(iv))
}

/// Creates `dir/gocryptfs.diriv` with fresh random bytes (mode 0444, fails
/// if it exists).
pub fn write_dir_iv(dir: &Path) -> Result<DirIv> {
    let d = std::fs::File::open(dir).map_err(|e| Error::io("open", dir, e))?;
    write_dir_iv_at(&d, dir)
}

/// Creates the `gocryptfs.diriv` of the directory open as `dir` (`shown`
/// names it in errors) with fresh random bytes: mode 0444, never over an
/// existing file or through a symlink; a failed write leaves no file.
pub fn write_dir_iv_at(dir: &impl AsFd, shown: &Path) -> Result<DirIv> {
    let path = shown.join(DIRIV_NAME);
    let name = OsStr::new(DIRIV_NAME);
    let mut iv = [0u8; DIRIV_LEN];
    cryptkeep_crypto::rand::fill_random(&mut iv)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
    let mut f = at::open_regular_at(dir, name, flags, DIRIV_MODE)
        .map_err(|e| Error::io("create", &path, e))?;
    if let Err(e) = f.write_all(&iv) {
        drop(f);
        let _ = at::unlink_at(dir, name, 0);
        return Err(Error::io("write", &path, e));
    }
    Ok(DirIv(iv))
}
