//! Semantic checks of LUKS2 metadata against its binary header, following
//! cryptsetup `LUKS2_hdr_validate` and adding sanity limits on every number.
//! Every error names the JSON field at fault.

use super::binary_header::{BIN_LEN, HDR_SIZES};
use super::json::{Kdf, Keyslot, Metadata, SegmentSize};
use crate::area::{material_len, AF_STRIPES};
use crate::error::{bad, Error};

/// Most keyslots, tokens and segments cryptsetup allows.
pub const OBJECTS_MAX: usize = 32;
/// Largest keyslots area cryptsetup allows (128 MiB).
pub const MAX_KEYSLOTS_SIZE: u64 = 0x800_0000;
/// Largest volume or keyslot key accepted (4096 bits).
pub const MAX_KEY_BYTES: u32 = 512;
/// Most Argon2 memory cryptsetup accepts (4 GiB, in KiB): a header asking
/// for more is refused instead of exhausting memory at unlock.
pub const MAX_ARGON2_MEMORY_KIB: u32 = 4 * 1024 * 1024;
/// Most Argon2 threads cryptsetup writes (`max_parallel` of its
/// `crypt_pbkdf_get_limits`): new keyslots are kept within it.
pub const MAX_ARGON2_PARALLEL: u32 = 4;
/// Most Argon2 lanes there can be (RFC 9106 §3.1: p < 2^24).
pub const MAX_ARGON2_LANES: u32 = 0xFF_FFFF;
/// KDF salt length in keyslots and digests.
pub const SALT_LEN: usize = 32;

/// Validate `m` for a copy whose binary header says `hdr_size`.
pub fn validate(m: &Metadata, hdr_size: u64) -> Result<(), Error> {
    if !HDR_SIZES.contains(&hdr_size) {
        return Err(bad(format!(
            "hdr_size {hdr_size} is not an allowed LUKS2 header size"
        )));
    }
    let json_size = m.config.json_size.0;
    if json_size != hdr_size - BIN_LEN as u64 {
        return Err(bad(format!(
            "config.json_size is {json_size} but the binary header's hdr_size {hdr_size} gives a JSON area of {}",
            hdr_size - BIN_LEN as u64
        )));
    }
    let ks_size = m.config.keyslots_size.0;
    if !ks_size.is_multiple_of(4096) || ks_size > MAX_KEYSLOTS_SIZE {
        return Err(bad(format!(
            "config.keyslots_size {ks_size} must be a multiple of 4096 and at most {MAX_KEYSLOTS_SIZE}"
        )));
    }
    let areas_start = 2 * hdr_size;
    let areas_end = areas_start + ks_size;
    if m.keyslots.len() > OBJECTS_MAX
        || m.tokens.len() > OBJECTS_MAX
        || m.segments.len() > OBJECTS_MAX
    {
        return Err(bad(format!(
            "more than {OBJECTS_MAX} keyslots, tokens or segments"
        )));
    }
    if let Some(max) = m.keyslots.keys().max() {
        if *max as usize >= OBJECTS_MAX {
            return Err(bad(format!(
                "keyslot id {max} is beyond the limit of {}",
                OBJECTS_MAX - 1
            )));
        }
    }
    validate_segments(m, areas_end)?;
    validate_keyslots(m, areas_start, areas_end)?;
    validate_digests(m)?;
    for (id, t) in &m.tokens {
        if let Some(arr) = t.get("keyslots").and_then(|v| v.as_array()) {
            for k in arr {
                let ok = k
                    .as_str()
                    .and_then(|s| s.parse::<u32>().ok())
                    .is_some_and(|n| m.keyslots.contains_key(&n));
                if !ok {
                    return Err(bad(format!(
                        "tokens.{id}.keyslots refers to a missing keyslot {k}"
                    )));
                }
            }
        }
    }
    Ok(())
}

