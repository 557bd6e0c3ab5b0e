//! LUKS1 (on-disk format specification v1.2.3): one 592-byte header at
//! offset 0, eight PBKDF2 keyslots, a 20-byte master-key digest, 512-byte
//! data sectors. See docs/format/luks1.md for our byte-level account.

pub mod dump;
pub mod header;
pub mod keyslot;
pub mod layout;

mod digest;

use cryptkeep_crypto::{Backend, CipherSpec, HashAlg, Pbkdf, SecretBytes};

use crate::area;
use crate::error::Error;
use crate::io::{self, BlockIo};
use crate::util::{check_uuid, random_bytes, uuid_v4};
use crate::{FormatOptions, KeyslotInfo, Segment};
use header::{Keyslot, Phdr, KEY_DISABLED, NUM_KEYSLOTS, PHDR_LEN, SALT_LEN};

/// A loaded LUKS1 header.
#[derive(Clone, Debug)]
pub struct Luks1 {
    /// The decoded header.
    pub phdr: Phdr,
}

impl Luks1 {
    /// Read and validate the header at offset 0.
    pub fn load(io: &dyn BlockIo) -> Result<Luks1, Error> {
        let b = io::read_vec(io, 0, PHDR_LEN, "LUKS1 header")?;
        let phdr = Phdr::parse(&b)?;
        let dev = io.size().map_err(|source| Error::Io {
            what: "getting the size of the LUKS1 device".into(),
            source,
        })?;
        let need = phdr.keyslots_end();
        if dev < need {
            return Err(crate::error::bad(format!(
                "device is {dev} bytes but the LUKS1 keyslots end at {need} bytes (truncated image?)"
            )));
        }
        Ok(Luks1 { phdr })
    }

    /// Write the header (592 bytes at offset 0) and sync. Validates and
    /// encodes first; on an error nothing is written.
    pub fn write(&self, io: &dyn BlockIo) -> Result<(), Error> {
        let b = self.encode()?;
        write_encoded(io, &b)
    }

    /// The validated 592-byte on-disk form, not yet written.
    fn encode(&self) -> Result<[u8; PHDR_LEN], Error> {
        self.phdr.validate()?;
        self.phdr.to_bytes()
    }

    /// Format a LUKS1 header with keyslot 0 (cryptsetup `luksFormat --type luks1`).
    pub fn format(
        io: &dyn BlockIo,
        opts: &FormatOptions,
        volume_key: &[u8],
        passphrase: &[u8],
        slot_kdf: &Pbkdf,
        backend: Backend,
    ) -> Result<Luks1, Error> {
        if opts.sector_size != 512 {
            return Err(Error::InvalidArgument(format!(
                "LUKS1 supports only 512-byte sectors, not {}",
                opts.sector_size
            )));
        }
        if opts.luks2_metadata_size.is_some() || opts.luks2_keyslots_size.is_some() {
            return Err(Error::InvalidArgument(
                "LUKS1 has no metadata or keyslots area size options (use LUKS2)".into(),
            ));
        }
        if opts.label.is_some() || opts.subsystem.is_some() {
            return Err(Error::InvalidArgument(
                "LUKS1 has no label or subsystem field (use LUKS2)".into(),
            ));
        }
        let layout = layout::compute(volume_key.len(), opts.data_offset, opts.detached_header)?;
        let uuid = match &opts.uuid {
            Some(u) => {
                check_uuid(u)?;
                u.to_ascii_lowercase()
            }
            None => uuid_v4()?,
        };
        let hash = opts.hash;
        let mut mk_digest_salt = [0u8; SALT_LEN];
        mk_digest_salt.copy_from_slice(&random_bytes(SALT_LEN)?);
        let mk_digest_iter = crate::default_digest_iterations(opts, hash, volume_key.len())?;
        let keyslots = std::array::from_fn(|i| Keyslot {
            active: KEY_DISABLED,
            iterations: 0,
            salt: [0; SALT_LEN],
            key_material_offset: layout.keyslot_offsets[i],
            stripes: area::AF_STRIPES,
        });
        let mut phdr = Phdr {
            cipher_name: opts.cipher.luks1_cipher_name(),
            cipher_mode: opts.cipher.luks1_cipher_mode(),
            hash_spec: hash.name().to_string(),
            payload_offset: layout.payload_offset,
            key_bytes: u32::try_from(volume_key.len())
                .map_err(|_| Error::InvalidArgument("volume key too long".into()))?,
            mk_digest: [0; header::DIGEST_LEN],
            mk_digest_salt,
            mk_digest_iter,
            uuid,
            keyslots,
        };
        phdr.validate()
            .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        phdr.mk_digest = digest::compute(&phdr, volume_key)?;
        // Everything is computed and checked before the first write.
        let (mat_off, material) =
            keyslot::prepare(&mut phdr, 0, volume_key, passphrase, slot_kdf, backend)?;
        let l = Luks1 { phdr };
        let encoded = l.encode()?;

        // Like cryptsetup LUKS_wipe_header_areas: zero the header up to the
        // payload (at least 4 KiB), then random data over every keyslot area.
        let zero_len = match u64::from(l.phdr.payload_offset) * 512 {
            0 => 4096,
            n => n,
        };
        area::wipe_zero(io, 0, zero_len, "LUKS1 header area")?;
        let mat = area::material_len(volume_key.len(), area::AF_STRIPES);
        for (i, ks) in l.phdr.keyslots.iter().enumerate() {
            area::wipe_random(
                io,
                u64::from(ks.key_material_offset) * 512,
                mat,
                &format!("LUKS1 keyslot {i} area"),
            )?;
        }
        area::write_material(io, mat_off, &material, "LUKS1 keyslot 0 key material")?;
        write_encoded(io, &encoded)?;
        Ok(l)
    }

