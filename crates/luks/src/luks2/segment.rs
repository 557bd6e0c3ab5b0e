//! LUKS2 `crypt` segments (spec §3.3) turned into the engine's
//! [`crate::Segment`], or, for authenticated encryption (a segment with an
//! `integrity` object: dm-crypt over dm-integrity), [`crate::AuthSegment`].

use cryptkeep_crypto::CipherSpec;

use super::json::{Keyslot, Metadata, Segment, SegmentSize};
use crate::error::{bad, Error};

/// cryptsetup's smallest separate integrity key (`LUKS2_MIN_INTEGRITY_KEY_BYTES`).
pub const MIN_INTEGRITY_KEY_BYTES: usize = 16;

/// Whether a data segment of `m` is authenticated (has an `integrity` object).
pub fn is_authenticated(m: &Metadata) -> bool {
    m.segments.values().any(|s| s.integrity.is_some())
}

/// The single segment, which must be of type `crypt`.
fn single_crypt(m: &Metadata) -> Result<(u32, &Segment), Error> {
    super::config::check_requirements(m)?;
    if m.segments.len() != 1 {
        return Err(Error::Unsupported(format!(
            "{} data segments (reencryption in progress?); only one is supported",
            m.segments.len()
        )));
    }
    let (id, s) = m
        .segments
        .iter()
        .next()
        .ok_or_else(|| bad("no data segment"))?;
    if s.kind != "crypt" {
        return Err(Error::Unsupported(format!("segment type '{}'", s.kind)));
    }
    Ok((*id, s))
}

/// The single authenticated crypt segment with id 0, with the volume key
/// size from a keyslot bound to its digest, its algorithms and key sizes
/// checked. Journal encryption or MAC other than `none` is refused, as
/// cryptsetup refuses to activate it ("Unsupported device integrity
/// configuration").
pub fn auth_segment(m: &Metadata) -> Result<crate::AuthSegment, Error> {
    let (id, s) = single_crypt(m)?;
    let Some(integrity) = &s.integrity else {
        return Err(Error::InvalidArgument(format!(
            "segments.{id} has no integrity object: the volume is not authenticated \
             (open it as a plain encrypted segment)"
        )));
    };
    let p = format!("segments.{id}.integrity");
    for (name, v) in [
        ("journal_encryption", &integrity.journal_encryption),
        ("journal_integrity", &integrity.journal_integrity),
    ] {
        if v != "none" {
            return Err(Error::Unsupported(format!(
                "{p}.{name} '{v}': only 'none' is supported (as by cryptsetup)"
            )));
        }
    }
    let encryption = s.encryption.clone().unwrap_or_default();
    let key_bytes = volume_key_bytes(m, id)?;
    let integrity_key_bytes = auth_key_split(
        &encryption,
        &integrity.kind,
        integrity.key_size,
        key_bytes,
        &format!("segments.{id}"),
    )
    .map_err(|f| match f {
        AuthFault::Unsupported(w) => Error::Unsupported(w),
        AuthFault::Misfit(w) => bad(w),
    })?;
    Ok(crate::AuthSegment {
        offset: s.offset.0,
        size: match s.size {
            SegmentSize::Dynamic => None,
            SegmentSize::Bytes(n) => Some(n),
        },
        sector_size: s.sector_size.unwrap_or(512),
        iv_tweak: s.iv_tweak.map(|t| t.0).unwrap_or(0),
        encryption,
        integrity: integrity.kind.clone(),
        journal_encryption: integrity.journal_encryption.clone(),
        journal_integrity: integrity.journal_integrity.clone(),
        key_bytes,
        integrity_key_bytes,
    })
}

/// Why an authenticated segment's algorithms cannot work.
#[derive(Debug)]
pub(crate) enum AuthFault {
    /// A tag algorithm we do not know.
    Unsupported(String),
    /// Key sizes that do not fit the algorithms.
    Misfit(String),
}

