//! `gocryptfs.diriv`: the 16 random bytes in every directory (DirIV flag)
//! that tweak the EME encryption of the names in it.

use crate::error::{Error, Result};
use crate::names::DirIv;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The file's name. Part of the on-disk format.
pub const DIRIV_NAME: &str = "gocryptfs.diriv";
/// Its length.
pub const DIRIV_LEN: usize = 16;
/// The mode gocryptfs creates it with.
pub const DIRIV_MODE: u32 = 0o444;

/// Reads `dir/gocryptfs.diriv` (no symlink following): exactly 16 bytes, not
/// all zero.
pub fn read_dir_iv(dir: &Path) -> Result<DirIv> {
    let path = dir.join(DIRIV_NAME);
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| Error::DirIv {
            path: path.clone(),
            detail: format!("cannot open it: {e}"),
        })?;
    let mut buf = Vec::with_capacity(DIRIV_LEN + 1);
    (&mut f)
        .take(DIRIV_LEN as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io("read", &path, e))?;
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
    let path = dir.join(DIRIV_NAME);
    let mut iv = [0u8; DIRIV_LEN];
    cryptkeep_crypto::rand::fill_random(&mut iv)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(DIRIV_MODE)
        .open(&path)
        .map_err(|e| Error::io("create", &path, e))?;
    if let Err(e) = f.write_all(&iv) {
        drop(f);
        let _ = std::fs::remove_file(&path);
        return Err(Error::io("write", &path, e));
    }
    Ok(DirIv(iv))
}
