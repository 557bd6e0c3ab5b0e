//! The keys gocryptfs derives from the master key (`cryptocore.New`): with
//! the HKDF flag, HKDF-SHA256 per purpose; without it, the master key
//! itself (GCM, EME) or SHA-512 of it (AES-SIV).

use crate::config::{Config, ContentAlg};
use crate::error::Result;
use crate::flags::FeatureFlag;
use crate::kdf::{
    hkdf_derive, HKDF_INFO_EME_NAMES, HKDF_INFO_GCM_CONTENT, HKDF_INFO_SIV_CONTENT,
    HKDF_INFO_XCHACHA_CONTENT,
};
use crate::keys::MasterKey;
use cryptkeep_crypto::SecretBytes;
use sha2::{Digest, Sha512};

/// The content key for the config's AEAD.
pub(crate) fn content_key(mk: &MasterKey, cfg: &Config) -> Result<SecretBytes> {
    let hkdf = cfg.has(FeatureFlag::HKDF);
    Ok(match (cfg.content_alg(), hkdf) {
        (ContentAlg::AesGcm, true) => hkdf_derive(mk.as_bytes(), HKDF_INFO_GCM_CONTENT, 32)?,
        (ContentAlg::AesGcm, false) => mk.secret().clone(),
        (ContentAlg::AesSiv, true) => hkdf_derive(mk.as_bytes(), HKDF_INFO_SIV_CONTENT, 64)?,
        (ContentAlg::AesSiv, false) => {
            SecretBytes::from_vec(Sha512::digest(mk.as_bytes()).to_vec())
        }
        (ContentAlg::XChaCha20Poly1305, _) => {
            hkdf_derive(mk.as_bytes(), HKDF_INFO_XCHACHA_CONTENT, 32)?
        }
    })
}

/// The EME name key.
pub(crate) fn name_key(mk: &MasterKey, cfg: &Config) -> Result<SecretBytes> {
    if cfg.has(FeatureFlag::HKDF) {
        hkdf_derive(mk.as_bytes(), HKDF_INFO_EME_NAMES, 32)
    } else {
        Ok(mk.secret().clone())
    }
}
