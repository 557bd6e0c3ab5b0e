//! LUKS2 `luks2` keyslots (spec §3.2; cryptsetup `luks2_keyslot_luks2.c`):
//! KDF → keyslot key; AF material encrypted with `area.encryption` in
//! 512-byte sectors, IV 0 at `area.offset`; area allocation; wiping.

use cryptkeep_crypto::spec::{ChainMode, IvMode};
use cryptkeep_crypto::{kdf, Backend, CipherSpec, HashAlg, Pbkdf, SecretBytes};

use super::json::{Af, Area, Kdf, Keyslot, Luks2Keyslot, Metadata, U64Str, B64};
use super::validate::{check_new_kdf, OBJECTS_MAX, SALT_LEN};
use crate::area::{self, AF_STRIPES};
use crate::error::{bad, Error};
use crate::io::BlockIo;
use crate::util::{random_bytes, round_up};

/// Keyslot cipher when the segment cipher cannot encrypt key material (no
/// IV, ECB, or an authenticated segment): cryptsetup
/// `DEFAULT_LUKS2_KEYSLOT_CIPHER`, 512-bit key.
pub const FALLBACK_CIPHER: &str = "aes-xts-plain64";
/// Key bytes of [`FALLBACK_CIPHER`].
pub const FALLBACK_KEY_BYTES: u32 = 64;

/// The [`Pbkdf`] a JSON kdf object describes.
pub fn pbkdf_of(k: &Kdf) -> Result<Pbkdf, Error> {
    Ok(match k {
        Kdf::Pbkdf2 {
            hash, iterations, ..
        } => Pbkdf::Pbkdf2 {
            hash: HashAlg::parse(hash)
                .map_err(|_| bad(format!("keyslot kdf hash '{hash}' unsupported")))?,
            iterations: *iterations,
        },
        Kdf::Argon2i {
            time, memory, cpus, ..
        } => Pbkdf::Argon2i {
            time: *time,
            memory_kib: *memory,
            parallel: *cpus,
        },
        Kdf::Argon2id {
            time, memory, cpus, ..
        } => Pbkdf::Argon2id {
            time: *time,
            memory_kib: *memory,
            parallel: *cpus,
        },
    })
}

fn kdf_json(p: &Pbkdf, salt: Vec<u8>) -> Result<Kdf, Error> {
    Ok(match p {
        Pbkdf::Pbkdf2 { hash, iterations } => Kdf::Pbkdf2 {
            hash: hash.name().into(),
            iterations: *iterations,
            salt: B64(salt),
        },
        Pbkdf::Argon2i {
            time,
            memory_kib,
            parallel,
        } => Kdf::Argon2i {
            time: *time,
            memory: *memory_kib,
            cpus: *parallel,
            salt: B64(salt),
        },
        Pbkdf::Argon2id {
            time,
            memory_kib,
            parallel,
        } => Kdf::Argon2id {
            time: *time,
            memory: *memory_kib,
            cpus: *parallel,
            salt: B64(salt),
        },
        #[allow(unreachable_patterns)]
        _ => return Err(Error::Unsupported("this KDF in a LUKS2 keyslot".into())),
    })
}

/// Try keyslot `k` with `passphrase`; returns the AF-merged candidate key
/// (not yet checked against the digest).
pub fn open(
    k: &Luks2Keyslot,
    id: u32,
    io: &dyn BlockIo,
    passphrase: &[u8],
    backend: Backend,
) -> Result<SecretBytes, Error> {
    check_usable(k, id, None)?;
    let p = pbkdf_of(&k.kdf)?;
    let slot_key = kdf::derive(&p, passphrase, k.kdf.salt(), k.area.key_size as usize)?;
    let spec = CipherSpec::parse(&k.area.encryption).map_err(|e| {
        Error::Unsupported(format!(
            "keyslot {id} area cipher '{}': {e}",
            k.area.encryption
        ))
    })?;
    let af_hash = HashAlg::parse(&k.af.hash)
        .map_err(|_| bad(format!("keyslots.{id}.af.hash '{}' unsupported", k.af.hash)))?;
    area::open_material(
        io,
        k.area.offset.0,
        &spec,
        slot_key.as_slice(),
        k.key_size as usize,
        af_hash,
        backend,
        &format!("LUKS2 keyslot {id} area"),
    )
}

