//! LUKS1 and LUKS2 headers, byte-compatible with cryptsetup: load (with
//! LUKS2 copy recovery), validate, format, unlock, add and remove keyslots,
//! dump. One module per on-disk object, like cryptsetup `lib/luks1` and
//! `lib/luks2`; all I/O goes through [`BlockIo`].
//!
//! Standards: LUKS1 On-Disk Format Specification v1.2.3; LUKS2 On-Disk
//! Format Specification v1.1.x (cryptsetup `docs/on-disk-format*.pdf`).
//! Our byte-level account, with every deviation, is in `docs/format/luks1.md`
//! and `docs/format/luks2.md`.
//!
//! This crate only reads and writes metadata and key material; the data
//! path (sector encryption of the payload) belongs to the volume engine,
//! which takes a [`Segment`] and the volume key from [`Luks::unlock`].

pub mod area;
pub mod error;
pub mod io;
pub mod luks1;
pub mod luks2;

mod util;

use cryptkeep_crypto::{kdf, Backend, CipherSpec, HashAlg, Pbkdf, SecretBytes};

pub use error::Error;
pub use io::{BlockIo, MemIo};

/// Which LUKS version a header is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LuksVersion {
    /// LUKS1 (592-byte header, 8 PBKDF2 keyslots).
    V1,
    /// LUKS2 (binary headers + JSON metadata).
    V2,
}

/// The encrypted data area the volume engine maps (dm-crypt table semantics).
#[derive(Clone, Debug)]
pub struct Segment {
    /// Bytes from the start of the data device.
    pub offset: u64,
    /// Length in bytes; `None` = dynamic: to the end of the device.
    pub size: Option<u64>,
    /// Added to every IV sector number (dm-crypt `iv_offset`), in 512-byte units.
    pub iv_tweak: u64,
    /// Cipher, chaining mode and IV generator.
    pub cipher: CipherSpec,
    /// Volume key length in bytes.
    pub key_bytes: usize,
    /// Encryption sector size (512 for LUKS1). LUKS2 does not set
    /// `iv_large_sectors`: IVs count 512-byte sectors even with 4096-byte sectors.
    pub sector_size: u32,
}

/// State of one keyslot.
#[derive(Clone, Debug)]
pub struct KeyslotInfo {
    /// Slot number.
    pub slot: usize,
    /// Whether the slot holds key material.
    pub active: bool,
    /// Its KDF, if active and of a known type.
    pub kdf: Option<Pbkdf>,
    /// LUKS2 priority (0 ignore, 1 normal, 2 preferred); `None` for LUKS1.
    pub priority: Option<u8>,
}

/// What [`Luks::format`] writes. Defaults follow cryptsetup 2.6 `luksFormat`.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    /// LUKS1 or LUKS2.
    pub version: LuksVersion,
    /// Data cipher (also encrypts LUKS1 key material).
    pub cipher: CipherSpec,
    /// Volume key length in bytes (64 for aes-xts-plain64 with AES-256).
    pub key_bytes: usize,
    /// Encryption sector size (LUKS1: 512 only; LUKS2: 512..4096).
    pub sector_size: u32,
    /// LUKS1 header hash, LUKS2 digest and AF hash.
    pub hash: HashAlg,
    /// LUKS2 label.
    pub label: Option<String>,
    /// LUKS2 subsystem.
    pub subsystem: Option<String>,
    /// UUID; random v4 if `None`.
    pub uuid: Option<String>,
    /// Data offset in bytes; default 16 MiB (LUKS2) or the 1 MiB-aligned end of
    /// the keyslots (LUKS1); 0 for a detached header unless given.
    pub data_offset: Option<u64>,
    /// The header lives on a separate device or file.
    pub detached_header: bool,
    /// Reserved for authenticated encryption; must be `None`.
    pub integrity: Option<String>,
    /// Volume-key digest iterations; `None` benchmarks like cryptsetup:
    /// max(1000, PBKDF2 iterations per second × 125 / 1000).
    pub digest_iterations: Option<u32>,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            version: LuksVersion::V2,
            cipher: CipherSpec::parse("aes-xts-plain64").unwrap_or_else(|_| unreachable_spec()),
            key_bytes: 64,
            sector_size: 512,
            hash: HashAlg::Sha256,
            label: None,
            subsystem: None,
            uuid: None,
            data_offset: None,
            detached_header: false,
            integrity: None,
            digest_iterations: None,
        }
    }
}

#[allow(clippy::panic)]
fn unreachable_spec() -> CipherSpec {
    panic!("the crypto crate cannot parse aes-xts-plain64")
}

