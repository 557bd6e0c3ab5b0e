//! [`Luks`]: one loaded header of either version, dispatching to
//! [`crate::luks1`] and [`crate::luks2`].

use cryptkeep_crypto::{Backend, Pbkdf, SecretBytes};

use crate::error::Error;
use crate::io::BlockIo;
use crate::types::{AuthSegment, FormatOptions, KeyslotInfo, LuksVersion, Segment};
use crate::{luks1, luks2};

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
    /// Wipes the header and keyslot areas like cryptsetup; never touches data
    /// (for an authenticated volume, [`FormatOptions::auth`], the caller
    /// formats the dm-integrity superblock at the data offset; cryptsetup
    /// zeroes its first 4096 bytes first).
    pub fn format(
        io: &dyn BlockIo,
        opts: &FormatOptions,
        volume_key: &[u8],
        passphrase: &[u8],
        slot_kdf: &Pbkdf,
        backend: Backend,
    ) -> Result<Luks, Error> {
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
        match &opts.auth {
            None => opts.cipher.check_key_size(opts.key_bytes)?,
            Some(_) if opts.version == LuksVersion::V1 => {
                return Err(Error::InvalidArgument(
                    "authenticated encryption (integrity) needs LUKS2".into(),
                ))
            }
            Some(a) => {
                luks2::segment::auth_key_split(
                    &a.encryption,
                    &a.integrity,
                    None,
                    opts.key_bytes,
                    "segment",
                )
                .map_err(|f| match f {
                    luks2::segment::AuthFault::Unsupported(w)
                    | luks2::segment::AuthFault::Misfit(w) => Error::InvalidArgument(w),
                })?;
            }
        }
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
    /// LUKS2 mandatory requirement and [`Error::Unsupported`] on
    /// multi-segment (reencryption) headers and on authenticated volumes
    /// (check [`Luks::is_authenticated`] first and use
    /// [`Luks::authenticated_segment`] for those).
    pub fn segment(&self) -> Result<Segment, Error> {
        match &self.inner {
            Inner::V1(l) => l.segment(),
            Inner::V2(l) => l.segment(),
        }
    }

    /// Whether this is a LUKS2 volume with authenticated encryption (its
    /// segment has an `integrity` object); no checks beyond that.
    pub fn is_authenticated(&self) -> bool {
        match &self.inner {
            Inner::V1(_) => false,
            Inner::V2(l) => l.is_authenticated(),
        }
    }

    /// The data segment of an authenticated volume (dm-crypt over
    /// dm-integrity), with its algorithms and key sizes checked. Fails with
    /// [`Error::InvalidArgument`] for a volume that is not authenticated,
    /// [`Error::Unsupported`] for an unknown tag algorithm or a journal
    /// encryption or MAC other than `none`, [`Error::BadHeader`] for key
    /// sizes that do not fit, and like [`Luks::segment`] on requirements and
    /// multiple segments.
    pub fn authenticated_segment(&self) -> Result<AuthSegment, Error> {
        match &self.inner {
            Inner::V1(_) => Err(Error::InvalidArgument(
                "a LUKS1 volume is never authenticated".into(),
            )),
            Inner::V2(l) => l.auth_segment(),
        }
    }

    /// Bytes of header and keyslot areas on the device, which a header
    /// backup holds (cryptsetup pads its backup file with zeros to a multiple
    /// of 4096). Never more than the device `load` read it from.
    pub fn header_len(&self) -> u64 {
        match &self.inner {
            Inner::V1(l) => l.header_len(),
            Inner::V2(l) => l.header_len(),
        }
    }

    /// Refuses (with [`Error::BadHeader`]) a header whose data would start
    /// inside its own header or keyslot areas, for a volume whose header is
    /// on the data device itself (no `--header`). A data offset of 0 is what
    /// a detached header holds; on the same device, the first write to the
    /// data would destroy the header. Call it before serving the data of a
    /// volume with an attached header (cryptsetup's `open` refuses the same).
    pub fn check_attached(&self) -> Result<(), Error> {
        match &self.inner {
            Inner::V1(l) => l.check_attached(),
            Inner::V2(l) => l.check_attached(),
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