/// Keyslot encryption for a segment cipher: the segment's own cipher and key
/// size, unless it has no IV, is ECB or the segment is authenticated (has
/// integrity tags, which keyslot areas cannot hold) (cryptsetup
/// `LUKS2_keyslot_cipher_incompatible`).
pub fn area_cipher(segment_cipher: &str, key_bytes: u32, authenticated: bool) -> (String, u32) {
    match CipherSpec::parse(segment_cipher) {
        Ok(s)
            if !authenticated
                && !matches!(s.mode, ChainMode::Ecb)
                && !matches!(s.iv, IvMode::Null) =>
        {
            (segment_cipher.to_string(), key_bytes)
        }
        _ => (FALLBACK_CIPHER.into(), FALLBACK_KEY_BYTES),
    }
}

/// First free keyslot id.
pub fn free_id(m: &Metadata) -> Result<u32, Error> {
    (0..OBJECTS_MAX as u32)
        .find(|i| !m.keyslots.contains_key(i))
        .ok_or(Error::NoFreeKeyslot)
}

/// First gap in the keyslots area big enough for a `key_bytes` key (cryptsetup
/// `LUKS2_find_area_gap`): returns `(offset, size)`.
pub fn find_gap(m: &Metadata, hdr_size: u64, key_bytes: usize) -> Result<(u64, u64), Error> {
    let len = round_up(key_bytes as u64 * u64::from(AF_STRIPES), 4096);
    let start = 2 * hdr_size;
    let end = start + m.config.keyslots_size.0;
    let mut used: Vec<(u64, u64)> = m.keyslots.values().filter_map(Keyslot::area).collect();
    used.sort();
    let mut off = start;
    for (a_off, a_len) in used {
        if off + len <= a_off {
            break;
        }
        off = off.max(a_off + a_len);
    }
    if off + len > end {
        return Err(Error::NoFreeKeyslot);
    }
    Ok((off, len))
}

/// Parameters for a new keyslot.
pub struct NewKeyslot<'a> {
    /// Keyslot id.
    pub id: u32,
    /// The volume key.
    pub volume_key: &'a [u8],
    /// The passphrase.
    pub passphrase: &'a [u8],
    /// KDF parameters.
    pub kdf: &'a Pbkdf,
    /// AF hash.
    pub af_hash: HashAlg,
    /// Segment cipher (the area cipher is derived from it).
    pub segment_cipher: &'a str,
    /// Whether the segment is authenticated (the area then uses [`FALLBACK_CIPHER`]).
    pub authenticated: bool,
    /// Area `(offset, size)`.
    pub area: (u64, u64),
}

/// Derive the keyslot key, split and encrypt the volume key in memory;
/// returns the JSON object and the sealed material. Nothing is written.
pub fn prepare(n: &NewKeyslot<'_>, backend: Backend) -> Result<(Luks2Keyslot, SecretBytes), Error> {
    let key_bytes = u32::try_from(n.volume_key.len())
        .map_err(|_| Error::InvalidArgument("volume key too long".into()))?;
    let (encryption, area_key) = area_cipher(n.segment_cipher, key_bytes, n.authenticated);
    let spec = CipherSpec::parse(&encryption)
        .map_err(|e| Error::Unsupported(format!("keyslot cipher '{encryption}': {e}")))?;
    check_new_kdf(n.kdf)?;
    let salt = random_bytes(SALT_LEN)?;
    let slot_key = kdf::derive(n.kdf, n.passphrase, &salt, area_key as usize)?;
    let material =
        area::seal_material(&spec, slot_key.as_slice(), n.volume_key, n.af_hash, backend)?;
    let ks = Luks2Keyslot {
        kind: "luks2".into(),
        key_size: key_bytes,
        af: Af {
            kind: "luks1".into(),
            stripes: AF_STRIPES,
            hash: n.af_hash.name().into(),
            extra: Default::default(),
        },
        area: Area {
            kind: "raw".into(),
            offset: U64Str(n.area.0),
            size: U64Str(n.area.1),
            encryption,
            key_size: area_key,
            extra: Default::default(),
        },
        kdf: kdf_json(n.kdf, salt)?,
        priority: None,
        extra: Default::default(),
    };
    Ok((ks, material))
}