fn validate_segments(m: &Metadata, areas_end: u64) -> Result<(), Error> {
    if m.segments.is_empty() {
        return Err(bad("segments section is empty"));
    }
    let mut ranges = Vec::new();
    for (id, s) in &m.segments {
        let p = format!("segments.{id}");
        let off = s.offset.0;
        if off % 512 != 0 {
            return Err(bad(format!("{p}.offset {off} is not aligned to 512 bytes")));
        }
        let size = match s.size {
            SegmentSize::Dynamic => None,
            SegmentSize::Bytes(0) => return Err(bad(format!("{p}.size is 0"))),
            SegmentSize::Bytes(n) if n % 512 != 0 => {
                return Err(bad(format!("{p}.size {n} is not aligned to 512 bytes")))
            }
            SegmentSize::Bytes(n) => {
                if off.checked_add(n).is_none() {
                    return Err(bad(format!(
                        "{p}: offset {off} + size {n} overflows 64 bits"
                    )));
                }
                Some(n)
            }
        };
        if s.kind == "crypt" {
            if s.iv_tweak.is_none() {
                return Err(bad(format!("{p}.iv_tweak is missing")));
            }
            if s.encryption.as_deref().unwrap_or("").is_empty() {
                return Err(bad(format!("{p}.encryption is missing")));
            }
            let ss = s
                .sector_size
                .ok_or_else(|| bad(format!("{p}.sector_size is missing")))?;
            if !(512..=4096).contains(&ss) || !ss.is_power_of_two() {
                return Err(bad(format!(
                    "{p}.sector_size {ss} must be a power of two between 512 and 4096"
                )));
            }
            if let Some(n) = size {
                if n % u64::from(ss) != 0 {
                    return Err(bad(format!(
                        "{p}.size {n} is not a multiple of sector_size {ss}"
                    )));
                }
            }
            let idstr = id.to_string();
            if !m.digests.values().any(|d| d.segments.contains(&idstr)) {
                return Err(bad(format!("{p} is not assigned to any digest")));
            }
        }
        let backup = s
            .flags
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x.starts_with("backup-")));
        if !backup {
            ranges.push((off, size, *id));
        }
        if off != 0 && off < areas_end {
            return Err(bad(format!(
                "{p}.offset {off} lies inside the metadata and keyslots area (which ends at {areas_end}; \
                 config.keyslots_size too large?)"
            )));
        }
    }
    ranges.sort();
    for w in ranges.windows(2) {
        let (a_off, a_size, a_id) = w[0];
        let (b_off, _, b_id) = w[1];
        match a_size {
            None => {
                return Err(bad(format!(
                    "segments.{a_id} has dynamic size but segment {b_id} follows it"
                )))
            }
            Some(n) if a_off + n > b_off => {
                return Err(bad(format!("segments.{a_id} overlaps segments.{b_id}")))
            }
            _ => {}
        }
    }
    Ok(())
}

fn validate_keyslots(m: &Metadata, areas_start: u64, areas_end: u64) -> Result<(), Error> {
    let mut areas = Vec::new();
    for (id, ks) in &m.keyslots {
        let p = format!("keyslots.{id}");
        if let Keyslot::Luks2(k) = ks {
            if k.key_size == 0 || k.key_size > MAX_KEY_BYTES {
                return Err(bad(format!(
                    "{p}.key_size {} must be 1..={MAX_KEY_BYTES}",
                    k.key_size
                )));
            }
            if k.area.key_size == 0 || k.area.key_size > MAX_KEY_BYTES {
                return Err(bad(format!(
                    "{p}.area.key_size {} must be 1..={MAX_KEY_BYTES}",
                    k.area.key_size
                )));
            }
            if k.af.kind != "luks1" {
                return Err(bad(format!("{p}.af.type '{}' is not 'luks1'", k.af.kind)));
            }
            if k.af.stripes != AF_STRIPES {
                return Err(bad(format!(
                    "{p}.af.stripes is {}, must be {AF_STRIPES}",
                    k.af.stripes
                )));
            }
            if k.area.kind != "raw" {
                return Err(bad(format!("{p}.area.type '{}' is not 'raw'", k.area.kind)));
            }
            if let Some(pr) = k.priority {
                if pr > 2 {
                    return Err(bad(format!("{p}.priority {pr} must be 0, 1 or 2")));
                }
            }
            let need = material_len(k.key_size as usize, AF_STRIPES);
            if k.area.size.0 < need {
                return Err(bad(format!(
                    "{p}.area.size {} is smaller than the {need} bytes of key material",
                    k.area.size.0
                )));
            }
            if k.kdf.salt().len() != SALT_LEN {
                return Err(bad(format!(
                    "{p}.kdf.salt is {} bytes, expected {SALT_LEN}",
                    k.kdf.salt().len()
                )));
            }
            match &k.kdf {
                Kdf::Pbkdf2 { iterations: 0, .. } => {
                    return Err(bad(format!("{p}.kdf.iterations is 0")));
                }
                Kdf::Argon2i {
                    time, memory, cpus, ..
                }
                | Kdf::Argon2id {
                    time, memory, cpus, ..
                } if *time == 0 || *memory == 0 || *cpus == 0 => {
                    return Err(bad(format!(
                        "{p}.kdf time, memory and cpus must be non-zero"
                    )));
                }
                Kdf::Argon2i { memory, .. } | Kdf::Argon2id { memory, .. }
                    if *memory > MAX_ARGON2_MEMORY_KIB =>
                {
                    return Err(bad(format!(
                        "{p}.kdf.memory {memory} KiB exceeds the {MAX_ARGON2_MEMORY_KIB} KiB (4 GiB) maximum"
                    )));
                }
                Kdf::Argon2i { cpus, .. } | Kdf::Argon2id { cpus, .. }
                    if *cpus > MAX_ARGON2_LANES =>
                {
                    return Err(bad(format!(
                        "{p}.kdf.cpus {cpus} exceeds Argon2's maximum of {MAX_ARGON2_LANES} lanes"
                    )));
                }
                Kdf::Argon2i { memory, cpus, .. } | Kdf::Argon2id { memory, cpus, .. }
                    if u64::from(*memory) < 8 * u64::from(*cpus) =>
                {
                    return Err(bad(format!(
                        "{p}.kdf.memory {memory} KiB is below the 8 KiB per lane Argon2 needs for cpus {cpus}"
                    )));
                }
                _ => {}
            }
        }
        if let Some((off, size)) = ks.area() {
            if size == 0 {
                return Err(bad(format!("{p}.area.size is 0")));
            }
            let end = off.checked_add(size).ok_or_else(|| {
                bad(format!(
                    "{p}.area: offset {off} + size {size} overflows 64 bits"
                ))
            })?;
            if off < areas_start {
                return Err(bad(format!(
                    "{p}.area.offset {off} overlaps the two metadata copies (which end at {areas_start})"
                )));
            }
            if end > areas_end {
                return Err(bad(format!(
                    "{p}.area [{off}, {end}) runs past the keyslots area end {areas_end} (config.keyslots_size)"
                )));
            }
            areas.push((off, end, *id));
        }
    }
    areas.sort();
    for w in areas.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(bad(format!(
                "keyslots.{}.area [{}, {}) overlaps keyslots.{}.area [{}, {})",
                w[0].2, w[0].0, w[0].1, w[1].2, w[1].0, w[1].1
            )));
        }
    }
    Ok(())
}

