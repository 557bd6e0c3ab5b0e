//! LUKS2 (on-disk format specification v1.1.x): two metadata copies, each a
//! 4096-byte binary header plus a JSON area, then the keyslots area, then
//! data. See docs/format/luks2.md for our byte-level account.

pub mod binary_header;
pub mod config;
pub mod digest;
pub mod disk;
pub mod dump;
pub mod format;
pub mod json;
pub mod keyslot;
pub mod recovery;
pub mod segment;
pub mod validate;

use cryptkeep_crypto::{Backend, HashAlg, Pbkdf, SecretBytes};

use crate::error::{bad, Error};
use crate::io::BlockIo;
use crate::KeyslotInfo;
use binary_header::{BinaryHeader, SALT_LEN};
use json::{Keyslot, Metadata};

/// Both metadata copies encoded for writing (see [`Luks2::encode`]).
pub(crate) struct Encoded {
    seqid: u64,
    area: Vec<u8>,
    copies: Vec<disk::EncodedCopy>,
}

/// The error of an unlock that opened no keyslot: the passphrase's fault
/// unless a keyslot could not be tried or looked damaged, which is the
/// header's (unsupported if every such keyslot only uses what we lack).
fn unopened(faults: Vec<Error>) -> Error {
    if faults.is_empty() {
        return Error::WrongPassphrase;
    }
    let unsupported = faults.iter().all(|e| matches!(e, Error::Unsupported(_)));
    let text = faults
        .iter()
        .map(|e| match e {
            Error::BadHeader { what } | Error::Unsupported(what) => what.clone(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join("; ");
    if unsupported {
        Error::Unsupported(format!(
            "no keyslot opened with this passphrase, and {text}"
        ))
    } else {
        bad(format!(
            "no keyslot opened with this passphrase, and the header looks damaged: {text}"
        ))
    }
}

fn copy_name(secondary: bool) -> &'static str {
    if secondary {
        "secondary LUKS2 header"
    } else {
        "primary LUKS2 header"
    }
}

/// A loaded LUKS2 header (the copy in force).
#[derive(Clone, Debug)]
pub struct Luks2 {
    /// Binary header + JSON area size of each copy.
    pub hdr_size: u64,
    /// Sequence id of the copy in force (bumped on every write).
    pub seqid: u64,
    /// Label.
    pub label: String,
    /// Subsystem.
    pub subsystem: String,
    /// UUID.
    pub uuid: String,
    /// Checksum algorithm ("sha256").
    pub csum_alg: String,
    /// Salt of the primary copy.
    pub salt1: [u8; SALT_LEN],
    /// Salt of the secondary copy.
    pub salt2: [u8; SALT_LEN],
    /// The JSON metadata.
    pub meta: Metadata,
}

impl Luks2 {
    /// Load and verify both copies; see [`recovery`]. Returns notices about
    /// damaged or stale copies.
    pub fn load(io: &dyn BlockIo) -> Result<(Luks2, Vec<String>), Error> {
        let chosen = recovery::load(io)?;
        let bin = &chosen.copy.bin;
        let fresh = || -> Result<[u8; SALT_LEN], Error> {
            let mut s = [0u8; SALT_LEN];
            s.copy_from_slice(&crate::util::random_bytes(SALT_LEN)?);
            Ok(s)
        };
        // cryptsetup regenerates the salt of a copy it has to repair.
        let other = match (chosen.notices.is_empty(), chosen.other_salt) {
            (true, Some(s)) => s,
            _ => fresh()?,
        };
        let (salt1, salt2) = if bin.secondary {
            (other, bin.salt)
        } else {
            (bin.salt, other)
        };
        let l = Luks2 {
            hdr_size: bin.hdr_size,
            seqid: bin.seqid,
            label: bin.label.clone(),
            subsystem: bin.subsystem.clone(),
            uuid: bin.uuid.clone(),
            csum_alg: bin.csum_alg.clone(),
            salt1,
            salt2,
            meta: chosen.copy.meta,
        };
        let dev = io.size().map_err(|source| Error::Io {
            what: "getting the size of the LUKS2 device".into(),
            source,
        })?;
        if dev < l.areas_end() {
            return Err(bad(format!(
                "device is {dev} bytes but the LUKS2 metadata and keyslots area end at {} bytes (truncated image?)",
                l.areas_end()
            )));
        }
        Ok((l, chosen.notices))
    }

    /// End of the keyslots area: 2 × hdr_size + keyslots_size.
    pub fn areas_end(&self) -> u64 {
        2 * self.hdr_size + self.meta.config.keyslots_size.0
    }

    /// Write both copies with seqid + 1: primary first, then secondary (the
    /// order cryptsetup `LUKS2_disk_hdr_write` uses). Validates and encodes
    /// first; on an error nothing is written.
    pub fn write(&mut self, io: &dyn BlockIo) -> Result<(), Error> {
        let e = self.encode()?;
        self.write_encoded(io, &e)
    }

    /// Both copies as they will be written, after every check: the
    /// requirements, the metadata against the binary header, the JSON size
    /// and every binary-header field. Nothing is written.
    pub(crate) fn encode(&self) -> Result<Encoded, Error> {
        // A header with requirements we do not implement is read-only here.
        config::check_requirements(&self.meta)?;
        validate::validate(&self.meta, self.hdr_size)?;
        let area = disk::json_area(&self.meta, self.hdr_size - binary_header::BIN_LEN as u64)?;
        let seqid = self
            .seqid
            .checked_add(1)
            .ok_or_else(|| bad("seqid overflow"))?;
        let mut copies = Vec::with_capacity(2);
        for secondary in [false, true] {
            let bin = BinaryHeader {
                secondary,
                hdr_size: self.hdr_size,
                seqid,
                label: self.label.clone(),
                csum_alg: self.csum_alg.clone(),
                salt: if secondary { self.salt2 } else { self.salt1 },
                uuid: self.uuid.clone(),
                subsystem: self.subsystem.clone(),
                hdr_offset: if secondary { self.hdr_size } else { 0 },
                csum: [0; 64],
            };
            copies.push(disk::encode_copy(&bin, &area, copy_name(secondary))?);
        }
        Ok(Encoded {
            seqid,
            area,
            copies,
        })
    }

    /// Write what [`Luks2::encode`] made and take its seqid.
    pub(crate) fn write_encoded(&mut self, io: &dyn BlockIo, e: &Encoded) -> Result<(), Error> {
        for (i, c) in e.copies.iter().enumerate() {
            disk::write_encoded_copy(io, c, &e.area, copy_name(i == 1))?;
        }
        self.seqid = e.seqid;
        Ok(())
    }

    /// Refuses a header whose data would overlap its metadata or keyslots
    /// area when both share one device: a segment at offset 0 (a detached
    /// header's value) or inside the areas. cryptsetup refuses to open such
    /// a volume ("Reduced data offset is allowed only for detached LUKS
    /// header"): its first write would destroy both header copies.
    pub fn check_attached(&self) -> Result<(), Error> {
        let end = self.areas_end();
        match self.meta.segments.iter().find(|(_, s)| s.offset.0 < end) {
            None => Ok(()),
            Some((id, s)) => Err(bad(format!(
                "segments.{id}.offset is {}, inside the LUKS2 metadata and keyslots area \
                 (bytes 0..{end}) on the same device; such a header is valid only detached \
                 (pass the volume's data device and this file with --header)",
                s.offset.0
            ))),
        }
    }

    /// The data segment; refused for an authenticated volume.
    pub fn segment(&self) -> Result<crate::Segment, Error> {
        segment::default_segment(&self.meta)
    }

    /// The authenticated data segment (dm-crypt over dm-integrity).
    pub fn auth_segment(&self) -> Result<crate::AuthSegment, Error> {
        segment::auth_segment(&self.meta)
    }

    /// Whether the data segment is authenticated (has an `integrity` object).
    pub fn is_authenticated(&self) -> bool {
        segment::is_authenticated(&self.meta)
    }

    /// Offset of segment 0 in bytes.
    pub fn data_offset(&self) -> u64 {
        self.meta
            .segments
            .values()
            .map(|s| s.offset.0)
            .min()
            .unwrap_or(0)
    }

    /// Keyslot states (slots 0..32 that exist).
    pub fn keyslots(&self) -> Vec<KeyslotInfo> {
        self.meta
            .keyslots
            .iter()
            .map(|(id, ks)| match ks {
                Keyslot::Luks2(k) => KeyslotInfo {
                    slot: *id as usize,
                    active: true,
                    kdf: keyslot::pbkdf_of(&k.kdf).ok(),
                    priority: Some(k.priority.unwrap_or(1) as u8),
                },
                Keyslot::Other(_) => KeyslotInfo {
                    slot: *id as usize,
                    active: true,
                    kdf: None,
                    priority: None,
                },
            })
            .collect()
    }

    /// The digest that verifies keys of keyslot `id`.
    fn digest_for_keyslot(&self, id: u32) -> Option<&json::Digest> {
        let sid = id.to_string();
        self.meta
            .digests
            .values()
            .find(|d| d.keyslots.contains(&sid))
    }

    /// The digest of segment 0 (the volume key).
    fn segment_digest(&self) -> Result<&json::Digest, Error> {
        let seg = self
            .meta
            .segments
            .keys()
            .next()
            .ok_or_else(|| bad("no data segment"))?
            .to_string();
        self.meta
            .digests
            .values()
            .find(|d| d.segments.contains(&seg))
            .ok_or_else(|| bad(format!("segment {seg} has no digest")))
    }

    /// Unlock: keyslots bound to the segment's digest, priority 2 first, then
    /// 1; priority 0 only when named.
    pub fn unlock(
        &self,
        io: &dyn BlockIo,
        passphrase: &[u8],
        slot: Option<usize>,
        backend: Backend,
    ) -> Result<(usize, SecretBytes), Error> {
        let digest = self.segment_digest()?;
        let order: Vec<u32> = match slot {
            Some(s) if s >= validate::OBJECTS_MAX => return Err(Error::KeyslotOutOfRange(s)),
            Some(s) => {
                let id = s as u32;
                match self.meta.keyslots.get(&id) {
                    None => return Err(Error::KeyslotInactive(s)),
                    Some(Keyslot::Other(m)) => {
                        return Err(Error::Unsupported(format!(
                            "keyslot {s} has type '{}', which cannot be opened with a passphrase",
                            m.get("type").and_then(|v| v.as_str()).unwrap_or("?")
                        )))
                    }
                    Some(Keyslot::Luks2(_)) => {}
                }
                if !digest.keyslots.contains(&id.to_string()) {
                    return Err(Error::Unsupported(format!(
                        "keyslot {s} is not bound to the data segment"
                    )));
                }
                vec![id]
            }
            None => {
                let mut v = Vec::new();
                for pr in [2u32, 1] {
                    for (id, ks) in &self.meta.keyslots {
                        if let Keyslot::Luks2(k) = ks {
                            if k.priority.unwrap_or(1) == pr
                                && digest.keyslots.contains(&id.to_string())
                            {
                                v.push(*id);
                            }
                        }
                    }
                }
                v
            }
        };
        // An authenticated segment's volume key also holds its integrity
        // key and its keyslots use the fallback cipher: neither key size
        // check applies.
        let seg_name = self
            .meta
            .segments
            .values()
            .next()
            .filter(|s| s.integrity.is_none())
            .and_then(|s| s.encryption.clone());
        let seg_cipher = seg_name
            .as_deref()
            .and_then(|n| cryptkeep_crypto::CipherSpec::parse(n).ok());
        // Keyslots that cannot be tried (a header fault, not the
        // passphrase's), and hints at why a tried one may have failed.
        let mut faults = Vec::new();
        for id in order {
            let Some(Keyslot::Luks2(k)) = self.meta.keyslots.get(&id) else {
                continue;
            };
            if let Err(e) = keyslot::check_usable(k, id, seg_cipher.as_ref()) {
                if slot.is_some() {
                    return Err(e);
                }
                faults.push(e);
                continue;
            }
            let vk = keyslot::open(k, id, io, passphrase, backend)?;
            if digest::verify(digest, vk.as_slice())? {
                return Ok((id as usize, vk));
            }
            faults.extend(
                keyslot::suspicious(k, id, seg_name.as_deref())
                    .into_iter()
                    .map(bad),
            );
        }
        Err(unopened(faults))
    }

    /// Whether `key` is the volume key of segment 0.
    pub fn verify_volume_key(&self, key: &[u8]) -> Result<bool, Error> {
        digest::verify(self.segment_digest()?, key)
    }

    /// Add a `luks2` keyslot bound to the segment's digest and write the header.
    pub fn add_keyslot(
        &mut self,
        io: &dyn BlockIo,
        volume_key: &[u8],
        passphrase: &[u8],
        slot: Option<usize>,
        kdf: &Pbkdf,
        backend: Backend,
    ) -> Result<usize, Error> {
        config::check_requirements(&self.meta)?;
        if !self.verify_volume_key(volume_key)? {
            return Err(Error::WrongVolumeKey);
        }
        let id = match slot {
            Some(s) if s >= validate::OBJECTS_MAX => return Err(Error::KeyslotOutOfRange(s)),
            Some(s) if self.meta.keyslots.contains_key(&(s as u32)) => {
                return Err(Error::KeyslotActive(s))
            }
            Some(s) => s as u32,
            None => keyslot::free_id(&self.meta)?,
        };
        let mut next = self.clone();
        let (off, material) = next.prepare_keyslot(id, volume_key, passphrase, kdf, backend)?;
        // The whole new header is checked and encoded before the first write.
        let encoded = next.encode()?;
        crate::area::write_material(io, off, &material, &format!("LUKS2 keyslot {id} area"))?;
        next.write_encoded(io, &encoded)?;
        *self = next;
        Ok(id as usize)
    }

    /// Allocate an area, seal the key material for keyslot `id` in memory
    /// and bind the keyslot in the metadata. Returns the material and its
    /// offset; nothing is written.
    pub(crate) fn prepare_keyslot(
        &mut self,
        id: u32,
        volume_key: &[u8],
        passphrase: &[u8],
        kdf: &Pbkdf,
        backend: Backend,
    ) -> Result<(u64, SecretBytes), Error> {
        let digest = self.segment_digest()?.clone();
        let af_hash = HashAlg::parse(&digest.hash)
            .map_err(|_| bad(format!("digest hash '{}' unsupported", digest.hash)))?;
        let (sid, seg) = self
            .meta
            .segments
            .iter()
            .next()
            .ok_or_else(|| bad("no data segment"))?;
        let seg_cipher = seg
            .encryption
            .clone()
            .ok_or_else(|| bad(format!("segments.{sid} has no encryption")))?;
        let authenticated = seg.integrity.is_some();
        if let Some(i) = &seg.integrity {
            segment::auth_key_split(
                &seg_cipher,
                &i.kind,
                i.key_size,
                volume_key.len(),
                &format!("segments.{sid}"),
            )
            .map_err(|f| match f {
                segment::AuthFault::Unsupported(w) => Error::Unsupported(w),
                segment::AuthFault::Misfit(w) => bad(w),
            })?;
        } else if let Ok(spec) = cryptkeep_crypto::CipherSpec::parse(&seg_cipher) {
            if let Some(why) = crate::util::key_misfit(&spec, volume_key.len()) {
                return Err(bad(format!(
                    "segments.{sid}.encryption cannot use this volume's {}-byte key: {why}",
                    volume_key.len()
                )));
            }
        }
        let area = keyslot::find_gap(&self.meta, self.hdr_size, volume_key.len())?;
        let new = keyslot::NewKeyslot {
            id,
            volume_key,
            passphrase,
            kdf,
            af_hash,
            segment_cipher: &seg_cipher,
            authenticated,
            area,
        };
        let (ks, material) = keyslot::prepare(&new, backend)?;
        self.meta.keyslots.insert(id, Keyslot::Luks2(Box::new(ks)));
        let sid = id.to_string();
        for d in self.meta.digests.values_mut() {
            if d.digest == digest.digest && !d.keyslots.contains(&sid) {
                d.keyslots.push(sid.clone());
                d.keyslots
                    .sort_by_key(|k| k.parse::<u32>().unwrap_or(u32::MAX));
            }
        }
        Ok((area.0, material))
    }

    /// Wipe keyslot `slot`'s area with random data, drop it (and its digest
    /// and token bindings) and write the header.
    pub fn remove_keyslot(&mut self, io: &dyn BlockIo, slot: usize) -> Result<(), Error> {
        if slot >= validate::OBJECTS_MAX {
            return Err(Error::KeyslotOutOfRange(slot));
        }
        config::check_requirements(&self.meta)?;
        let id = slot as u32;
        let ks = self
            .meta
            .keyslots
            .get(&id)
            .ok_or(Error::KeyslotInactive(slot))?;
        let area = ks.area();
        let mut next = self.clone();
        keyslot::unbind(&mut next.meta, id);
        // Checked and encoded before the area is wiped.
        let encoded = next.encode()?;
        if let Some((off, len)) = area {
            crate::area::wipe_random(io, off, len, &format!("LUKS2 keyslot {slot} area"))?;
        }
        next.write_encoded(io, &encoded)?;
        *self = next;
        Ok(())
    }

    /// Bytes of metadata and keyslots on the device: both copies plus the
    /// keyslots area (cryptsetup `LUKS2_hdr_and_areas_size`), which is what a
    /// header backup holds. At most 2 × 4 MiB + 128 MiB, and `load` checked
    /// it against the device size.
    pub fn header_len(&self) -> u64 {
        self.areas_end()
    }

    /// Keyslot `id`'s digest id, for dumps.
    pub fn keyslot_digest_id(&self, id: u32) -> Option<u32> {
        let d = self.digest_for_keyslot(id)?;
        self.meta
            .digests
            .iter()
            .find(|(_, v)| std::ptr::eq(*v, d))
            .map(|(k, _)| *k)
    }
}
