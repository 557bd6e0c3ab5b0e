//! Creating a LUKS2 header with cryptsetup 2.6 `luksFormat` defaults:
//! 16 KiB metadata copies, a 16744448-byte keyslots area, data at 16 MiB,
//! one `crypt` segment, one `pbkdf2` digest and keyslot 0.

use std::collections::BTreeMap;

use cryptkeep_crypto::{Backend, Pbkdf};

use super::binary_header::BIN_LEN;
use super::json::{Config, Metadata, Segment, SegmentIntegrity, SegmentSize, U64Str};
use super::validate::MAX_KEYSLOTS_SIZE;
use super::Luks2;
use crate::area;
use crate::error::Error;
use crate::io::BlockIo;
use crate::util::{check_uuid, random_bytes, uuid_v4};
use crate::FormatOptions;

/// Default hdr_size (binary header + JSON area). Changing this changes the format.
pub const DEFAULT_HDR_SIZE: u64 = 16384;
/// Default keyslots area: 16 MiB − 2 × 16 KiB.
pub const DEFAULT_KEYSLOTS_SIZE: u64 = 16_744_448;
/// Default data offset (16 MiB).
pub const DEFAULT_DATA_OFFSET: u64 = 16 * 1024 * 1024;
/// cryptsetup wipes at most this much at format (2 × 4 MiB + 128 MiB).
pub const MAX_MDA_SIZE: u64 = 2 * 0x40_0000 + MAX_KEYSLOTS_SIZE;

/// Data alignment when no data offset is given (cryptsetup's 1 MiB default).
pub const DATA_ALIGNMENT: u64 = 1 << 20;

/// `(hdr_size, keyslots_size, data_offset)` from the requested sizes, as
/// cryptsetup `LUKS2_hdr_get_storage_params`: the keyslots area fills the
/// gap before a given data offset (4 KiB aligned, at most 128 MiB) or defaults
/// to 16 MiB − 2 × hdr_size; the data offset defaults to the end of the
/// keyslots area rounded up to 1 MiB (0 for a detached header). A data
/// offset of 0 means the default, as cryptsetup's `crypt_set_data_offset(cd, 0)`.
pub fn storage_params(
    metadata: Option<u64>,
    keyslots: Option<u64>,
    data_offset: Option<u64>,
    detached: bool,
) -> Result<(u64, u64, u64), Error> {
    let data_offset = data_offset.filter(|&d| d != 0);
    let hdr = metadata.unwrap_or(DEFAULT_HDR_SIZE);
    if !super::binary_header::HDR_SIZES.contains(&hdr) {
        return Err(Error::InvalidArgument(format!(
            "LUKS2 metadata size {hdr} must be one of 16 KiB, 32 KiB, 64 KiB, … 4 MiB"
        )));
    }
    if let Some(k) = keyslots {
        if k % 4096 != 0 || k > MAX_KEYSLOTS_SIZE || k == 0 {
            return Err(Error::InvalidArgument(format!(
                "LUKS2 keyslots area size {k} must be a non-zero multiple of 4096 up to 128 MiB"
            )));
        }
    }
    let data = data_offset.unwrap_or(0);
    if !data.is_multiple_of(512) {
        return Err(Error::InvalidArgument(format!(
            "data offset {data} must be a multiple of 512 bytes"
        )));
    }
    if data != 0 && data < 2 * hdr {
        return Err(Error::InvalidArgument(format!(
            "data offset {data} is inside the two {hdr}-byte LUKS2 metadata copies"
        )));
    }
    let mut ks = match (keyslots, data) {
        (Some(k), _) => k,
        (None, 0) => DEFAULT_DATA_OFFSET - 2 * hdr,
        (None, d) => (d - 2 * hdr).min(MAX_KEYSLOTS_SIZE),
    };
    ks -= ks % 4096;
    if data != 0 && ks + 2 * hdr > data {
        ks = data - 2 * hdr;
        ks -= ks % 4096;
    }
    let data = match (data_offset, detached) {
        (Some(d), _) => d,
        (None, true) => 0,
        (None, false) => (2 * hdr + ks).div_ceil(DATA_ALIGNMENT) * DATA_ALIGNMENT,
    };
    Ok((hdr, ks, data))
}