/// Bytes of the integrity (MAC) key at the end of a `key_bytes` volume key
/// for segment cipher `encryption` with tag algorithm `integrity`, as
/// cryptsetup `INTEGRITY_key_size` and `LUKS2_check_encryption_params`: hmac
/// keys default to the hash length, at least 16 bytes, and must leave a
/// cipher key that fits the cipher; `aead` and `poly1305` take no separate
/// key. `path` (e.g. `segments.0`) prefixes the messages.
pub(crate) fn auth_key_split(
    encryption: &str,
    integrity: &str,
    key_size: Option<u32>,
    key_bytes: usize,
    path: &str,
) -> Result<usize, AuthFault> {
    let (default, aead) = match integrity {
        "aead" | "poly1305" => (0usize, true),
        "hmac(sha1)" => (20, false),
        "hmac(sha256)" => (32, false),
        "hmac(sha512)" => (64, false),
        other => {
            return Err(AuthFault::Unsupported(format!(
                "{path}.integrity.type '{other}' (known: aead, poly1305, hmac(sha1), \
                 hmac(sha256), hmac(sha512))"
            )))
        }
    };
    // cryptsetup reads an absent or zero key_size as the default.
    let ik = match key_size.map(|k| k as usize) {
        None | Some(0) => default,
        Some(k) if aead => {
            return Err(AuthFault::Misfit(format!(
                "{path}.integrity.key_size {k} is set but '{integrity}' tags take no separate key"
            )))
        }
        Some(k) => k,
    };
    if ik != 0 && ik < MIN_INTEGRITY_KEY_BYTES {
        return Err(AuthFault::Misfit(format!(
            "{path}.integrity.key_size {ik} is below the minimum of {MIN_INTEGRITY_KEY_BYTES} bytes"
        )));
    }
    if ik >= key_bytes {
        return Err(AuthFault::Misfit(format!(
            "the {key_bytes}-byte volume key leaves no cipher key for {path}.encryption \
             after the {ik}-byte {integrity} key"
        )));
    }
    let ck = key_bytes - ik;
    if let Some(why) = cipher_key_misfit(encryption, integrity, ck) {
        return Err(AuthFault::Misfit(format!(
            "{path}.encryption '{encryption}' cannot use a {ck}-byte cipher key \
             ({key_bytes}-byte volume key{}): {why}",
            if ik > 0 {
                format!(" less the {ik}-byte {integrity} key")
            } else {
                String::new()
            }
        )));
    }
    Ok(ik)
}

/// Why `encryption` cannot take a `ck`-byte key under tag algorithm
/// `integrity`, for the ciphers whose key sizes are known; others are left
/// to the volume engine.
fn cipher_key_misfit(encryption: &str, integrity: &str, ck: usize) -> Option<String> {
    if encryption.is_empty() || encryption.contains(char::is_whitespace) {
        return Some("not a cipher spec".into());
    }
    let parts: Vec<&str> = encryption.split('-').collect();
    let allowed: &[usize] = match (integrity, parts.as_slice()) {
        ("aead", ["aegis128", "random"]) => &[16],
        ("aead", ["aegis256", "random"]) => &[32],
        ("aead", ["aes", "gcm", "random"]) => &[16, 24, 32],
        ("poly1305", ["chacha20", "random"]) => &[32],
        ("aead", [_, "xts" | "cbc" | "ecb" | "ctr", ..]) => {
            return Some(
                "integrity 'aead' needs an AEAD cipher (e.g. aes-gcm-random, aegis128-random)"
                    .into(),
            )
        }
        ("aead" | "poly1305", _) => return None,
        (_, [.., "random"]) => {
            // Random IVs live in the tags; the key is the plain64 cipher's.
            let plain = format!(
                "{}-plain64",
                &encryption[..encryption.len() - "-random".len()]
            );
            return CipherSpec::parse(&plain)
                .ok()
                .and_then(|spec| crate::util::key_misfit(&spec, ck));
        }
        _ => {
            return CipherSpec::parse(encryption)
                .ok()
                .and_then(|spec| crate::util::key_misfit(&spec, ck))
        }
    };
    if allowed.contains(&ck) {
        None
    } else {
        Some(format!("it takes a key of {allowed:?} bytes"))
    }
}

/// The single crypt segment with id 0, with the volume key size taken from a
/// keyslot bound to its digest.
/// Authenticated segments are refused: see [`auth_segment`].
pub fn default_segment(m: &Metadata) -> Result<crate::Segment, Error> {
    let (id, s) = single_crypt(m)?;
    if let Some(i) = &s.integrity {
        return Err(Error::Unsupported(format!(
            "segments.{id} is an authenticated volume (dm-crypt over dm-integrity, \
             integrity '{}'): it has no plain encrypted segment; open it as an authenticated volume",
            i.kind
        )));
    }
    let enc = s.encryption.clone().unwrap_or_default();
    let cipher = CipherSpec::parse(&enc)
        .map_err(|e| Error::Unsupported(format!("segment {id} cipher '{enc}': {e}")))?;
    let key_bytes = volume_key_bytes(m, id)?;
    if let Some(why) = crate::util::key_misfit(&cipher, key_bytes) {
        return Err(bad(format!(
            "segments.{id}.encryption cannot use the {key_bytes}-byte volume key its keyslots hold: {why}"
        )));
    }
    Ok(crate::Segment {
        offset: s.offset.0,
        size: match s.size {
            SegmentSize::Dynamic => None,
            SegmentSize::Bytes(n) => Some(n),
        },
        iv_tweak: s.iv_tweak.map(|t| t.0).unwrap_or(0),
        cipher,
        key_bytes,
        sector_size: s.sector_size.unwrap_or(512),
    })
}