fn validate_digests(m: &Metadata) -> Result<(), Error> {
    for (id, d) in &m.digests {
        let p = format!("digests.{id}");
        for k in &d.keyslots {
            if !k.parse::<u32>().is_ok_and(|n| m.keyslots.contains_key(&n)) {
                return Err(bad(format!("{p}.keyslots refers to missing keyslot '{k}'")));
            }
        }
        for s in &d.segments {
            if !s.parse::<u32>().is_ok_and(|n| m.segments.contains_key(&n)) {
                return Err(bad(format!("{p}.segments refers to missing segment '{s}'")));
            }
        }
        if d.kind != "pbkdf2" {
            continue;
        }
        if d.iterations == 0 {
            return Err(bad(format!("{p}.iterations is 0")));
        }
        if d.salt.0.len() != SALT_LEN {
            return Err(bad(format!(
                "{p}.salt is {} bytes, expected {SALT_LEN}",
                d.salt.0.len()
            )));
        }
        let hlen = cryptkeep_crypto::HashAlg::parse(&d.hash)
            .map_err(|_| Error::Unsupported(format!("LUKS2 {p}.hash '{}'", d.hash)))?
            .digest_len();
        let dl = d.digest.0.len();
        if dl != 20 && dl != hlen {
            return Err(bad(format!(
                "{p}.digest is {dl} bytes, expected 20 or {hlen}"
            )));
        }
    }
    Ok(())
}

/// The limits cryptsetup puts on a keyslot KDF it creates
/// (`verify_pbkdf_params`): Argon2 memory at most 4 GiB and at most 4
/// threads. Checked before a new keyslot's KDF runs; headers that exceed
/// the thread count (which cryptsetup still opens) are opened too.
pub fn check_new_kdf(kdf: &cryptkeep_crypto::Pbkdf) -> Result<(), Error> {
    use cryptkeep_crypto::Pbkdf as P;
    match *kdf {
        P::Argon2i {
            memory_kib,
            parallel,
            ..
        }
        | P::Argon2id {
            memory_kib,
            parallel,
            ..
        } => {
            if memory_kib > MAX_ARGON2_MEMORY_KIB {
                return Err(Error::InvalidArgument(format!(
                    "Argon2 memory cost {memory_kib} KiB is above the maximum of \
                     {MAX_ARGON2_MEMORY_KIB} KiB (4 GiB)"
                )));
            }
            if parallel > MAX_ARGON2_PARALLEL {
                return Err(Error::InvalidArgument(format!(
                    "Argon2 parallel cost {parallel} is above the maximum of {MAX_ARGON2_PARALLEL}"
                )));
            }
            Ok(())
        }
        P::Pbkdf2 { .. } => Ok(()),
    }
}
