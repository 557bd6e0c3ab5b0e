//! Opening, storing and wiping LUKS1 keyslots (spec §2.5–2.7; cryptsetup
//! `LUKS_open_key`, `LUKS_set_key`, `LUKS_del_key`).

use cryptkeep_crypto::{kdf, Backend, CipherSpec, HashAlg, Pbkdf, SecretBytes};

use super::header::{Phdr, KEY_DISABLED, KEY_ENABLED, SALT_LEN};
use crate::area;
use crate::error::Error;
use crate::io::BlockIo;
use crate::util::random_bytes;

/// The header's hash, parsed.
pub(crate) fn hash(h: &Phdr) -> Result<HashAlg, Error> {
    h.hash_alg()
}

/// The volume cipher, which also encrypts key material in LUKS1.
pub(crate) fn cipher(h: &Phdr) -> Result<CipherSpec, Error> {
    CipherSpec::parse_luks1(&h.cipher_name, &h.cipher_mode).map_err(|e| {
        Error::Unsupported(format!(
            "LUKS1 cipher '{}-{}': {e}",
            h.cipher_name, h.cipher_mode
        ))
    })
}

/// Try to open keyslot `slot` with `passphrase`; `Ok(None)` if the passphrase
/// does not fit this slot.
pub(crate) fn open(
    h: &Phdr,
    io: &dyn BlockIo,
    slot: usize,
    passphrase: &[u8],
    backend: Backend,
) -> Result<Option<SecretBytes>, Error> {
    let ks = &h.keyslots[slot];
    let hash = hash(h)?;
    let spec = usable_cipher(h)?;
    let key_bytes = h.key_bytes as usize;
    let kdf = Pbkdf::Pbkdf2 {
        hash,
        iterations: ks.iterations,
    };
    let slot_key = kdf::derive(&kdf, passphrase, &ks.salt, key_bytes)?;
    let vk = area::open_material(
        io,
        u64::from(ks.key_material_offset) * 512,
        &spec,
        slot_key.as_slice(),
        key_bytes,
        hash,
        backend,
        &format!("LUKS1 keyslot {slot} key material"),
    )?;
    if super::digest::verify(h, vk.as_slice())? {
        Ok(Some(vk))
    } else {
        Ok(None)
    }
}

/// The volume cipher, checked against key-bytes: a header whose cipher
/// cannot take its own key size is corrupt (cryptsetup could not open it
/// either), whatever the passphrase.
pub(crate) fn usable_cipher(h: &Phdr) -> Result<CipherSpec, Error> {
    let spec = cipher(h)?;
    match crate::util::key_misfit(&spec, h.key_bytes as usize) {
        None => Ok(spec),
        Some(why) => Err(crate::error::bad(format!(
            "key-bytes (offset 108) is {} but the cipher {}-{} cannot use it: {why}",
            h.key_bytes, h.cipher_name, h.cipher_mode
        ))),
    }
}

/// Derive the key of free slot `slot` from `passphrase`, seal `volume_key`
/// for it in memory and mark the slot active in `h`. Returns the material
/// and its byte offset; nothing is written (the caller writes the material,
/// then the header, once both are known to be valid).
pub(crate) fn prepare(
    h: &mut Phdr,
    slot: usize,
    volume_key: &[u8],
    passphrase: &[u8],
    kdf: &Pbkdf,
    backend: Backend,
) -> Result<(u64, SecretBytes), Error> {
    let hash = hash(h)?;
    let iterations = match kdf {
        Pbkdf::Pbkdf2 {
            hash: kh,
            iterations,
        } => {
            if *kh != hash {
                return Err(Error::InvalidArgument(format!(
                    "LUKS1 keyslots use the header hash {}, not {}",
                    hash.name(),
                    kh.name()
                )));
            }
            *iterations
        }
        _ => {
            return Err(Error::Unsupported(
                "LUKS1 keyslots can only use PBKDF2 (use LUKS2 for Argon2)".into(),
            ))
        }
    };
    if iterations == 0 {
        return Err(Error::InvalidArgument(
            "PBKDF2 iterations must be at least 1".into(),
        ));
    }
    let spec = usable_cipher(h)?;
    let salt = random_bytes(SALT_LEN)?;
    let derive = Pbkdf::Pbkdf2 { hash, iterations };
    let slot_key = kdf::derive(&derive, passphrase, &salt, volume_key.len())?;
    let material = area::seal_material(&spec, slot_key.as_slice(), volume_key, hash, backend)?;
    let ks = &mut h.keyslots[slot];
    ks.salt.copy_from_slice(&salt);
    ks.iterations = iterations;
    ks.active = KEY_ENABLED;
    Ok((u64::from(ks.key_material_offset) * 512, material))
}

/// Clear slot `slot`'s descriptor (disabled, salt and iterations zeroed, as
/// cryptsetup `LUKS_del_key`) and return the byte range of its material,
/// which the caller wipes once the new header is known to be valid.
pub(crate) fn disable(h: &mut Phdr, slot: usize) -> (u64, u64) {
    let len = area::material_len(h.key_bytes as usize, area::AF_STRIPES);
    let ks = &mut h.keyslots[slot];
    ks.active = KEY_DISABLED;
    ks.salt = [0; SALT_LEN];
    ks.iterations = 0;
    (u64::from(ks.key_material_offset) * 512, len)
}