/// Volume key length of segment `seg`: key_size of any keyslot bound to its digest.
pub fn volume_key_bytes(m: &Metadata, seg: u32) -> Result<usize, Error> {
    let sid = seg.to_string();
    let d = m
        .digests
        .values()
        .find(|d| d.segments.contains(&sid))
        .ok_or_else(|| bad(format!("segment {seg} has no digest")))?;
    d.keyslots
        .iter()
        .filter_map(|k| k.parse::<u32>().ok())
        .filter_map(|k| match m.keyslots.get(&k) {
            Some(Keyslot::Luks2(ks)) => Some(ks.key_size as usize),
            _ => None,
        })
        .next()
        .ok_or_else(|| {
            bad(format!(
                "no keyslot bound to segment {seg}: the volume key size is unknown"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(enc: &str, int: &str, ks: Option<u32>, key: usize) -> Result<usize, String> {
        auth_key_split(enc, int, ks, key, "segments.0").map_err(|f| match f {
            AuthFault::Unsupported(w) => format!("unsupported: {w}"),
            AuthFault::Misfit(w) => w,
        })
    }

    /// Key layouts of cryptsetup `luksFormat --integrity`: the cipher key,
    /// then the hmac key (cryptsetup `INTEGRITY_key_size`).
    #[test]
    fn key_splits_follow_cryptsetup() {
        assert_eq!(split("aes-xts-plain64", "hmac(sha256)", None, 96), Ok(32));
        assert_eq!(split("aes-xts-plain64", "hmac(sha256)", None, 64), Ok(32));
        assert_eq!(split("aes-xts-random", "hmac(sha512)", None, 128), Ok(64));
        assert_eq!(
            split("aes-cbc-essiv:sha256", "hmac(sha1)", None, 52),
            Ok(20)
        );
        assert_eq!(
            split("aes-xts-plain64", "hmac(sha256)", Some(64), 128),
            Ok(64)
        );
        assert_eq!(
            split("aes-xts-plain64", "hmac(sha256)", Some(0), 96),
            Ok(32)
        );
        assert_eq!(split("aegis128-random", "aead", None, 16), Ok(0));
        assert_eq!(split("aegis256-random", "aead", None, 32), Ok(0));
        assert_eq!(split("aes-gcm-random", "aead", None, 24), Ok(0));
        assert_eq!(split("chacha20-random", "poly1305", None, 32), Ok(0));
        // Ciphers whose key sizes we do not know are left to the engine.
        assert_eq!(
            split("serpent-xts-random", "hmac(sha256)", None, 96),
            Ok(32)
        );
        assert_eq!(split("aes-ccm-random", "aead", None, 19), Ok(0));
    }

    #[test]
    fn misfits_name_the_field() {
        for (enc, int, ks, key, expect) in [
            (
                "aes-xts-plain64",
                "hmac(sha256)",
                None,
                32,
                "leaves no cipher key",
            ),
            (
                "aes-xts-plain64",
                "hmac(sha256)",
                None,
                48,
                "cannot use a 16-byte cipher key",
            ),
            (
                "aes-xts-random",
                "hmac(sha256)",
                None,
                40,
                "segments.0.encryption 'aes-xts-random'",
            ),
            (
                "aes-xts-plain64",
                "hmac(sha256)",
                Some(8),
                72,
                "segments.0.integrity.key_size 8",
            ),
            (
                "aegis128-random",
                "aead",
                Some(16),
                32,
                "segments.0.integrity.key_size 16",
            ),
            (
                "aegis128-random",
                "aead",
                None,
                32,
                "cannot use a 32-byte cipher key",
            ),
            (
                "chacha20-random",
                "poly1305",
                None,
                16,
                "cannot use a 16-byte",
            ),
            ("aes-xts-plain64", "aead", None, 64, "needs an AEAD cipher"),
            (
                "aes-xts-plain64",
                "crc32c",
                None,
                64,
                "unsupported: segments.0.integrity.type 'crc32c'",
            ),
            ("aes xts", "hmac(sha256)", None, 96, "not a cipher spec"),
        ] {
            let e = split(enc, int, ks, key).unwrap_err();
            assert!(e.contains(expect), "expected '{expect}' in: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
