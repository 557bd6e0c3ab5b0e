//! `gocryptfs.conf`: JSON with the scrypt parameters, the wrapped master key,
//! the format version (2) and the feature flags.
//!
//! Master-key wrap (gocryptfs `configfile`): KEK = scrypt(password); with the
//! HKDF flag the AES-256-GCM key is HKDF-SHA256(KEK, "AES-GCM file content
//! encryption") and the nonce is 128 bits, otherwise the KEK itself with a
//! 96-bit nonce; associated data = 8 zero bytes (block 0, no file ID);
//! `EncryptedKey` = nonce ‖ ciphertext(32) ‖ tag(16).

use crate::error::{Error, Result};
use crate::flags::FeatureFlag;
use crate::kdf::{hkdf_derive, ScryptParams, HKDF_INFO_GCM_CONTENT};
use crate::keys::{MasterKey, MASTER_KEY_LEN};
use cryptkeep_crypto::aead::{new_aead, AeadAlg};
use cryptkeep_crypto::Backend;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The config's file name in the cipher directory (forward mode).
pub const CONF_NAME: &str = "gocryptfs.conf";
/// The config's file name in the plaintext directory (reverse mode).
pub const CONF_REVERSE_NAME: &str = ".gocryptfs.reverse.conf";
/// The on-disk format version this crate reads and writes.
pub const FORMAT_VERSION: u16 = 2;
/// The smallest `LongNameMax` accepted (a hashed name is 62 characters).
pub const LONG_NAME_MAX_MIN: u8 = 62;
/// The largest config read: gocryptfs writes well under 1 KiB and sets no
/// bound of its own; anything past this is refused unread.
pub const CONF_MAX_LEN: u64 = 1 << 20;

fn is_zero(v: &u8) -> bool {
    *v == 0
}

/// The JSON object, field for field.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ConfJson {
    #[serde(rename = "Creator", default)]
    creator: String,
    #[serde(rename = "EncryptedKey", with = "crate::b64_bytes")]
    encrypted_key: Vec<u8>,
    #[serde(rename = "ScryptObject")]
    scrypt: ScryptParams,
    #[serde(rename = "Version")]
    version: u16,
    #[serde(rename = "FeatureFlags", default)]
    feature_flags: Option<Vec<String>>,
    #[serde(rename = "FIDO2", default, skip_serializing_if = "Option::is_none")]
    fido2: Option<serde_json::Value>,
    #[serde(rename = "LongNameMax", default, skip_serializing_if = "is_zero")]
    long_name_max: u8,
}

/// Which AEAD encrypts file contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentAlg {
    /// AES-256-GCM, 128-bit nonces (the default).
    AesGcm,
    /// AES-SIV (`-aessiv`), 128-bit nonces.
    AesSiv,
    /// XChaCha20-Poly1305 (`-xchacha`), 192-bit nonces.
    XChaCha20Poly1305,
}

/// How names are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameMode {
    /// Names are stored as they are (`-plaintextnames`).
    Plain,
    /// EME-encrypted names; `diriv` tells whether each directory has a random
    /// IV (`false` = `-deterministic-names`, all-zero IV).
    Eme {
        /// Whether directories carry `gocryptfs.diriv`.
        diriv: bool,
    },
}

/// Options for creating a file system (`gocryptfs -init`).
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// AES-SIV content encryption.
    pub aessiv: bool,
    /// XChaCha20-Poly1305 content encryption.
    pub xchacha: bool,
    /// Do not encrypt names.
    pub plaintext_names: bool,
    /// No per-directory IVs.
    pub deterministic_names: bool,
    /// Hash encrypted names longer than this (62..=255; 255 is the default).
    pub long_name_max: u8,
    /// scrypt log2(N) (10..; gocryptfs's default is 16).
    pub scrypt_log_n: u8,
    /// The `Creator` string.
    pub creator: String,
}