    /// The data segment: the whole device from the payload offset.
    pub fn segment(&self) -> Result<Segment, Error> {
        let cipher = keyslot::usable_cipher(&self.phdr)?;
        Ok(Segment {
            offset: self.data_offset(),
            size: None,
            iv_tweak: 0,
            cipher,
            key_bytes: self.phdr.key_bytes as usize,
            sector_size: 512,
        })
    }

    /// Payload offset in bytes.
    pub fn data_offset(&self) -> u64 {
        u64::from(self.phdr.payload_offset) * 512
    }

    /// Bytes of header and keyslot material on the device: up to the end of
    /// the last keyslot's material (cryptsetup `LUKS_device_sectors`), which
    /// is what a header backup holds. `load` checked it against the device
    /// size, so it never exceeds the device.
    pub fn header_len(&self) -> u64 {
        self.phdr.keyslots_end()
    }

    /// Refuses a header whose payload would overlap the header and keyslots
    /// when both share one device: payload offset 0 (a detached header's
    /// value) or one inside the keyslot material. cryptsetup refuses to open
    /// such a volume ("Reduced data offset is allowed only for detached
    /// LUKS header"): its first write would destroy the header.
    pub fn check_attached(&self) -> Result<(), Error> {
        let data = self.data_offset();
        let end = self.header_len();
        if data >= end {
            return Ok(());
        }
        Err(crate::error::bad(format!(
            "payload-offset (offset 104) is sector {}, inside the LUKS1 header and keyslots \
             (bytes 0..{end}) on the same device; such a header is valid only detached \
             (pass the volume's data device and this file with --header)",
            self.phdr.payload_offset
        )))
    }

    /// State of the eight keyslots.
    pub fn keyslots(&self) -> Vec<KeyslotInfo> {
        let hash = HashAlg::parse(&self.phdr.hash_spec).ok();
        self.phdr
            .keyslots
            .iter()
            .enumerate()
            .map(|(slot, k)| KeyslotInfo {
                slot,
                active: k.is_active(),
                kdf: match (k.is_active(), hash) {
                    (true, Some(hash)) => Some(Pbkdf::Pbkdf2 {
                        hash,
                        iterations: k.iterations,
                    }),
                    _ => None,
                },
                priority: None,
            })
            .collect()
    }

