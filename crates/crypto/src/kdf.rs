//! Password-based key derivation as LUKS uses it: PBKDF2 (RFC 8018 §5.2) with
//! HMAC-SHA1/SHA256/SHA512, and Argon2i/Argon2id (RFC 9106, version 0x13, no
//! secret, no associated data), plus cryptsetup-style calibration.

mod calibrate;

pub use calibrate::{calibrate, estimate, pbkdf2_iterations_per_second};

use crate::{Error, HashAlg, SecretBytes};
use argon2::{Algorithm, Argon2, Block, Params, Version};
use std::fmt;
use zeroize::Zeroize;

/// A KDF with its cost parameters, as stored in a LUKS keyslot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pbkdf {
    /// PBKDF2-HMAC (RFC 8018) with `iterations` rounds.
    Pbkdf2 {
        /// The HMAC hash.
        hash: HashAlg,
        /// Iteration count (LUKS calls it `iterations`).
        iterations: u32,
    },
    /// Argon2i (RFC 9106).
    Argon2i {
        /// Passes over memory (LUKS2 `time`).
        time: u32,
        /// Memory in KiB (LUKS2 `memory`).
        memory_kib: u32,
        /// Lanes (LUKS2 `cpus`).
        parallel: u32,
    },
    /// Argon2id (RFC 9106).
    Argon2id {
        /// Passes over memory (LUKS2 `time`).
        time: u32,
        /// Memory in KiB (LUKS2 `memory`).
        memory_kib: u32,
        /// Lanes (LUKS2 `cpus`).
        parallel: u32,
    },
}

/// The KDF family, without cost parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PbkdfKind {
    /// PBKDF2.
    Pbkdf2,
    /// Argon2i.
    Argon2i,
    /// Argon2id.
    Argon2id,
}

impl PbkdfKind {
    /// Parses the LUKS2 `type` names `pbkdf2`, `argon2i`, `argon2id`.
    pub fn parse(s: &str) -> Result<PbkdfKind, Error> {
        match s.to_ascii_lowercase().as_str() {
            "pbkdf2" => Ok(PbkdfKind::Pbkdf2),
            "argon2i" => Ok(PbkdfKind::Argon2i),
            "argon2id" => Ok(PbkdfKind::Argon2id),
            _ => Err(Error::Kdf(format!(
                "unknown PBKDF \"{s}\": use pbkdf2, argon2i or argon2id"
            ))),
        }
    }

    /// The LUKS2 `type` name.
    pub fn name(self) -> &'static str {
        match self {
            PbkdfKind::Pbkdf2 => "pbkdf2",
            PbkdfKind::Argon2i => "argon2i",
            PbkdfKind::Argon2id => "argon2id",
        }
    }
}

impl fmt::Display for PbkdfKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Pbkdf {
    /// The KDF family.
    pub fn kind(&self) -> PbkdfKind {
        match self {
            Pbkdf::Pbkdf2 { .. } => PbkdfKind::Pbkdf2,
            Pbkdf::Argon2i { .. } => PbkdfKind::Argon2i,
            Pbkdf::Argon2id { .. } => PbkdfKind::Argon2id,
        }
    }
}

/// Derives `out_len` bytes from `password` and `salt`.
///
/// PBKDF2 accepts any salt; Argon2 needs a salt of at least 8 bytes (LUKS2
/// uses 32), `memory_kib >= 8 * parallel`, `time >= 1`, `out_len >= 4`.
pub fn derive(
    kdf: &Pbkdf,
    password: &[u8],
    salt: &[u8],
    out_len: usize,
) -> Result<SecretBytes, Error> {
    let mut out = SecretBytes::new(out_len);
    match *kdf {
        Pbkdf::Pbkdf2 { hash, iterations } => {
            pbkdf2_into(hash, iterations, password, salt, out.as_mut_slice())?
        }
        Pbkdf::Argon2i {
            time,
            memory_kib,
            parallel,
        } => argon2_into(
            Algorithm::Argon2i,
            time,
            memory_kib,
            parallel,
            password,
            salt,
            out.as_mut_slice(),
        )?,
        Pbkdf::Argon2id {
            time,
            memory_kib,
            parallel,
        } => argon2_into(
            Algorithm::Argon2id,
            time,
            memory_kib,
            parallel,
            password,
            salt,
            out.as_mut_slice(),
        )?,
    }
    Ok(out)
}

