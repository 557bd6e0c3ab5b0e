//! The volume keep: holds one volume key and answers sector encryption and
//! decryption with it ([`crate::proto::VOLUME_OPS`]), or, for an
//! authenticated volume, sector sealing and opening
//! ([`crate::proto::AUTH_VOLUME_OPS`], see [`super::auth_volume`]), nothing
//! else.

use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec, SecretBytes};
use cryptkeep_volume::{InlineCrypt, SectorCrypt};

use super::auth_volume::{self, AuthVolumeHandler, AuthVolumeKey};
use super::{Facts, Prepared, ServerConfig};
use crate::keep::Failure;
use crate::proto::*;
use crate::shm::Handler;

/// What the host's unlock step hands the volume keep: the volume key (in a
/// zeroizing buffer; the keep copies it into a `memfd_secret` page and
/// wipes this one) and how the volume uses it.
pub struct VolumeKey {
    /// The volume key.
    pub key: SecretBytes,
    /// The sector cipher (`aes-xts-plain64`, ...).
    pub cipher: CipherSpec,
    /// Bytes per sector (512 or 4096).
    pub sector_size: usize,
    /// Added to every sector number before it becomes the IV (LUKS2's
    /// `iv_tweak`; 0 for LUKS1).
    pub iv_tweak: u64,
    /// Which implementation of the cipher to use.
    pub backend: Backend,
    /// The volume, for messages (a cipher that cannot be set up is
    /// reported there).
    pub place: String,
    /// Facts for READY and the log (`keyslot`, `unlocked`, ...).
    pub facts: Facts,
}

impl VolumeKey {
    /// A random key of `bits` for `cipher` (benchmarks and tests: a keep
    /// that encrypts like a volume without one).
    pub fn random(
        cipher: CipherSpec,
        bits: usize,
        sector_size: usize,
    ) -> Result<VolumeKey, Failure> {
        let mut key = SecretBytes::new(bits / 8);
        cryptkeep_crypto::rand::fill_random(key.as_mut_slice())
            .map_err(|e| super::keep_failure(e.to_string(), "check the system's RNG"))?;
        Ok(VolumeKey {
            key,
            cipher,
            sector_size,
            iv_tweak: 0,
            backend: Backend::Accelerated,
            place: "keep".to_string(),
            facts: vec![("unlocked", "a random key".to_string())],
        })
    }
}

/// What a volume keep's unlock step produced: the key of a plain volume
/// (sector cipher) or of an authenticated one (sector AEAD). The keep
/// serves [`VOLUME_OPS`] for the first, [`AUTH_VOLUME_OPS`] for the
/// second, and refuses the other kind's operations.
pub enum UnlockedVolume {
    /// A plain volume (`aes-xts-plain64`, ...).
    Plain(VolumeKey),
    /// An authenticated volume (LUKS2 `--integrity`).
    Authenticated(AuthVolumeKey),
}

impl From<VolumeKey> for UnlockedVolume {
    fn from(k: VolumeKey) -> UnlockedVolume {
        UnlockedVolume::Plain(k)
    }
}

impl From<AuthVolumeKey> for UnlockedVolume {
    fn from(k: AuthVolumeKey) -> UnlockedVolume {
        UnlockedVolume::Authenticated(k)
    }
}

/// Runs a volume keep: `unlock` (the host's: read the passphrase, open a
/// keyslot, check the digest) gives the volume key, a [`VolumeKey`] or an
/// [`AuthVolumeKey`] (or an [`UnlockedVolume`] holding either, when the
/// header decides); the keep then serves [`VOLUME_OPS`] or
/// [`AUTH_VOLUME_OPS`] until its peer closes the channel. Call it from the
/// main thread of the process the spawner started. Returns when the keep
/// has stopped and wiped its keys; `Err` carries the failure (already sent
/// to the spawner when it came before READY) and its exit code.
pub fn run_volume<K: Into<UnlockedVolume>>(
    mut cfg: ServerConfig,
    unlock: impl FnOnce() -> Result<K, Failure>,
) -> Result<(), Failure> {
    let (control, lc_hooked) = super::start(&mut cfg)?;
    let prepared = match prepare(|| unlock().map(Into::into)) {
        Ok(p) => p,
        Err(f) => return Err(super::tell(&control, f)),
    };
    // Reading the passphrase, the KDF, unwrapping and key setup left key
    // bytes in dead stack frames below this one and round keys in vector
    // registers: wipe every frame they used, down to the deepest.
    crate::wipe::wipe_stack();
    super::serve(cfg, control, lc_hooked, prepared)
}

/// Either kind of volume keep's handler.
enum AnyVolumeHandler {
    Plain(VolumeHandler),
    Authenticated(AuthVolumeHandler),
}