    /// Try the active slots in order (or only `slot`).
    pub fn unlock(
        &self,
        io: &dyn BlockIo,
        passphrase: &[u8],
        slot: Option<usize>,
        backend: Backend,
    ) -> Result<(usize, SecretBytes), Error> {
        let slots: Vec<usize> = match slot {
            Some(s) => {
                let ks = self
                    .phdr
                    .keyslots
                    .get(s)
                    .ok_or(Error::KeyslotOutOfRange(s))?;
                if !ks.is_active() {
                    return Err(Error::KeyslotInactive(s));
                }
                vec![s]
            }
            None => (0..NUM_KEYSLOTS)
                .filter(|&i| self.phdr.keyslots[i].is_active())
                .collect(),
        };
        for s in slots {
            if let Some(vk) = keyslot::open(&self.phdr, io, s, passphrase, backend)? {
                return Ok((s, vk));
            }
        }
        Err(Error::WrongPassphrase)
    }

    /// Whether `key` is this volume's key.
    pub fn verify_volume_key(&self, key: &[u8]) -> Result<bool, Error> {
        digest::verify(&self.phdr, key)
    }

    /// Add a keyslot (first free one unless `slot` is given) and write the header.
    pub fn add_keyslot(
        &mut self,
        io: &dyn BlockIo,
        volume_key: &[u8],
        passphrase: &[u8],
        slot: Option<usize>,
        kdf: &Pbkdf,
        backend: Backend,
    ) -> Result<usize, Error> {
        if !self.verify_volume_key(volume_key)? {
            return Err(Error::WrongVolumeKey);
        }
        let slot = match slot {
            Some(s) if s >= NUM_KEYSLOTS => return Err(Error::KeyslotOutOfRange(s)),
            Some(s) if self.phdr.keyslots[s].is_active() => return Err(Error::KeyslotActive(s)),
            Some(s) => s,
            None => (0..NUM_KEYSLOTS)
                .find(|&i| !self.phdr.keyslots[i].is_active())
                .ok_or(Error::NoFreeKeyslot)?,
        };
        let mut phdr = self.phdr.clone();
        let (off, material) =
            keyslot::prepare(&mut phdr, slot, volume_key, passphrase, kdf, backend)?;
        let next = Luks1 { phdr };
        let encoded = next.encode()?;
        area::write_material(
            io,
            off,
            &material,
            &format!("LUKS1 keyslot {slot} key material"),
        )?;
        write_encoded(io, &encoded)?;
        *self = next;
        Ok(slot)
    }

    /// Wipe a keyslot's material and disable it.
    pub fn remove_keyslot(&mut self, io: &dyn BlockIo, slot: usize) -> Result<(), Error> {
        let ks = self
            .phdr
            .keyslots
            .get(slot)
            .ok_or(Error::KeyslotOutOfRange(slot))?;
        if !ks.is_active() {
            return Err(Error::KeyslotInactive(slot));
        }
        let mut phdr = self.phdr.clone();
        let (off, len) = keyslot::disable(&mut phdr, slot);
        let next = Luks1 { phdr };
        let encoded = next.encode()?;
        area::wipe_random(io, off, len, &format!("LUKS1 keyslot {slot} key material"))?;
        write_encoded(io, &encoded)?;
        *self = next;
        Ok(())
    }

    /// The cipher spec string as dm-crypt writes it, e.g. "aes-xts-plain64".
    pub fn cipher_string(&self) -> String {
        format!("{}-{}", self.phdr.cipher_name, self.phdr.cipher_mode)
    }

    /// Parse the cipher, if supported.
    pub fn cipher(&self) -> Result<CipherSpec, Error> {
        keyslot::cipher(&self.phdr)
    }
}

/// Write an encoded header at offset 0 and sync.
fn write_encoded(io: &dyn BlockIo, b: &[u8; PHDR_LEN]) -> Result<(), Error> {
    io::write_all(io, b, 0, "LUKS1 header")?;
    io::sync(io, "LUKS1 header")
}
