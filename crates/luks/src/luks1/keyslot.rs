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
    HashAlg::parse(&h.hash_spec).map_err(Error::Crypto)
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
    let spec = cipher(h)?;
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

/// Write `volume_key` into free slot `slot` protected by `passphrase` and mark
/// it active in `h` (the caller writes the header afterwards).
pub(crate) fn store(
    h: &mut Phdr,
    io: &dyn BlockIo,
    slot: usize,
    volume_key: &[u8],
    passphrase: &[u8],
    kdf: &Pbkdf,
    backend: Backend,
) -> Result<(), Error> {
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
    let spec = cipher(h)?;
    let salt = random_bytes(SALT_LEN)?;
    let derive = Pbkdf::Pbkdf2 { hash, iterations };
    let slot_key = kdf::derive(&derive, passphrase, &salt, volume_key.len())?;
    let ks = &mut h.keyslots[slot];
    area::store_material(
        io,
        u64::from(ks.key_material_offset) * 512,
        &spec,
        slot_key.as_slice(),
        volume_key,
        hash,
        backend,
        &format!("LUKS1 keyslot {slot} key material"),
    )?;
    ks.salt.copy_from_slice(&salt);
    ks.iterations = iterations;
    ks.active = KEY_ENABLED;
    Ok(())
}

/// Wipe slot `slot`'s key material (random data) and clear its descriptor
/// (disabled, salt and iterations zeroed, as cryptsetup `LUKS_del_key`).
pub(crate) fn wipe(h: &mut Phdr, io: &dyn BlockIo, slot: usize) -> Result<(), Error> {
    let ks = &mut h.keyslots[slot];
    let len = area::material_len(h.key_bytes as usize, area::AF_STRIPES);
    area::wipe_random(
        io,
        u64::from(ks.key_material_offset) * 512,
        len,
        &format!("LUKS1 keyslot {slot} key material"),
    )?;
    ks.active = KEY_DISABLED;
    ks.salt = [0; SALT_LEN];
    ks.iterations = 0;
    Ok(())
}