impl Handler for AnyVolumeHandler {
    fn handle(&self, op: u32, first: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        match self {
            AnyVolumeHandler::Plain(h) => h.handle(op, first, buf, in_len),
            AnyVolumeHandler::Authenticated(h) => h.handle(op, first, buf, in_len),
        }
    }
}

// Not inlined: its frames (and the unlock's) must lie below run_volume's,
// where wipe_stack wipes.
#[inline(never)]
fn prepare(
    unlock: impl FnOnce() -> Result<UnlockedVolume, Failure>,
) -> Result<Prepared<AnyVolumeHandler>, Failure> {
    match unlock()? {
        UnlockedVolume::Plain(vk) => prepare_plain(vk),
        UnlockedVolume::Authenticated(ak) => prepare_auth(ak),
    }
}

/// The authenticated volume's key into secret memory and its sector AEAD.
fn prepare_auth(ak: AuthVolumeKey) -> Result<Prepared<AnyVolumeHandler>, Failure> {
    super::activate_heap();
    let mut secret = super::new_secret(ak.key.len())?;
    secret.as_mut_slice().copy_from_slice(ak.key.as_slice());
    let AuthVolumeKey {
        key,
        spec,
        sector_size,
        place,
        facts: host_facts,
    } = ak;
    drop(key);
    let kind = super::secret_kind(&secret);
    let handler = auth_volume::build(&spec, secret.as_slice(), sector_size, &place)?;
    let mut facts = vec![
        ("keep", "volume".to_string()),
        (
            "integrity",
            format!("{} {}", spec.encryption(), spec.integrity()),
        ),
        ("secret_mem", kind.to_string()),
    ];
    facts.extend(host_facts);
    Ok(Prepared {
        handler: AnyVolumeHandler::Authenticated(handler),
        secret: Some(secret),
        facts,
    })
}

/// The plain volume's key into secret memory and its sector cipher.
fn prepare_plain(vk: VolumeKey) -> Result<Prepared<AnyVolumeHandler>, Failure> {
    super::activate_heap();
    let mut secret = super::new_secret(vk.key.len())?;
    secret.as_mut_slice().copy_from_slice(vk.key.as_slice());
    let VolumeKey {
        key,
        cipher,
        sector_size,
        iv_tweak,
        backend,
        place,
        facts: host_facts,
    } = vk;
    drop(key);
    let kind = super::secret_kind(&secret);
    let c = new_sector_cipher(&cipher, secret.as_slice(), backend).map_err(|e| {
        use cryptkeep_crypto::Error as E;
        let usage = matches!(e, E::UnsupportedCipher(_) | E::InvalidKeySize { .. });
        Failure {
            code: if usage {
                super::EXIT_USAGE
            } else {
                super::EXIT_KEEP
            },
            what: e.to_string(),
            place,
            hint: "use a supported cipher and key size: aes-xts-plain64 (256, 512), \
                   aes-xts-plain, aes-cbc-essiv:sha256, aes-cbc-plain64 (128, 192, 256)"
                .into(),
        }
    })?;
    let handler = AnyVolumeHandler::Plain(VolumeHandler::new(InlineCrypt::new(
        c,
        sector_size,
        iv_tweak,
    )));
    let mut facts = vec![
        ("keep", "volume".to_string()),
        ("secret_mem", kind.to_string()),
    ];
    facts.extend(host_facts);
    Ok(Prepared {
        handler,
        secret: Some(secret),
        facts,
    })
}

/// The volume keep's request handler: [`VOLUME_OPS`] with the volume's
/// sector cipher. Every input comes from a possibly compromised I/O
/// process: lengths are checked, a failure is a status for that request
/// only, nothing panics.
pub struct VolumeHandler {
    sectors: InlineCrypt,
}

impl VolumeHandler {
    /// A handler serving `sectors`.
    pub fn new(sectors: InlineCrypt) -> VolumeHandler {
        VolumeHandler { sectors }
    }
}

impl Handler for VolumeHandler {
    fn handle(&self, op: u32, first: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        let encrypt = match op {
            OP_ENCRYPT_SECTORS => true,
            OP_DECRYPT_SECTORS => false,
            OP_NULL => return Ok(0),
            _ => return Err(STATUS_UNSUPPORTED),
        };
        let s = &self.sectors;
        if in_len > buf.len() || !in_len.is_multiple_of(s.sector_size()) {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        let data = &mut buf[..in_len];
        let r = if encrypt {
            s.encrypt(first, data)
        } else {
            s.decrypt(first, data)
        };
        r.map(|_| in_len).map_err(|_| STATUS_FAILED)
    }
}
