//! File names (gocryptfs `nametransform`): PKCS#7 padding to 16 bytes,
//! AES-256-EME under the directory's IV, base64url (unpadded with Raw64).
//! Encrypted names longer than the long-name limit are stored as
//! `gocryptfs.longname.` + base64url(SHA-256(encrypted name)), with the full
//! encrypted name in a sibling file of the same name plus `.name`.
//! Xattr names use the same scheme with the fixed IV `"xattr_name_iv_xx"`
//! and the store prefix `user.gocryptfs.`.

use crate::config::{Config, NameMode};
use crate::error::{Error, Result};
use crate::flags::FeatureFlag;
use crate::held::KeyHolder;
use crate::name_cache::NameCache;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use cryptkeep_crypto::eme::Eme;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Longest plaintext name, in bytes.
pub const NAME_MAX: usize = 255;
/// Prefix of hashed long names. Part of the on-disk format.
pub const LONGNAME_PREFIX: &str = "gocryptfs.longname.";
/// Suffix of the file that holds a long name. Part of the on-disk format.
pub const LONGNAME_SUFFIX: &str = ".name";
/// The fixed EME tweak for xattr names. Part of the on-disk format.
pub const XATTR_NAME_IV: &[u8; 16] = b"xattr_name_iv_xx";
/// Prefix under which encrypted xattrs are stored. Part of the on-disk format.
pub const XATTR_STORE_PREFIX: &str = "user.gocryptfs.";
/// Largest `.name` file gocryptfs reads.
pub const LONGNAME_FILE_MAX: usize = 344;

/// A directory's 16-byte name tweak (`gocryptfs.diriv`, or zeros with
/// deterministic names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirIv(pub [u8; 16]);

/// What a plaintext name becomes on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CipherName {
    /// The directory entry's name.
    pub on_disk: String,
    /// For hashed long names: the full encrypted name, to be written to
    /// `on_disk + ".name"`.
    pub long: Option<String>,
}

/// Which kind of entry an on-disk name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// An ordinary encrypted name.
    Normal,
    /// `gocryptfs.longname.<hash>`: content whose name is in the `.name` file.
    LongContent,
    /// `gocryptfs.longname.<hash>.name`: the long name itself.
    LongNameFile,
}

/// Classifies an on-disk name (EME modes only).
pub fn name_kind(cipher: &str) -> NameKind {
    if !cipher.starts_with(LONGNAME_PREFIX) {
        NameKind::Normal
    } else if cipher.ends_with(LONGNAME_SUFFIX) {
        NameKind::LongNameFile
    } else {
        NameKind::LongContent
    }
}

/// Checks a plaintext name the way gocryptfs does: non-empty, at most 255
/// bytes, no `/` or NUL, not `.` or `..`.
pub fn check_plain_name(name: &[u8]) -> Result<()> {
    let bad = |d: &'static str| Error::InvalidName {
        name: String::from_utf8_lossy(name).into_owned(),
        detail: d,
    };
    if name.is_empty() {
        return Err(bad("empty name"));
    }
    if name.len() > NAME_MAX {
        return Err(bad("longer than 255 bytes"));
    }
    if name.contains(&b'/') || name.contains(&0) {
        return Err(bad("contains '/' or NUL"));
    }
    if name == b"." || name == b".." {
        return Err(bad("'.' and '..' are not names"));
    }
    Ok(())
}

/// Encrypts and decrypts names for one file system.
pub struct NameCipher {
    eme: NameEngine,
    /// Names already encrypted or decrypted, when the key is with a holder
    /// (each request to it is a round trip to another process).
    cache: Option<NameCache>,
    mode: NameMode,
    raw64: bool,
    long_name_max: usize,
}

impl std::fmt::Debug for NameCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NameCipher({:?}, raw64={}, long>{})",
            self.mode, self.raw64, self.long_name_max
        )
    }
}

/// Where the name key is.
enum NameEngine {
    /// In this process (boxed: the key schedule stays where it was built).
    Local(Box<Eme>),
    /// With a key holder (the keep).
    Held(Arc<dyn KeyHolder>),
}

