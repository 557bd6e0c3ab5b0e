//! An opened (or newly created) cipher directory: its config, its keys,
//! and the name/content operations that need both.

use crate::at;
use crate::config::{Config, InitOptions, NameMode, CONF_NAME};
use crate::content::ContentCipher;
use crate::derive::{content_key, name_key};
use crate::diriv::{read_dir_iv, read_dir_iv_at, write_dir_iv, write_dir_iv_at, DIRIV_NAME};
use crate::error::{Error, Result};
use crate::keys::MasterKey;
use crate::names::{
    name_kind, CipherName, DirIv, NameCipher, NameKind, LONGNAME_FILE_MAX, LONGNAME_SUFFIX,
};
use cryptkeep_crypto::Backend;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

/// The mode of `.name` files.
pub const LONGNAME_FILE_MODE: u32 = 0o444;

/// One entry of a cipher directory, decrypted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The plaintext name.
    pub plain: OsString,
    /// The entry's name in the cipher directory.
    pub cipher: OsString,
}

/// One cipher directory's on-disk names, listed, for
/// [`CipherDir::decrypt_listings`].
pub struct Listed<'a> {
    /// The directory, open (its `.name` files are read through it).
    pub dir: std::os::fd::BorrowedFd<'a>,
    /// The directory as errors name it.
    pub shown: &'a Path,
    /// The directory's IV.
    pub iv: &'a DirIv,
    /// Its entries' names as stored.
    pub names: &'a [OsString],
}

/// A gocryptfs cipher directory with its keys loaded.
pub struct CipherDir {
    root: PathBuf,
    config: Config,
    content: ContentCipher,
    names: NameCipher,
}

impl std::fmt::Debug for CipherDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CipherDir")
            .field("root", &self.root)
            .field("content", &self.content)
            .field("names", &self.names)
            .finish()
    }
}

impl CipherDir {
    /// Opens `root` with `root/gocryptfs.conf` and `password`.
    pub fn open(root: &Path, password: &[u8]) -> Result<CipherDir> {
        CipherDir::open_with_config(root, &root.join(CONF_NAME), password)
    }

    /// Opens `root` with the config at `config_path` (gocryptfs `-config`).
    pub fn open_with_config(root: &Path, config_path: &Path, password: &[u8]) -> Result<CipherDir> {
        let config = Config::load(config_path)?;
        let mk = config.unlock(password, config_path)?;
        CipherDir::from_parts(root, config, &mk, Backend::default())
    }

    /// Opens `root` with a known master key (gocryptfs `-masterkey`); the
    /// config still supplies the feature flags.
    pub fn open_with_master_key(root: &Path, mk: &MasterKey) -> Result<CipherDir> {
        let config = Config::load(&root.join(CONF_NAME))?;
        CipherDir::from_parts(root, config, mk, Backend::default())
    }

    /// Builds the ciphers for `config` and `mk` on `backend`.
    pub fn from_parts(
        root: &Path,
        config: Config,
        mk: &MasterKey,
        backend: Backend,
    ) -> Result<CipherDir> {
        let content = ContentCipher::new(
            config.content_alg(),
            content_key(mk, &config)?.as_slice(),
            backend,
        )?;
        let names = NameCipher::new(&config, name_key(mk, &config)?.as_slice())?;
        Ok(CipherDir {
            root: root.to_path_buf(),
            config,
            content,
            names,
        })
    }

    /// Opens `root` with `config` while the keys stay with `holder` (the
    /// keep): this process never sees the master key or a derived key.
    pub fn with_key_holder(
        root: &Path,
        config: Config,
        holder: std::sync::Arc<dyn crate::KeyHolder>,
    ) -> Result<CipherDir> {
        let content = ContentCipher::held(config.content_alg(), holder.clone());
        let names = NameCipher::held(&config, holder);
        Ok(CipherDir {
            root: root.to_path_buf(),
            config,
            content,
            names,
        })
    }

    /// Creates a file system in `root` (created if missing, else it must be
    /// empty): `gocryptfs.conf` with a new random master key wrapped by
    /// `password`, and the root `gocryptfs.diriv` when names use DirIV.
    /// Returns the opened directory and the master key (for the user to note).
    pub fn init(
        root: &Path,
        password: &[u8],
        opts: &InitOptions,
    ) -> Result<(CipherDir, MasterKey)> {
        let mk = MasterKey::random()?;
        let cd = CipherDir::init_with_key(root, password, opts, &mk)?;
        Ok((cd, mk))
    }