/// Format `io` and return the loaded header.
pub fn format(
    io: &dyn BlockIo,
    opts: &FormatOptions,
    volume_key: &[u8],
    passphrase: &[u8],
    slot_kdf: &Pbkdf,
    backend: Backend,
) -> Result<Luks2, Error> {
    let ss = opts.sector_size;
    if !(512..=4096).contains(&ss) || !ss.is_power_of_two() {
        return Err(Error::InvalidArgument(format!(
            "sector size {ss} must be a power of two between 512 and 4096"
        )));
    }
    super::validate::check_new_kdf(slot_kdf)?;
    let (hdr_size, keyslots_size, data_offset) = storage_params(
        opts.luks2_metadata_size,
        opts.luks2_keyslots_size,
        opts.data_offset,
        opts.detached_header,
    )?;
    if data_offset % u64::from(ss) != 0 {
        return Err(Error::InvalidArgument(format!(
            "data offset {data_offset} must be a multiple of the sector size {ss}"
        )));
    }
    let min_area =
        crate::util::round_up(volume_key.len() as u64 * u64::from(area::AF_STRIPES), 4096);
    if keyslots_size < min_area {
        return Err(Error::InvalidArgument(format!(
            "data offset {data_offset} leaves only {keyslots_size} bytes for keyslots, need {min_area}"
        )));
    }
    let uuid = match &opts.uuid {
        Some(u) => {
            check_uuid(u)?;
            u.to_ascii_lowercase()
        }
        None => uuid_v4()?,
    };
    let mut salt1 = [0u8; 64];
    salt1.copy_from_slice(&random_bytes(64)?);
    let mut salt2 = [0u8; 64];
    salt2.copy_from_slice(&random_bytes(64)?);
    let iterations = crate::default_digest_iterations(opts, opts.hash, volume_key.len())?;
    let digest = super::digest::create(volume_key, opts.hash, iterations)?;
    // cryptsetup `json_segment_create_crypt`: an authenticated segment
    // carries its own cipher string and an integrity object whose journal
    // is neither encrypted nor authenticated.
    let (encryption, integrity) = match &opts.auth {
        None => (opts.cipher.to_string(), None),
        Some(a) => (
            a.encryption.clone(),
            Some(SegmentIntegrity {
                kind: a.integrity.clone(),
                journal_encryption: "none".into(),
                journal_integrity: "none".into(),
                key_size: None,
                extra: Default::default(),
            }),
        ),
    };
    let segment = Segment {
        kind: "crypt".into(),
        offset: U64Str(data_offset),
        size: SegmentSize::Dynamic,
        iv_tweak: Some(U64Str(0)),
        encryption: Some(encryption),
        sector_size: Some(ss),
        integrity,
        flags: None,
        extra: Default::default(),
    };
    let meta = Metadata {
        keyslots: BTreeMap::new(),
        tokens: Default::default(),
        segments: BTreeMap::from([(0, segment)]),
        digests: BTreeMap::from([(0, digest)]),
        config: Config {
            json_size: U64Str(hdr_size - BIN_LEN as u64),
            keyslots_size: U64Str(keyslots_size),
            flags: None,
            requirements: None,
            extra: Default::default(),
        },
        extra: Default::default(),
    };
    let mut l = Luks2 {
        hdr_size,
        seqid: 0,
        label: opts.label.clone().unwrap_or_default(),
        subsystem: opts.subsystem.clone().unwrap_or_default(),
        uuid,
        csum_alg: "sha256".into(),
        salt1,
        salt2,
        meta,
    };
    for (what, v) in [("label", &l.label), ("subsystem", &l.subsystem)] {
        if v.len() > 47 || v.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "{what} '{v}' must be at most 47 bytes"
            )));
        }
    }

    // Keyslot 0 and both header copies are made and checked before the
    // first write.
    let (mat_off, material) = l.prepare_keyslot(0, volume_key, passphrase, slot_kdf, backend)?;
    let encoded = l.encode()?;

    // Like cryptsetup LUKS2_wipe_header_areas: zeros up to the data offset
    // (at most the largest metadata size, never past the device end), then
    // random data over the whole keyslots area.
    let dev = io.size().map_err(|source| Error::Io {
        what: "getting the device size".into(),
        source,
    })?;
    let zero_len = match data_offset {
        0 => MAX_MDA_SIZE,
        n => n.min(MAX_MDA_SIZE),
    }
    .min(dev);
    area::wipe_zero(io, 0, zero_len, "LUKS2 metadata area")?;
    area::wipe_random(io, 2 * hdr_size, keyslots_size, "LUKS2 keyslots area")?;
    area::write_material(io, mat_off, &material, "LUKS2 keyslot 0 area")?;
    l.write_encoded(io, &encoded)?;
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned against cryptsetup 2.6 luksFormat: changing this changes the format.
    #[test]
    fn storage_params_match_cryptsetup() {
        assert_eq!(
            storage_params(None, None, None, false).unwrap(),
            (16384, 16744448, 16 << 20)
        );
        assert_eq!(
            storage_params(Some(65536), Some(2 << 20), None, false).unwrap(),
            (65536, 2 << 20, 3 << 20)
        );
        assert_eq!(
            storage_params(None, None, Some(8192 * 512), false).unwrap(),
            (16384, 4161536, 4 << 20)
        );
        assert_eq!(
            storage_params(Some(1 << 20), None, None, false).unwrap(),
            (1 << 20, 14680064, 16 << 20)
        );
        assert_eq!(
            storage_params(None, None, None, true).unwrap(),
            (16384, 16744448, 0)
        );
        assert!(storage_params(Some(20000), None, None, false).is_err());
        assert!(storage_params(None, None, Some(16384), false).is_err());
        // 0 is the default: an attached header never gets data at offset 0.
        assert_eq!(
            storage_params(None, None, Some(0), false).unwrap(),
            (16384, 16744448, 16 << 20)
        );
        assert_eq!(storage_params(None, None, Some(0), true).unwrap().2, 0);
    }
}