impl NameCipher {
    /// Builds the name cipher for `cfg` with the derived EME key.
    pub fn new(cfg: &Config, eme_key: &[u8]) -> Result<NameCipher> {
        Ok(NameCipher::with_engine(
            cfg,
            NameEngine::Local(Box::new(Eme::new(eme_key)?)),
        ))
    }

    /// The name cipher for `cfg` whose key stays with `holder`.
    pub fn held(cfg: &Config, holder: Arc<dyn KeyHolder>) -> NameCipher {
        NameCipher::with_engine(cfg, NameEngine::Held(holder))
    }

    fn with_engine(cfg: &Config, eme: NameEngine) -> NameCipher {
        NameCipher {
            cache: matches!(eme, NameEngine::Held(_)).then(NameCache::default),
            eme,
            mode: cfg.name_mode(),
            raw64: cfg.has(FeatureFlag::Raw64),
            long_name_max: cfg.long_name_max(),
        }
    }

    /// EME in place under `iv`, here or with the key holder.
    fn eme_apply(&self, encrypt: bool, iv: &[u8; 16], buf: &mut [u8]) -> Result<()> {
        match &self.eme {
            NameEngine::Local(e) if encrypt => Ok(e.encrypt(iv, buf)?),
            NameEngine::Local(e) => Ok(e.decrypt(iv, buf)?),
            NameEngine::Held(h) => h.eme(encrypt, iv, buf),
        }
    }

    /// The name mode.
    pub fn mode(&self) -> NameMode {
        self.mode
    }

    /// Encrypted names longer than this are hashed.
    pub fn long_name_max(&self) -> usize {
        self.long_name_max
    }

    /// base64url as the file system writes it (unpadded with Raw64).
    pub fn b64_encode(&self, b: &[u8]) -> String {
        if self.raw64 {
            URL_SAFE_NO_PAD.encode(b)
        } else {
            URL_SAFE.encode(b)
        }
    }

    /// Strict base64url decoding (canonical, no CR/LF).
    pub fn b64_decode(&self, s: &str) -> Option<Vec<u8>> {
        if self.raw64 {
            URL_SAFE_NO_PAD.decode(s).ok()
        } else {
            URL_SAFE.decode(s).ok()
        }
    }

    /// EME-encrypts `plain` under `iv` without validity checks or hashing.
    fn encrypt_raw(&self, plain: &[u8], iv: &[u8; 16]) -> Result<String> {
        if let Some(hit) = self.cache.as_ref().and_then(|c| c.get(iv, plain)) {
            return Ok(hit);
        }
        let pad = 16 - plain.len() % 16;
        let mut buf = Vec::with_capacity(plain.len() + pad);
        buf.extend_from_slice(plain);
        buf.resize(plain.len() + pad, pad as u8);
        self.eme_apply(true, iv, &mut buf)?;
        let cipher = self.b64_encode(&buf);
        self.remember(iv, plain, &cipher);
        Ok(cipher)
    }

    /// Decodes, EME-decrypts and unpads `cipher` under `iv`.
    fn decrypt_raw(&self, cipher: &str, iv: &[u8; 16]) -> Result<Vec<u8>> {
        let mut bin = self.decode_raw(cipher)?;
        self.eme_apply(false, iv, &mut bin)?;
        unpad(cipher, bin)
    }

    /// Puts a pair in the cache, if there is one. Only pairs the cipher
    /// made, or decrypted into a valid name, arrive here: decoding is
    /// canonical and the padding strict, so `plain` encrypts back to
    /// exactly `cipher`.
    fn remember(&self, iv: &[u8; 16], plain: &[u8], cipher: &str) {
        if let Some(c) = &self.cache {
            c.put(iv, plain, cipher);
        }
    }

    /// The EME ciphertext of `cipher`: base64url-decoded, whole blocks.
    fn decode_raw(&self, cipher: &str) -> Result<Vec<u8>> {
        if cipher.contains(['\r', '\n']) {
            return Err(bad_name(cipher, "contains CR or LF"));
        }
        let bin = self
            .b64_decode(cipher)
            .ok_or_else(|| bad_name(cipher, "not valid base64url"))?;
        if bin.is_empty()
            || bin.len() / 16 * 16 != bin.len()
            || bin.len() > 16 * cryptkeep_crypto::eme::MAX_BLOCKS
        {
            return Err(bad_name(cipher, "decoded length is not a multiple of 16"));
        }
        Ok(bin)
    }