/// Digest iterations: the option, or cryptsetup's 125 ms benchmark rule.
pub(crate) fn default_digest_iterations(
    opts: &FormatOptions,
    hash: HashAlg,
    key_bytes: usize,
) -> Result<u32, Error> {
    if let Some(n) = opts.digest_iterations {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "digest iterations must be at least 1".into(),
            ));
        }
        return Ok(n);
    }
    let per_sec = kdf::pbkdf2_iterations_per_second(hash, key_bytes)?;
    let n = (per_sec.saturating_mul(125) / 1000).max(1000);
    Ok(u32::try_from(n).unwrap_or(u32::MAX))
}

/// The result of [`Luks::load`].
#[derive(Debug)]
pub struct Loaded {
    /// The header.
    pub luks: Luks,
    /// Things the user should know, e.g. a recovered LUKS2 copy.
    pub notices: Vec<String>,
}

#[derive(Clone, Debug)]
enum Inner {
    V1(Box<luks1::Luks1>),
    V2(Box<luks2::Luks2>),
}

/// A loaded header of either version.
#[derive(Clone, Debug)]
pub struct Luks {
    inner: Inner,
}

impl Luks {
    /// Read and validate the header on `io` (LUKS1, or LUKS2 with recovery of
    /// a damaged copy, reported in `notices`; nothing is written).
    pub fn load(io: &dyn BlockIo) -> Result<Loaded, Error> {
        let mut first = vec![0u8; 8];
        let probed = match io.read_at(&mut first, 0) {
            Ok(()) => luks1::header::probe_version(&first),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(Error::NotLuks),
            Err(source) => {
                return Err(Error::Io {
                    what: "reading the LUKS magic at offset 0".into(),
                    source,
                })
            }
        };
        match probed {
            Some(1) => Ok(Loaded {
                luks: Luks {
                    inner: Inner::V1(Box::new(luks1::Luks1::load(io)?)),
                },
                notices: Vec::new(),
            }),
            // Version 2, no magic or an unknown version: LUKS2, whose loader
            // also looks for an intact secondary copy.
            _ => {
                let (l, notices) = luks2::Luks2::load(io)?;
                Ok(Loaded {
                    luks: Luks {
                        inner: Inner::V2(Box::new(l)),
                    },
                    notices,
                })
            }
        }
    }

    /// Write a new header (and keyslot 0 with `passphrase`) for `volume_key`.
    /// Wipes the header and keyslot areas like cryptsetup; never touches data.
    pub fn format(
        io: &dyn BlockIo,
        opts: &FormatOptions,
        volume_key: &[u8],
        passphrase: &[u8],
        slot_kdf: &Pbkdf,
        backend: Backend,
    ) -> Result<Luks, Error> {
        if opts.integrity.is_some() {
            return Err(Error::Unsupported("formatting with integrity".into()));
        }
        if volume_key.len() != opts.key_bytes {
            return Err(Error::InvalidArgument(format!(
                "volume key is {} bytes but key_bytes is {}",
                volume_key.len(),
                opts.key_bytes
            )));
        }
        if volume_key.is_empty() || volume_key.len() > 512 {
            return Err(Error::InvalidArgument(format!(
                "volume key size {} must be 1..=512 bytes",
                volume_key.len()
            )));
        }
        opts.cipher.check_key_size(opts.key_bytes)?;
        let inner = match opts.version {
            LuksVersion::V1 => Inner::V1(Box::new(luks1::Luks1::format(
                io, opts, volume_key, passphrase, slot_kdf, backend,
            )?)),
            LuksVersion::V2 => Inner::V2(Box::new(luks2::format::format(
                io, opts, volume_key, passphrase, slot_kdf, backend,
            )?)),
        };
        Ok(Luks { inner })
    }

    /// The version.
    pub fn version(&self) -> LuksVersion {
        match self.inner {
            Inner::V1(_) => LuksVersion::V1,
            Inner::V2(_) => LuksVersion::V2,
        }
    }

    /// The UUID string.
    pub fn uuid(&self) -> &str {
        match &self.inner {
            Inner::V1(l) => &l.phdr.uuid,
            Inner::V2(l) => &l.uuid,
        }
    }

    /// The LUKS2 label (None if empty or LUKS1).
    pub fn label(&self) -> Option<&str> {
        match &self.inner {
            Inner::V1(_) => None,
            Inner::V2(l) => Some(l.label.as_str()).filter(|s| !s.is_empty()),
        }
    }