/// Checks that keyslot `k` can be tried at all: its area cipher is one we
/// implement and can take `area.key_size`, its hashes are known, and its
/// `key_size` fits the segment cipher. A failure is a fault of the header,
/// not of the passphrase.
pub fn check_usable(k: &Luks2Keyslot, id: u32, segment: Option<&CipherSpec>) -> Result<(), Error> {
    let spec = CipherSpec::parse(&k.area.encryption).map_err(|e| {
        Error::Unsupported(format!(
            "keyslot {id} area cipher '{}': {e}",
            k.area.encryption
        ))
    })?;
    let n = k.area.key_size as usize;
    if let Some(why) = crate::util::key_misfit(&spec, n) {
        return Err(bad(format!(
            "keyslots.{id}.area.key_size {n} does not fit keyslots.{id}.area.encryption: {why}"
        )));
    }
    HashAlg::parse(&k.af.hash)
        .map_err(|_| bad(format!("keyslots.{id}.af.hash '{}' unsupported", k.af.hash)))?;
    pbkdf_of(&k.kdf)?;
    if let Some(seg) = segment {
        if let Some(why) = crate::util::key_misfit(seg, k.key_size as usize) {
            return Err(bad(format!(
                "keyslots.{id}.key_size {} does not fit the data segment's cipher: {why}",
                k.key_size
            )));
        }
    }
    Ok(())
}

/// Why keyslot `k` may have failed to open for a reason other than the
/// passphrase, if its fields disagree the way no cryptsetup-made keyslot
/// does. Asked only after a keyslot failed, so a header with odd but
/// working keyslots still opens; the answer turns "wrong passphrase" into
/// "damaged header".
/// - cryptsetup (and cryptkeep) size a keyslot's area for its key,
///   `round_up(key_size × 4000, 4096)` bytes (a LUKS1 conversion keeps the
///   unrounded size): an area sized for another key means `key_size` changed.
/// - With the data segment's own cipher (`segment`), the keyslot key is the
///   volume key's size unless `--keyslot-key-size` was given.
pub fn suspicious(k: &Luks2Keyslot, id: u32, segment: Option<&str>) -> Vec<String> {
    let mut why = Vec::new();
    let min = area::material_len(k.key_size as usize, AF_STRIPES);
    let max = round_up(min, 4096);
    let size = k.area.size.0;
    if !(min..=max).contains(&size) {
        why.push(format!(
            "keyslots.{id}.key_size {} does not match keyslots.{id}.area.size {size} \
             (a {}-byte key takes {min} to {max} bytes)",
            k.key_size, k.key_size
        ));
    }
    if segment == Some(k.area.encryption.as_str()) && k.area.key_size != k.key_size {
        why.push(format!(
            "keyslots.{id}.area.key_size {} differs from keyslots.{id}.key_size {} \
             although the keyslot uses the data cipher {}",
            k.area.key_size, k.key_size, k.area.encryption
        ));
    }
    why
}

/// Remove keyslot `id` from the metadata and every digest and token that names it.
pub fn unbind(m: &mut Metadata, id: u32) {
    m.keyslots.remove(&id);
    let sid = id.to_string();
    for d in m.digests.values_mut() {
        d.keyslots.retain(|k| *k != sid);
    }
    for t in m.tokens.values_mut() {
        if let Some(arr) = t.get_mut("keyslots").and_then(|v| v.as_array_mut()) {
            arr.retain(|k| k.as_str() != Some(sid.as_str()));
        }
    }
}