    /// Encrypts a plaintext name for a directory with tweak `iv`, without
    /// hashing long results (plaintext-names mode returns the name itself).
    pub fn encrypt_name(&self, plain: &[u8], iv: &DirIv) -> Result<String> {
        check_plain_name(plain)?;
        match self.mode {
            NameMode::Plain => String::from_utf8(plain.to_vec()).map_err(|_| Error::InvalidName {
                name: String::from_utf8_lossy(plain).into_owned(),
                detail: "not UTF-8 (plaintext-names mode stores names as they are)",
            }),
            NameMode::Eme { .. } => self.encrypt_raw(plain, &iv.0),
        }
    }

    /// Encrypts a plaintext name and hashes it if it is longer than the
    /// long-name limit (`EncryptAndHashName`).
    pub fn encrypt_and_hash(&self, plain: &[u8], iv: &DirIv) -> Result<CipherName> {
        let full = self.encrypt_name(plain, iv)?;
        if self.mode != NameMode::Plain && full.len() > self.long_name_max {
            Ok(CipherName {
                on_disk: self.hash_long_name(&full),
                long: Some(full),
            })
        } else {
            Ok(CipherName {
                on_disk: full,
                long: None,
            })
        }
    }

    /// `gocryptfs.longname.` + base64url(SHA-256(encrypted name)).
    pub fn hash_long_name(&self, full: &str) -> String {
        format!(
            "{LONGNAME_PREFIX}{}",
            self.b64_encode(&Sha256::digest(full.as_bytes()))
        )
    }

    /// Decrypts an encrypted (not hashed) name; the result is a valid name.
    pub fn decrypt_name(&self, cipher: &str, iv: &DirIv) -> Result<Vec<u8>> {
        let plain = match self.mode {
            NameMode::Plain => return valid_plain(cipher, cipher.as_bytes().to_vec()),
            NameMode::Eme { .. } => match self.cached_plain(cipher, iv) {
                Some(hit) => hit,
                None => self.decrypt_raw(cipher, &iv.0)?,
            },
        };
        let plain = valid_plain(cipher, plain)?;
        self.remember(&iv.0, &plain, cipher);
        Ok(plain)
    }

    /// [`NameCipher::decrypt_name`] for several names of one directory, in
    /// order; with a key holder, in as few requests as it can. A name that
    /// cannot be decoded fails alone; a holder that fails fails them all.
    pub fn decrypt_names(&self, ciphers: &[&str], iv: &DirIv) -> Vec<Result<Vec<u8>>> {
        let items: Vec<(&str, &DirIv)> = ciphers.iter().map(|c| (*c, iv)).collect();
        self.decrypt_names_of(&items)
    }

    /// [`NameCipher::decrypt_names`] for names of several directories, each
    /// with its directory's IV: with a key holder, the listings of a tree
    /// walk's next directories in one request, and only for names not
    /// already known (none, for a directory listed before).
    pub fn decrypt_names_of(&self, items: &[(&str, &DirIv)]) -> Vec<Result<Vec<u8>>> {
        let h = match &self.eme {
            NameEngine::Held(h) if self.mode != NameMode::Plain => h,
            _ => {
                return items
                    .iter()
                    .map(|(c, iv)| self.decrypt_name(c, iv))
                    .collect()
            }
        };
        // Known names are answered; the rest are decoded for the holder.
        let mut out: Vec<Option<Result<Vec<u8>>>> = items
            .iter()
            .map(|(c, iv)| self.cached_plain(c, iv).map(|p| valid_plain(c, p)))
            .collect();
        let mut decoded: Vec<Option<Result<Vec<u8>>>> = items
            .iter()
            .zip(&out)
            .map(|((c, _), known)| known.is_none().then(|| self.decode_raw(c)))
            .collect();
        let mut bins: Vec<(&[u8; 16], &mut [u8])> = items
            .iter()
            .zip(decoded.iter_mut())
            .filter_map(|((_, iv), d)| match d {
                Some(Ok(b)) => Some((&iv.0, b.as_mut_slice())),
                _ => None,
            })
            .collect();
        if !bins.is_empty() {
            if let Err(e) = h.eme_many(false, &mut bins) {
                let msg = e.to_string();
                return items
                    .iter()
                    .map(|_| Err(Error::KeyHolder(msg.clone())))
                    .collect();
            }
        }
        for (((c, iv), d), slot) in items.iter().zip(decoded).zip(out.iter_mut()) {
            if let Some(d) = d {
                *slot = Some(d.and_then(|bin| {
                    let plain = valid_plain(c, unpad(c, bin)?)?;
                    self.remember(&iv.0, &plain, c);
                    Ok(plain)
                }));
            }
        }
        out.into_iter()
            .map(|r| r.expect("every name is known or decrypted"))
            .collect()
    }

