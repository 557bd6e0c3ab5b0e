//! LUKS2 `crypt` segments (spec §3.3) turned into the engine's [`crate::Segment`].

use cryptkeep_crypto::CipherSpec;

use super::json::{Keyslot, Metadata, SegmentSize};
use crate::error::{bad, Error};

/// The single crypt segment with id 0, with the volume key size taken from a
/// keyslot bound to its digest.
pub fn default_segment(m: &Metadata) -> Result<crate::Segment, Error> {
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
    if s.integrity.is_some() {
        return Err(Error::Unsupported(
            "segments with dm-integrity (authenticated encryption)".into(),
        ));
    }
    let enc = s.encryption.clone().unwrap_or_default();
    let cipher = CipherSpec::parse(&enc)
        .map_err(|e| Error::Unsupported(format!("segment {id} cipher '{enc}': {e}")))?;
    let key_bytes = volume_key_bytes(m, *id)?;
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