    /// [`CipherDir::init`] with a given master key.
    pub fn init_with_key(
        root: &Path,
        password: &[u8],
        opts: &InitOptions,
        mk: &MasterKey,
    ) -> Result<CipherDir> {
        std::fs::create_dir_all(root).map_err(|e| Error::io("create", root, e))?;
        let mut it = std::fs::read_dir(root).map_err(|e| Error::io("read", root, e))?;
        if it.next().is_some() {
            return Err(Error::NotEmpty {
                path: root.to_path_buf(),
            });
        }
        let config = Config::create(opts, mk, password)?;
        config.save(&root.join(CONF_NAME))?;
        if config.name_mode() == (NameMode::Eme { diriv: true }) {
            write_dir_iv(root)?;
        }
        CipherDir::from_parts(root, config, mk, Backend::default())
    }

    /// The cipher directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The content cipher.
    pub fn content(&self) -> &ContentCipher {
        &self.content
    }

    /// The name cipher.
    pub fn names(&self) -> &NameCipher {
        &self.names
    }

    /// The name tweak of the cipher directory `dir` (its `gocryptfs.diriv`,
    /// zeros with deterministic names, unused with plaintext names).
    pub fn dir_iv(&self, dir: &Path) -> Result<DirIv> {
        match self.names.mode() {
            NameMode::Eme { diriv: true } => read_dir_iv(dir),
            _ => Ok(DirIv([0u8; 16])),
        }
    }

    /// [`CipherDir::dir_iv`] of the cipher directory open as `dir`
    /// (`shown` names it in errors).
    pub fn dir_iv_at(&self, dir: &impl AsFd, shown: &Path) -> Result<DirIv> {
        match self.names.mode() {
            NameMode::Eme { diriv: true } => read_dir_iv_at(dir, shown),
            _ => Ok(DirIv([0u8; 16])),
        }
    }

    /// Prepares a new cipher directory `dir` (already created): writes its
    /// `gocryptfs.diriv` when the file system uses them.
    pub fn init_dir(&self, dir: &Path) -> Result<()> {
        if self.names.mode() == (NameMode::Eme { diriv: true }) {
            write_dir_iv(dir)?;
        }
        Ok(())
    }

    /// [`CipherDir::init_dir`] of the new directory open as `dir`.
    pub fn init_dir_at(&self, dir: &impl AsFd, shown: &Path) -> Result<()> {
        if self.names.mode() == (NameMode::Eme { diriv: true }) {
            write_dir_iv_at(dir, shown)?;
        }
        Ok(())
    }

    /// Whether `cipher_name` in cipher directory `dir` is one of the
    /// file system's own files (config, diriv, `.name`), not an entry.
    pub fn is_internal(&self, dir: &Path, cipher_name: &OsStr) -> bool {
        self.is_internal_name(dir == self.root, cipher_name)
    }

    /// [`CipherDir::is_internal`] for a name in the root directory
    /// (`at_root`) or in another.
    pub fn is_internal_name(&self, at_root: bool, cipher_name: &OsStr) -> bool {
        let b = cipher_name.as_bytes();
        if b == CONF_NAME.as_bytes() && at_root {
            return true;
        }
        match self.names.mode() {
            NameMode::Plain => false,
            NameMode::Eme { diriv } => {
                (diriv && b == DIRIV_NAME.as_bytes())
                    || std::str::from_utf8(b).is_ok_and(|s| name_kind(s) == NameKind::LongNameFile)
            }
        }
    }

    /// The plaintext name of entry `cipher_name` in cipher directory `dir`
    /// whose tweak is `iv` (reads the `.name` file of a hashed long name).
    pub fn decrypt_entry(&self, dir: &Path, iv: &DirIv, cipher_name: &OsStr) -> Result<OsString> {
        let d = open_dir(dir)?;
        self.decrypt_entry_at(&d, dir, iv, cipher_name)
    }

    /// [`CipherDir::decrypt_entry`] in the cipher directory open as `dir`
    /// (`shown` names it in errors).
    pub fn decrypt_entry_at(
        &self,
        dir: &impl AsFd,
        shown: &Path,
        iv: &DirIv,
        cipher_name: &OsStr,
    ) -> Result<OsString> {
        let full = match self.full_cipher_name_at(dir, shown, cipher_name)? {
            None => return Ok(cipher_name.to_os_string()),
            Some(full) => full,
        };
        Ok(OsString::from_vec(self.names.decrypt_name(&full, iv)?))
    }