    /// The plaintext of `cipher` in a directory with IV `iv`, if the cache
    /// has the pair (only with a key holder). The caller still checks that
    /// it is a valid file name: xattr names share the cache (under their
    /// own fixed IV, which a hostile `gocryptfs.diriv` can copy) and allow
    /// what file names do not, such as '/'.
    fn cached_plain(&self, cipher: &str, iv: &DirIv) -> Option<Vec<u8>> {
        self.cache.as_ref().and_then(|c| c.plain_of(&iv.0, cipher))
    }

    /// Checks that a `.name` file's content belongs to the hashed name
    /// `on_disk` and returns it.
    pub fn verify_long_name(&self, on_disk: &str, content: &[u8]) -> Result<String> {
        let bad = |d: &'static str| Error::BadName {
            name: on_disk.to_string(),
            detail: d,
        };
        if content.is_empty() || content.len() > LONGNAME_FILE_MAX {
            return Err(bad("its .name file is empty or longer than 344 bytes"));
        }
        let s = std::str::from_utf8(content).map_err(|_| bad("its .name file is not ASCII"))?;
        if self.hash_long_name(s) != on_disk {
            return Err(bad("its .name file does not match the hash"));
        }
        Ok(s.to_string())
    }

    /// The stored name of an xattr: `user.gocryptfs.` + EME(name, fixed IV).
    pub fn encrypt_xattr_name(&self, name: &[u8]) -> Result<String> {
        if name.is_empty() || name.contains(&0) {
            return Err(Error::InvalidName {
                name: String::from_utf8_lossy(name).into_owned(),
                detail: "xattr names are non-empty and have no NUL",
            });
        }
        Ok(format!(
            "{XATTR_STORE_PREFIX}{}",
            self.encrypt_raw(name, XATTR_NAME_IV)?
        ))
    }

    /// The plaintext name of a stored xattr, or `None` if it is not one of
    /// ours (no `user.gocryptfs.` prefix).
    pub fn decrypt_xattr_name(&self, stored: &str) -> Result<Option<Vec<u8>>> {
        let Some(c) = stored.strip_prefix(XATTR_STORE_PREFIX) else {
            return Ok(None);
        };
        let p = self.decrypt_raw(c, XATTR_NAME_IV)?;
        if p.is_empty() || p.contains(&0) {
            return Err(Error::BadName {
                name: stored.to_string(),
                detail: "decrypts to an invalid xattr name",
            });
        }
        Ok(Some(p))
    }
}

/// A [`Error::BadName`] for on-disk name `name`.
fn bad_name(name: &str, detail: &'static str) -> Error {
    Error::BadName {
        name: name.to_string(),
        detail,
    }
}

/// `plain`, the decryption of on-disk name `cipher`, if it is a valid name.
fn valid_plain(cipher: &str, plain: Vec<u8>) -> Result<Vec<u8>> {
    check_plain_name(&plain).map_err(|_| bad_name(cipher, "decrypts to an invalid name"))?;
    Ok(plain)
}

