//! The gocryptfs v2 on-disk format, for `cryptkeep fs`.
//!
//! A cipher directory holds `gocryptfs.conf` ([`config`]), one cipher file
//! per plaintext file ([`header`], [`content`]), EME-encrypted names with a
//! `gocryptfs.diriv` per directory ([`names`], [`diriv`]), hashed long names
//! with `.name` files, encrypted symlink targets and xattrs. [`CipherDir`]
//! ties a config and its keys together; [`CipherDir::decrypt_tree`] and
//! [`CipherDir::encrypt_tree`] convert whole trees offline.
//!
//! `docs/format/overlay.md` describes the format byte by byte; the real
//! gocryptfs is the oracle in this crate's tests.

pub mod at;
mod b64_bytes;
pub mod cipherdir;
pub mod config;
pub mod content;
pub mod copy_align;
mod derive;
pub mod diriv;
pub mod error;
pub mod file;
pub mod flags;
pub mod fsck;
pub mod header;
pub mod held;
pub mod holder;
pub mod kdf;
pub mod keys;
mod name_cache;
pub mod names;
pub mod reverse;
mod stream;
pub mod sys;
pub mod tree;

pub use cipherdir::{CipherDir, DirEntry, Listed};
pub use config::{Config, ContentAlg, InitOptions, NameMode};
pub use content::{ContentCipher, PLAIN_BS, SEAL_WORK_LEN};
pub use copy_align::{file_aligned, file_aligned_start, COPY_ALIGN};
pub use error::{Error, Result};
pub use file::CipherFile;
pub use flags::FeatureFlag;
pub use fsck::{FsckReport, Problem};
pub use header::{FileHeader, FileId, HEADER_LEN};
pub use held::{HeldKeys, KeyHolder};
pub use keys::MasterKey;
pub use names::{CipherName, DirIv, NameCipher};
pub use tree::TreeStats;

use std::path::Path;

/// Opens `cipherdir` with `password` and decrypts it into `out_dir`.
pub fn decrypt_tree(cipherdir: &Path, password: &[u8], out_dir: &Path) -> Result<TreeStats> {
    CipherDir::open(cipherdir, password)?.decrypt_tree(out_dir)
}

/// Opens the initialised `cipherdir` with `password` and encrypts
/// `plain_dir` into it.
pub fn encrypt_tree(plain_dir: &Path, cipherdir: &Path, password: &[u8]) -> Result<TreeStats> {
    CipherDir::open(cipherdir, password)?.encrypt_tree(plain_dir)
}