impl Default for InitOptions {
    fn default() -> InitOptions {
        InitOptions {
            aessiv: false,
            xchacha: false,
            plaintext_names: false,
            deterministic_names: false,
            long_name_max: 255,
            scrypt_log_n: crate::kdf::SCRYPT_DEFAULT_LOG_N,
            creator: format!("cryptkeep {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// A parsed and validated `gocryptfs.conf`.
#[derive(Debug, Clone)]
pub struct Config {
    json: ConfJson,
    flags: Vec<FeatureFlag>,
}

impl Config {
    /// Reads and validates the config at `path`, a file inside a cipher (or
    /// plaintext) directory: a symbolic link there is refused, not followed,
    /// and so is anything that is not a regular file or is larger than
    /// [`CONF_MAX_LEN`].
    pub fn load(path: &Path) -> Result<Config> {
        Config::parse(&read_conf(path, false)?, path)
    }

    /// Like [`load`](Self::load) for a path the user named (gocryptfs
    /// `-config`): a symbolic link is followed, as gocryptfs does; its
    /// target must still be a regular file of at most [`CONF_MAX_LEN`].
    pub fn load_named(path: &Path) -> Result<Config> {
        Config::parse(&read_conf(path, true)?, path)
    }

    /// Parses and validates config bytes; `path` is only used in messages.
    pub fn parse(bytes: &[u8], path: &Path) -> Result<Config> {
        if bytes.is_empty() {
            return Err(Error::ConfigSyntax {
                path: path.to_path_buf(),
                detail: "the file is empty".into(),
            });
        }
        let json: ConfJson = serde_json::from_slice(bytes).map_err(|e| Error::ConfigSyntax {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        let mut flags = Vec::new();
        for name in json.feature_flags.iter().flatten() {
            let f = FeatureFlag::parse(name).ok_or_else(|| Error::UnknownFeatureFlag {
                path: path.to_path_buf(),
                flag: name.clone(),
            })?;
            if !flags.contains(&f) {
                flags.push(f);
            }
        }
        let c = Config { json, flags };
        c.validate().map_err(|detail| Error::ConfigUnsupported {
            path: path.to_path_buf(),
            detail,
        })?;
        Ok(c)
    }

    /// Whether `flag` is set.
    pub fn has(&self, flag: FeatureFlag) -> bool {
        self.flags.contains(&flag)
    }

    /// The feature flags, in file order.
    pub fn flags(&self) -> &[FeatureFlag] {
        &self.flags
    }

    /// The `Creator` string.
    pub fn creator(&self) -> &str {
        &self.json.creator
    }

    /// The scrypt parameters.
    pub fn scrypt(&self) -> &ScryptParams {
        &self.json.scrypt
    }

    /// The content AEAD.
    pub fn content_alg(&self) -> ContentAlg {
        if self.has(FeatureFlag::XChaCha20Poly1305) {
            ContentAlg::XChaCha20Poly1305
        } else if self.has(FeatureFlag::AESSIV) {
            ContentAlg::AesSiv
        } else {
            ContentAlg::AesGcm
        }
    }

    /// The name mode.
    pub fn name_mode(&self) -> NameMode {
        if self.has(FeatureFlag::PlaintextNames) {
            NameMode::Plain
        } else {
            NameMode::Eme {
                diriv: self.has(FeatureFlag::DirIV),
            }
        }
    }

    /// The effective long-name limit: encrypted names longer than this are
    /// hashed (`usize::MAX` without the LongNames flag).
    pub fn long_name_max(&self) -> usize {
        if !self.has(FeatureFlag::LongNames) {
            usize::MAX
        } else if self.json.long_name_max == 0 {
            255
        } else {
            usize::from(self.json.long_name_max)
        }
    }

    /// gocryptfs's consistency rules (`configfile/validate.go`).
    fn validate(&self) -> std::result::Result<(), String> {
        use FeatureFlag as F;
        if self.json.version != FORMAT_VERSION {
            return Err(format!(
                "on-disk format version {} (only version {FORMAT_VERSION} is supported; \
                 version 1 file systems need gocryptfs 1.x)",
                self.json.version
            ));
        }
        self.json.scrypt.validate()?;
        let (xchacha, siv, iv128) = (
            self.has(F::XChaCha20Poly1305),
            self.has(F::AESSIV),
            self.has(F::GCMIV128),
        );
        if xchacha && siv {
            return Err("both XChaCha20Poly1305 and AESSIV are set".into());
        }
        if siv && !iv128 {
            return Err("AESSIV requires the GCMIV128 flag".into());
        }
        if xchacha && iv128 {
            return Err("XChaCha20Poly1305 conflicts with GCMIV128".into());
        }
        if xchacha && !self.has(F::HKDF) {
            return Err("XChaCha20Poly1305 requires the HKDF flag".into());
        }
        if !xchacha && !siv && !iv128 {
            return Err(
                "AES-GCM without GCMIV128 (96-bit IVs, gocryptfs before 1.0) is not supported"
                    .into(),
            );
        }
        if self.has(F::PlaintextNames) {
            for f in [
                F::EMENames,
                F::DirIV,
                F::LongNames,
                F::Raw64,
                F::LongNameMax,
            ] {
                if self.has(f) {
                    return Err(format!("PlaintextNames conflicts with {f}"));
                }
            }
        } else if !self.has(F::EMENames) {
            return Err(
                "encrypted names without EMENames (gocryptfs before 1.0) are not supported".into(),
            );
        }
        let lnm = self.json.long_name_max;
        if lnm != 0 && !self.has(F::LongNameMax) {
            return Err(format!(
                "LongNameMax={lnm} but the LongNameMax flag is not set"
            ));
        }
        if lnm == 0 && self.has(F::LongNameMax) {
            return Err("the LongNameMax flag is set but LongNameMax is 0".into());
        }
        if lnm != 0 && lnm < LONG_NAME_MAX_MIN {
            return Err(format!("LongNameMax={lnm} is below {LONG_NAME_MAX_MIN}"));
        }
        if self.json.encrypted_key.len() != self.key_nonce_len() + MASTER_KEY_LEN + 16 {
            return Err(format!(
                "EncryptedKey is {} bytes, expected {}",
                self.json.encrypted_key.len(),
                self.key_nonce_len() + MASTER_KEY_LEN + 16
            ));
        }
        Ok(())
    }

    fn key_nonce_len(&self) -> usize {
        if self.has(FeatureFlag::HKDF) {
            16
        } else {
            12
        }
    }

    /// Unwraps the master key with `password`. A wrong password (or an
    /// altered `EncryptedKey`) gives [`Error::WrongPassword`].
    pub fn unlock(&self, password: &[u8], path: &Path) -> Result<MasterKey> {
        if self.has(FeatureFlag::FIDO2) {
            return Err(Error::ConfigUnsupported {
                path: path.to_path_buf(),
                detail: "the master key is wrapped with a FIDO2 token, which is not supported; \
                         open it with the master key instead"
                    .into(),
            });
        }
        let kek = self.json.scrypt.derive(password)?;
        let aead = key_wrapper(&kek, self.has(FeatureFlag::HKDF))?;
        let (nonce, sealed) = self.json.encrypted_key.split_at(self.key_nonce_len());
        let mut mk = cryptkeep_crypto::SecretBytes::new(MASTER_KEY_LEN);
        aead.open(nonce, &0u64.to_be_bytes(), sealed, mk.as_mut_slice())
            .map_err(|_| Error::WrongPassword {
                path: path.to_path_buf(),
            })?;
        MasterKey::from_secret(mk)
    }

    /// A new config for `opts` holding `master` wrapped with `password`.
    pub fn create(opts: &InitOptions, master: &MasterKey, password: &[u8]) -> Result<Config> {
        use FeatureFlag as F;
        if opts.aessiv && opts.xchacha {
            return Err(Error::InvalidArgument(
                "choose AES-SIV or XChaCha20-Poly1305, not both".into(),
            ));
        }
        if opts.long_name_max < LONG_NAME_MAX_MIN {
            return Err(Error::InvalidArgument(format!(
                "long name max {} is outside {LONG_NAME_MAX_MIN}..=255",
                opts.long_name_max
            )));
        }
        // Flag order as gocryptfs 2.3 writes it.
        let mut flags = vec![F::HKDF];
        flags.push(if opts.xchacha {
            F::XChaCha20Poly1305
        } else {
            F::GCMIV128
        });
        let mut long_name_max = 0;
        if opts.plaintext_names {
            flags.push(F::PlaintextNames);
        } else {
            if !opts.deterministic_names {
                flags.push(F::DirIV);
            }
            if opts.long_name_max != 255 {
                long_name_max = opts.long_name_max;
                flags.push(F::LongNameMax);
            }
            flags.extend([F::EMENames, F::LongNames, F::Raw64]);
        }
        if opts.aessiv {
            flags.push(F::AESSIV);
        }
        let json = ConfJson {
            creator: opts.creator.clone(),
            encrypted_key: Vec::new(),
            scrypt: ScryptParams::new(opts.scrypt_log_n)?,
            version: FORMAT_VERSION,
            feature_flags: Some(flags.iter().map(|f| f.name().to_string()).collect()),
            fido2: None,
            long_name_max,
        };
        let mut c = Config { json, flags };
        c.set_password(master, password, opts.scrypt_log_n)?;
        c.validate().map_err(Error::InvalidArgument)?;
        Ok(c)
    }

    /// Re-wraps `master` with `password` under fresh scrypt parameters
    /// (`gocryptfs -passwd`).
    pub fn set_password(
        &mut self,
        master: &MasterKey,
        password: &[u8],
        scrypt_log_n: u8,
    ) -> Result<()> {
        let scrypt = ScryptParams::new(scrypt_log_n)?;
        let kek = scrypt.derive(password)?;
        let hkdf = self.has(FeatureFlag::HKDF);
        let aead = key_wrapper(&kek, hkdf)?;
        let nonce_len = if hkdf { 16 } else { 12 };
        let mut out = vec![0u8; nonce_len + MASTER_KEY_LEN + 16];
        cryptkeep_crypto::rand::fill_random(&mut out[..nonce_len])?;
        let (nonce, sealed) = out.split_at_mut(nonce_len);
        aead.seal(nonce, &0u64.to_be_bytes(), master.as_bytes(), sealed)?;
        self.json.scrypt = scrypt;
        self.json.encrypted_key = out;
        Ok(())
    }

    /// The JSON text, formatted like gocryptfs (tab indent, final newline).
    pub fn to_json(&self) -> Result<String> {
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"\t");
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        self.json
            .serialize(&mut ser)
            .map_err(|e| Error::InvalidArgument(format!("config serialisation: {e}")))?;
        buf.push(b'\n');
        String::from_utf8(buf).map_err(|_| Error::InvalidArgument("config is not UTF-8".into()))
    }

    /// Writes the config to `path` atomically: `path.tmp` (mode 0400,
    /// O_EXCL, fsync), then rename over `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = self.to_json()?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o400)
            .open(&tmp)
            .map_err(|e| Error::io("create", &tmp, e))?;
        let r = f
            .write_all(text.as_bytes())
            .and_then(|_| f.sync_all())
            .map_err(|e| Error::io("write", &tmp, e));
        drop(f);
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, path).map_err(|e| Error::io("rename", &tmp, e))
    }
}

/// Reads the config file at `path` without blocking on a FIFO or device
/// (O_NONBLOCK), following a final symbolic link only if `follow`; refuses
/// what is not a regular file, and more than [`CONF_MAX_LEN`] bytes.
fn read_conf(path: &Path, follow: bool) -> Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let refuse = |detail: String| Error::ConfigSyntax {
        path: path.to_path_buf(),
        detail,
    };
    let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            if !follow && e.raw_os_error() == Some(libc::ELOOP) {
                refuse("it is a symbolic link, which is not followed here".into())
            } else {
                Error::io("open", path, e)
            }
        })?;
    let meta = f.metadata().map_err(|e| Error::io("stat", path, e))?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let kind = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO"
        } else if ft.is_socket() {
            "a socket"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else {
            "a special file"
        };
        return Err(refuse(format!("it is {kind}, not a regular file")));
    }
    let too_big = |n: u64| {
        refuse(format!(
            "it is {n} bytes, more than the {CONF_MAX_LEN} a config may have"
        ))
    };
    if meta.len() > CONF_MAX_LEN {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    f.take(CONF_MAX_LEN + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    if bytes.len() as u64 > CONF_MAX_LEN {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// The AES-256-GCM instance that wraps the master key.
fn key_wrapper(
    kek: &cryptkeep_crypto::SecretBytes,
    hkdf: bool,
) -> Result<Box<dyn cryptkeep_crypto::aead::Aead>> {
    if kek.len() != 32 {
        return Err(Error::InvalidArgument(format!(
            "scrypt KeyLen {} (gocryptfs uses 32)",
            kek.len()
        )));
    }
    let key = if hkdf {
        hkdf_derive(kek.as_slice(), HKDF_INFO_GCM_CONTENT, 32)?
    } else {
        kek.clone()
    };
    Ok(new_aead(
        AeadAlg::Aes256Gcm,
        key.as_slice(),
        Backend::default(),
    )?)
}

/// Changes the password of the config at `path` (`gocryptfs -passwd`):
/// unlocks with `old`, re-wraps the same master key with `new` under fresh
/// scrypt parameters (`scrypt_log_n`) and replaces the file atomically.
pub fn change_password(path: &Path, old: &[u8], new: &[u8], scrypt_log_n: u8) -> Result<()> {
    let mut cfg = Config::load(path)?;
    let mk = cfg.unlock(old, path)?;
    cfg.set_password(&mk, new, scrypt_log_n)?;
    cfg.save(path)
}