/// Strips the PKCS#7-style padding of an EME-decrypted name (`cipher` is
/// the on-disk name, for the error).
fn unpad(cipher: &str, mut bin: Vec<u8>) -> Result<Vec<u8>> {
    let pad = usize::from(*bin.last().unwrap_or(&0));
    let bad = || bad_name(cipher, "bad padding (wrong directory IV or key?)");
    if pad == 0 || pad > 16 || pad >= bin.len() {
        return Err(bad());
    }
    if bin[bin.len() - pad..]
        .iter()
        .any(|&b| usize::from(b) != pad)
    {
        return Err(bad());
    }
    bin.truncate(bin.len() - pad);
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::InitOptions;
    use crate::keys::MasterKey;

    fn cipher(opts: InitOptions) -> NameCipher {
        let mk = MasterKey::from_bytes(&[0u8; 32]).unwrap();
        let cfg = Config::create(
            &InitOptions {
                scrypt_log_n: 10,
                ..opts
            },
            &mk,
            b"x",
        )
        .unwrap();
        NameCipher::new(&cfg, crate::derive::name_key(&mk, &cfg).unwrap().as_slice()).unwrap()
    }

    /// Changing these changes the on-disk format.
    #[test]
    fn constants_are_pinned() {
        assert_eq!(LONGNAME_PREFIX, "gocryptfs.longname.");
        assert_eq!(LONGNAME_SUFFIX, ".name");
        assert_eq!(XATTR_NAME_IV, b"xattr_name_iv_xx");
        assert_eq!(XATTR_STORE_PREFIX, "user.gocryptfs.");
    }

    #[test]
    fn round_trips_and_lengths() {
        let n = cipher(InitOptions::default());
        let iv = DirIv([3u8; 16]);
        for len in [1usize, 15, 16, 17, 175, 176, 255] {
            let name = vec![b'a'; len];
            let c = n.encrypt_and_hash(&name, &iv).unwrap();
            // 175 bytes pad to 176 → 235 base64 chars: still short; 176 → 192 → 256: hashed.
            assert_eq!(c.long.is_some(), len > 175, "{len}");
            let full = c.long.clone().unwrap_or(c.on_disk.clone());
            assert_eq!(n.decrypt_name(&full, &iv).unwrap(), name);
            if let Some(l) = &c.long {
                assert_eq!(c.on_disk.len(), 62);
                assert_eq!(n.verify_long_name(&c.on_disk, l.as_bytes()).unwrap(), *l);
                assert!(n.verify_long_name(&c.on_disk, b"AAAA").is_err());
            }
        }
        // Other IV: different ciphertext, and decrypting with the wrong IV fails or differs.
        let a = n.encrypt_name(b"hello", &iv).unwrap();
        let b = n.encrypt_name(b"hello", &DirIv([4u8; 16])).unwrap();
        assert_ne!(a, b);
        assert!(!a.contains('='));
        assert!(n.encrypt_name(b"a/b", &iv).is_err());
        assert!(n.encrypt_name(b"..", &iv).is_err());
        assert!(n.encrypt_name(&[b'x'; 256], &iv).is_err());
        assert!(n.decrypt_name("!!!", &iv).is_err());
        assert!(n.decrypt_name("AAAA", &iv).is_err());
    }

    #[test]
    fn long_name_max_and_plain_mode() {
        let n = cipher(InitOptions {
            long_name_max: 100,
            ..InitOptions::default()
        });
        assert!(n
            .encrypt_and_hash(&[b'a'; 80], &DirIv([1; 16]))
            .unwrap()
            .long
            .is_some());
        let p = cipher(InitOptions {
            plaintext_names: true,
            ..InitOptions::default()
        });
        let c = p.encrypt_and_hash(&[b'a'; 255], &DirIv([0; 16])).unwrap();
        assert_eq!(c.on_disk, "a".repeat(255));
        assert_eq!(c.long, None);
    }

    #[test]
    fn xattr_names() {
        let n = cipher(InitOptions::default());
        let s = n.encrypt_xattr_name(b"user.test").unwrap();
        assert!(s.starts_with("user.gocryptfs."));
        assert_eq!(n.decrypt_xattr_name(&s).unwrap().unwrap(), b"user.test");
        assert_eq!(n.decrypt_xattr_name("user.other").unwrap(), None);
        assert!(n.decrypt_xattr_name("user.gocryptfs.AAAA").is_err());
    }
}