    /// The single crypt segment; fails with [`Error::UnmetRequirement`] on any
    /// LUKS2 mandatory requirement and [`Error::Unsupported`] on integrity or
    /// multi-segment (reencryption) headers.
    pub fn segment(&self) -> Result<Segment, Error> {
        match &self.inner {
            Inner::V1(l) => l.segment(),
            Inner::V2(l) => l.segment(),
        }
    }

    /// Bytes a header backup must copy.
    pub fn header_len(&self) -> u64 {
        match &self.inner {
            Inner::V1(l) => l.header_len(),
            Inner::V2(l) => l.header_len(),
        }
    }

    /// Data offset in bytes.
    pub fn data_offset(&self) -> u64 {
        match &self.inner {
            Inner::V1(l) => l.data_offset(),
            Inner::V2(l) => l.data_offset(),
        }
    }

    /// Keyslot states (LUKS1: all 8; LUKS2: the existing ones).
    pub fn keyslots(&self) -> Vec<KeyslotInfo> {
        match &self.inner {
            Inner::V1(l) => l.keyslots(),
            Inner::V2(l) => l.keyslots(),
        }
    }

    /// Open a keyslot with `passphrase` (any, in priority order, or only
    /// `slot`); returns the slot and the verified volume key.
    pub fn unlock(
        &self,
        io: &dyn BlockIo,
        passphrase: &[u8],
        slot: Option<usize>,
        backend: Backend,
    ) -> Result<(usize, SecretBytes), Error> {
        match &self.inner {
            Inner::V1(l) => l.unlock(io, passphrase, slot, backend),
            Inner::V2(l) => l.unlock(io, passphrase, slot, backend),
        }
    }

    /// Whether `key` matches the header's volume-key digest.
    pub fn verify_volume_key(&self, key: &[u8]) -> Result<bool, Error> {
        match &self.inner {
            Inner::V1(l) => l.verify_volume_key(key),
            Inner::V2(l) => l.verify_volume_key(key),
        }
    }

    /// Add a keyslot for `volume_key` (checked against the digest first) and
    /// write the header. Returns the slot used.
    pub fn add_keyslot(
        &mut self,
        io: &dyn BlockIo,
        volume_key: &[u8],
        passphrase: &[u8],
        slot: Option<usize>,
        kdf: &Pbkdf,
        backend: Backend,
    ) -> Result<usize, Error> {
        match &mut self.inner {
            Inner::V1(l) => l.add_keyslot(io, volume_key, passphrase, slot, kdf, backend),
            Inner::V2(l) => l.add_keyslot(io, volume_key, passphrase, slot, kdf, backend),
        }
    }

    /// Wipe a keyslot's area with random data and remove it, as cryptsetup
    /// `luksKillSlot` (which overwrites 39 times; see docs/format).
    pub fn remove_keyslot(&mut self, io: &dyn BlockIo, slot: usize) -> Result<(), Error> {
        match &mut self.inner {
            Inner::V1(l) => l.remove_keyslot(io, slot),
            Inner::V2(l) => l.remove_keyslot(io, slot),
        }
    }

    /// Text close to `cryptsetup luksDump`.
    pub fn dump(&self) -> String {
        match &self.inner {
            Inner::V1(l) => luks1::dump::text(&l.phdr),
            Inner::V2(l) => luks2::dump::text(l),
        }
    }

    /// LUKS2: the JSON metadata (as `luksDump --dump-json-metadata`); LUKS1:
    /// an object with every header field.
    pub fn dump_json(&self) -> serde_json::Value {
        match &self.inner {
            Inner::V1(l) => luks1::dump::json(&l.phdr),
            Inner::V2(l) => l.meta.to_value(),
        }
    }

    /// The LUKS1 header, if this is LUKS1.
    pub fn as_luks1(&self) -> Option<&luks1::Luks1> {
        match &self.inner {
            Inner::V1(l) => Some(l),
            Inner::V2(_) => None,
        }
    }

    /// The LUKS2 header, if this is LUKS2.
    pub fn as_luks2(&self) -> Option<&luks2::Luks2> {
        match &self.inner {
            Inner::V1(_) => None,
            Inner::V2(l) => Some(l),
        }
    }

    /// Mutable LUKS2 header (for metadata edits followed by [`luks2::Luks2::write`]).
    pub fn as_luks2_mut(&mut self) -> Option<&mut luks2::Luks2> {
        match &mut self.inner {
            Inner::V1(_) => None,
            Inner::V2(l) => Some(l),
        }
    }
}