    /// [`CipherDir::decrypt_entry`] for several entries of `dir`, in order;
    /// with a key holder the names go to it together (one listing, few
    /// requests). Each entry fails alone.
    pub fn decrypt_entries(
        &self,
        dir: &Path,
        iv: &DirIv,
        cipher_names: &[OsString],
    ) -> Vec<Result<OsString>> {
        match open_dir(dir) {
            Ok(d) => self.decrypt_entries_at(&d, dir, iv, cipher_names),
            Err(e) => {
                let msg = e.to_string();
                cipher_names
                    .iter()
                    .map(|_| Err(Error::InvalidArgument(msg.clone())))
                    .collect()
            }
        }
    }

    /// [`CipherDir::decrypt_entries`] in the cipher directory open as `dir`
    /// (`shown` names it in errors).
    pub fn decrypt_entries_at(
        &self,
        dir: &impl AsFd,
        shown: &Path,
        iv: &DirIv,
        cipher_names: &[OsString],
    ) -> Vec<Result<OsString>> {
        let one = [Listed {
            dir: dir.as_fd(),
            shown,
            iv,
            names: cipher_names,
        }];
        self.decrypt_listings(&one).pop().unwrap_or_default()
    }

    /// [`CipherDir::decrypt_entries_at`] for the listings of several
    /// directories at once (one key-holder request where they fit): one
    /// result list per listing, in order.
    pub fn decrypt_listings(&self, listings: &[Listed<'_>]) -> Vec<Vec<Result<OsString>>> {
        let fulls: Vec<Vec<Result<Option<String>>>> = listings
            .iter()
            .map(|l| {
                l.names
                    .iter()
                    .map(|c| self.full_cipher_name_at(&l.dir, l.shown, c))
                    .collect()
            })
            .collect();
        let to_decrypt: Vec<(&str, &DirIv)> = listings
            .iter()
            .zip(&fulls)
            .flat_map(|(l, f)| {
                f.iter()
                    .filter_map(|f| f.as_ref().ok().and_then(|f| f.as_deref()))
                    .map(move |f| (f, l.iv))
            })
            .collect();
        let mut plain = self.names.decrypt_names_of(&to_decrypt).into_iter();
        listings
            .iter()
            .zip(fulls)
            .map(|(l, fulls)| {
                l.names
                    .iter()
                    .zip(fulls)
                    .map(|(c, f)| match f? {
                        None => Ok(c.clone()),
                        Some(_) => plain
                            .next()
                            .unwrap_or_else(|| {
                                Err(Error::InvalidArgument("name batch cut short".into()))
                            })
                            .map(OsString::from_vec),
                    })
                    .collect()
            })
            .collect()
    }

    /// The whole encrypted name behind on-disk name `cipher_name` in the
    /// directory open as `dir` (a long name's `.name` file read, at most
    /// [`LONGNAME_FILE_MAX`] bytes of a regular file, and checked); `None`
    /// when names are not encrypted (plaintext-names mode).
    fn full_cipher_name_at(
        &self,
        dir: &impl AsFd,
        shown: &Path,
        cipher_name: &OsStr,
    ) -> Result<Option<String>> {
        if self.names.mode() == NameMode::Plain {
            return Ok(None);
        }
        let s = cipher_name.to_str().ok_or_else(|| Error::BadName {
            name: cipher_name.to_string_lossy().into_owned(),
            detail: "not base64url",
        })?;
        if name_kind(s) == NameKind::LongContent {
            let n = format!("{s}{LONGNAME_SUFFIX}");
            let content =
                at::read_small_at(dir, OsStr::new(&n), LONGNAME_FILE_MAX).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::FileTooLarge {
                        Error::BadName {
                            name: s.to_string(),
                            detail: "its .name file is longer than 344 bytes",
                        }
                    } else {
                        Error::io("read", &shown.join(&n), e)
                    }
                })?;
            return Ok(Some(self.names.verify_long_name(s, &content)?));
        }
        Ok(Some(s.to_string()))
    }

    /// Lists cipher directory `dir` with decrypted names, skipping the file
    /// system's own files; sorted by plaintext name.
    pub fn list_dir(&self, dir: &Path) -> Result<Vec<DirEntry>> {
        let d = open_dir(dir)?;
        let iv = self.dir_iv_at(&d, dir)?;
        let at_root = dir == self.root;
        let mut ciphers = Vec::new();
        for e in at::list_at(&d).map_err(|e| Error::io("read", dir, e))? {
            if !self.is_internal_name(at_root, &e.name) {
                ciphers.push(e.name);
            }
        }
        let plains = self.decrypt_entries_at(&d, dir, &iv, &ciphers);
        let mut out = Vec::with_capacity(ciphers.len());
        for (cipher, plain) in ciphers.into_iter().zip(plains) {
            out.push(DirEntry {
                plain: plain?,
                cipher,
            });
        }
        out.sort_by(|a, b| a.plain.cmp(&b.plain));
        Ok(out)
    }

    /// The on-disk name for plaintext `name` in cipher directory `dir`
    /// (tweak `iv`).
    pub fn encrypt_entry(&self, iv: &DirIv, name: &OsStr) -> Result<CipherName> {
        self.names.encrypt_and_hash(name.as_bytes(), iv)
    }

    /// Writes the `.name` file for a hashed long name in cipher directory `dir`.
    pub fn write_long_name(&self, dir: &Path, cn: &CipherName) -> Result<()> {
        let d = open_dir(dir)?;
        self.write_long_name_at(&d, dir, cn)
    }

    /// Writes the `.name` file for a hashed long name in the cipher
    /// directory open as `dir` (`shown` names it in errors): created new
    /// (EEXIST if one is there), never through a symlink; a failed write
    /// (a full disk) leaves no partial file behind to block the name.
    pub fn write_long_name_at(&self, dir: &impl AsFd, shown: &Path, cn: &CipherName) -> Result<()> {
        let Some(long) = &cn.long else {
            return Ok(());
        };
        let n = format!("{}{LONGNAME_SUFFIX}", cn.on_disk);
        let name = OsStr::new(&n);
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let mut f = at::open_regular_at(dir, name, flags, LONGNAME_FILE_MODE)
            .map_err(|e| Error::io("create", &shown.join(name), e))?;
        f.write_all(long.as_bytes()).map_err(|e| {
            let _ = at::unlink_at(dir, name, 0);
            Error::io("write", &shown.join(name), e)
        })
    }

    /// Removes the `.name` file of the hashed long name `cn` (nothing for
    /// a short name) in the directory open as `dir`.
    pub fn remove_long_name_at(&self, dir: &impl AsFd, cn: &CipherName) -> std::io::Result<()> {
        if cn.long.is_none() {
            return Ok(());
        }
        let n = format!("{}{LONGNAME_SUFFIX}", cn.on_disk);
        at::unlink_at(dir, OsStr::new(&n), 0)
    }

    /// Maps a relative plaintext path to the absolute cipher path (reading
    /// each directory's IV on the way down).
    pub fn encrypt_path(&self, plain_rel: &Path) -> Result<PathBuf> {
        let mut cur = self.root.clone();
        for c in plain_rel.components() {
            match c {
                Component::Normal(n) => {
                    let iv = self.dir_iv(&cur)?;
                    cur.push(self.encrypt_entry(&iv, n)?.on_disk);
                }
                Component::CurDir => {}
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "{} is not a plain relative path",
                        plain_rel.display()
                    )))
                }
            }
        }
        Ok(cur)
    }

    /// The on-disk form of a symlink target: content-encrypted (block 0, no
    /// file ID) and base64url'd; unchanged with plaintext names.
    pub fn encrypt_symlink_target(&self, target: &OsStr) -> Result<OsString> {
        if self.names.mode() == NameMode::Plain || target.is_empty() {
            return Ok(target.to_os_string());
        }
        let ct = self.content.encrypt_unbound(target.as_bytes())?;
        Ok(OsString::from(self.names.b64_encode(&ct)))
    }

    /// Decrypts an on-disk symlink target (`link` is used in messages).
    pub fn decrypt_symlink_target(&self, stored: &OsStr, link: &Path) -> Result<OsString> {
        if self.names.mode() == NameMode::Plain || stored.is_empty() {
            return Ok(stored.to_os_string());
        }
        let ct = stored
            .to_str()
            .and_then(|s| self.names.b64_decode(s))
            .ok_or_else(|| Error::BadName {
                name: stored.to_string_lossy().into_owned(),
                detail: "symlink target is not base64url",
            })?;
        let pt = self.content.decrypt_unbound(&ct).map_err(|e| e.at(link))?;
        Ok(OsString::from_vec(pt))
    }

    /// Encrypts an xattr value (block 0, no file ID; empty stays empty).
    pub fn encrypt_xattr_value(&self, v: &[u8]) -> Result<Vec<u8>> {
        self.content.encrypt_unbound(v)
    }

    /// Decrypts an xattr value.
    pub fn decrypt_xattr_value(&self, v: &[u8]) -> Result<Vec<u8>> {
        self.content.decrypt_unbound(v)
    }
}

/// Opens the cipher directory `dir` for the `*_at` calls.
fn open_dir(dir: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| Error::io("open", dir, e))
}
