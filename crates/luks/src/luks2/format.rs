//! Creating a LUKS2 header with cryptsetup 2.6 `luksFormat` defaults:
//! 16 KiB metadata copies, a 16744448-byte keyslots area, data at 16 MiB,
//! one `crypt` segment, one `pbkdf2` digest and keyslot 0.

use std::collections::BTreeMap;

use cryptkeep_crypto::{Backend, Pbkdf};

use super::binary_header::BIN_LEN;
use super::json::{Config, Metadata, Segment, SegmentSize, U64Str};
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
    let hdr_size = DEFAULT_HDR_SIZE;
    let data_offset = match opts.data_offset {
        Some(o) => o,
        None if opts.detached_header => 0,
        None => DEFAULT_DATA_OFFSET,
    };
    if data_offset % 512 != 0 || data_offset % u64::from(ss) != 0 {
        return Err(Error::InvalidArgument(format!(
            "data offset {data_offset} must be a multiple of 512 and of the sector size {ss}"
        )));
    }
    let keyslots_size = if data_offset == 0 {
        DEFAULT_KEYSLOTS_SIZE
    } else {
        // cryptsetup LUKS2_set_keyslots_size: the gap up to the data, at most 128 MiB, 4 KiB aligned.
        let gap = data_offset.checked_sub(2 * hdr_size).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "data offset {data_offset} is inside the two {hdr_size}-byte LUKS2 metadata copies"
            ))
        })?;
        let ks = gap.min(MAX_KEYSLOTS_SIZE);
        ks - ks % 4096
    };
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
    let segment = Segment {
        kind: "crypt".into(),
        offset: U64Str(data_offset),
        size: SegmentSize::Dynamic,
        iv_tweak: Some(U64Str(0)),
        encryption: Some(opts.cipher.to_string()),
        sector_size: Some(ss),
        integrity: None,
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

    l.store_keyslot(io, 0, volume_key, passphrase, slot_kdf, backend)?;
    l.write(io)?;
    Ok(l)
}