/// PBKDF2-HMAC into `out`.
pub(crate) fn pbkdf2_into(
    hash: HashAlg,
    iterations: u32,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> Result<(), Error> {
    if iterations == 0 {
        return Err(Error::Kdf("PBKDF2 needs at least 1 iteration".into()));
    }
    if out.is_empty() {
        return Err(Error::Kdf("PBKDF2 output length is 0".into()));
    }
    match hash {
        HashAlg::Sha1 => pbkdf2::pbkdf2_hmac::<sha1::Sha1>(password, salt, iterations, out),
        HashAlg::Sha256 => pbkdf2::pbkdf2_hmac::<sha2::Sha256>(password, salt, iterations, out),
        HashAlg::Sha512 => pbkdf2::pbkdf2_hmac::<sha2::Sha512>(password, salt, iterations, out),
        HashAlg::Ripemd160 => {
            pbkdf2::pbkdf2_hmac::<ripemd::Ripemd160>(password, salt, iterations, out)
        }
    }
    Ok(())
}

/// Argon2 (version 0x13) into `out`, with memory we allocate and wipe.
pub(crate) fn argon2_into(
    alg: Algorithm,
    time: u32,
    memory_kib: u32,
    parallel: u32,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> Result<(), Error> {
    let what = if alg == Algorithm::Argon2i {
        "argon2i"
    } else {
        "argon2id"
    };
    let params = Params::new(memory_kib, time, parallel, Some(out.len())).map_err(|e| {
        Error::Kdf(format!(
            "{what} rejects time={time} memory={memory_kib}KiB parallel={parallel} \
             output={}B: {e}",
            out.len()
        ))
    })?;
    let blocks_len = params.block_count();
    let mut blocks: Vec<Block> = Vec::new();
    blocks.try_reserve_exact(blocks_len).map_err(|_| {
        Error::Kdf(format!(
            "{what} could not allocate {memory_kib} KiB: lower the memory cost"
        ))
    })?;
    blocks.resize(blocks_len, Block::default());
    let r = Argon2::new(alg, Version::V0x13, params).hash_password_into_with_memory(
        password,
        salt,
        out,
        &mut blocks[..],
    );
    blocks.zeroize();
    r.map_err(|e| Error::Kdf(format!("{what} failed: {e} (salt {} bytes)", salt.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_parameters() {
        let p = Pbkdf::Pbkdf2 {
            hash: HashAlg::Sha256,
            iterations: 0,
        };
        assert!(derive(&p, b"pw", b"salt", 32).is_err());
        let a = Pbkdf::Argon2id {
            time: 1,
            memory_kib: 8,
            parallel: 4,
        };
        let e = derive(&a, b"pw", &[0u8; 32], 32).unwrap_err();
        assert!(e.to_string().contains("memory=8KiB"), "{e}");
        let a = Pbkdf::Argon2i {
            time: 1,
            memory_kib: 64,
            parallel: 1,
        };
        assert!(derive(&a, b"pw", b"short", 32).is_err());
        assert_eq!(derive(&a, b"pw", b"longsalt", 32).unwrap().len(), 32);
    }

    #[test]
    fn kind_names() {
        for k in [PbkdfKind::Pbkdf2, PbkdfKind::Argon2i, PbkdfKind::Argon2id] {
            assert_eq!(PbkdfKind::parse(k.name()).unwrap(), k);
        }
        assert!(PbkdfKind::parse("scrypt").is_err());
    }
}
