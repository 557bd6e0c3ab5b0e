//! `open` of a LUKS2 volume with authenticated encryption (`cryptsetup
//! luksFormat --integrity`): the dm-integrity device at the segment offset
//! carries each sector's tag, the sector AEAD (in the keep, or inline)
//! checks and decrypts, and a sector that fails reads as EIO, is logged and
//! counted for `status`.

use std::path::Path;
use std::sync::Arc;

use cryptkeep_crypto::sector_aead::{AuthSpec, SectorAead};
use cryptkeep_crypto::SecretBytes;
use cryptkeep_integrity::{read_superblock_at, Device, Mode, DEFAULT_BUFFER_SECTORS};
use cryptkeep_keep::auth_crypt::KeepAuthCrypt;
use cryptkeep_keep::keep::Keep;
use cryptkeep_luks::{AuthSegment, Luks};
use cryptkeep_volume::{AuthCrypt, AuthVolume, InlineAuthCrypt};

use super::integrity_args::failed;
use crate::exit::{from_crypto, from_luks, CliError, CliResult, Code};
use crate::state::{self, IntegrityCounts};

/// What `open` learned about an authenticated volume before unlocking.
pub struct AuthPayload {
    /// The LUKS2 segment.
    pub seg: AuthSegment,
    /// Its mode (cipher and tag).
    pub spec: AuthSpec,
    /// Journal (the default), direct (`--integrity-no-journal`) or
    /// read-only.
    pub mode: Mode,
    /// Decrypted data size in bytes: what the integrity device provides.
    pub data_size: u64,
}

fn unsupported(what: String, place: &str) -> CliError {
    CliError::new(
        Code::Corrupt,
        format!("not supported: {what}"),
        place,
        "open it with cryptsetup, or reformat with a supported --integrity mode",
    )
}

/// Reads the authenticated segment and the integrity superblock under it
/// and checks that they fit together.
pub fn payload(
    luks: &Luks,
    volume: &Path,
    read_only: bool,
    no_journal: bool,
    place: &str,
) -> CliResult<AuthPayload> {
    let seg = luks
        .authenticated_segment()
        .map_err(|e| from_luks(e, place))?;
    let spec = AuthSpec::parse(&seg.encryption, &seg.integrity)
        .map_err(|e| unsupported(e.to_string(), place))?;
    if spec.mac_key_bytes() != seg.integrity_key_bytes {
        return Err(unsupported(
            format!(
                "a {}-byte integrity key (cryptkeep supports the default, {} bytes)",
                seg.integrity_key_bytes,
                spec.mac_key_bytes()
            ),
            place,
        ));
    }
    spec.check_key_bytes(seg.key_bytes)
        .map_err(|e| from_crypto(&e, place))?;
    if seg.iv_tweak != 0 {
        return Err(unsupported(
            format!(
                "an authenticated segment with iv_tweak {} (its IVs and associated data would be wrong)",
                seg.iv_tweak
            ),
            place,
        ));
    }
    let sb = read_superblock_at(volume, seg.offset).map_err(|e| match e {
        // The superblock is part of this LUKS2 volume's data area, not a
        // device of its own: say where it was looked for.
        cryptkeep_integrity::Error::NotIntegrity => CliError::new(
            Code::Corrupt,
            format!(
                "no dm-integrity superblock (magic \"integrt\") at byte {}, where the authenticated data segment starts",
                seg.offset
            ),
            place,
            "the data area is damaged or does not belong to this header",
        ),
        e => failed(e, place),
    })?;
    let block = sb.sectors_per_block() * 512;
    if usize::from(sb.tag_size) != spec.tuple_bytes() || block != seg.sector_size {
        return Err(CliError::new(
            Code::Corrupt,
            format!(
                "the integrity device at byte {} keeps {}-byte tags for {block}-byte blocks, but {} with {}-byte sectors needs {}-byte tags",
                seg.offset,
                sb.tag_size,
                spec,
                seg.sector_size,
                spec.tuple_bytes()
            ),
            place,
            "the header and the data area do not belong together",
        ));
    }
    let mode = match (read_only, no_journal) {
        (true, _) => Mode::ReadOnly,
        (false, true) => Mode::Direct,
        (false, false) => Mode::Journal,
    };
    Ok(AuthPayload {
        data_size: sb.provided_data_sectors * 512,
        seg,
        spec,
        mode,
    })
}

/// The sector AEAD with the volume key in this process.
pub fn inline_crypt(
    auth: &AuthPayload,
    vk: &SecretBytes,
    place: &str,
) -> CliResult<Arc<dyn AuthCrypt>> {
    let aead = SectorAead::new(&auth.spec, vk.as_slice(), auth.seg.sector_size as usize)
        .map_err(|e| from_crypto(&e, place))?;
    Ok(Arc::new(InlineAuthCrypt::new(aead)))
}

/// The sector AEAD done by the keep that holds the volume key.
pub fn keep_crypt(
    keep: Arc<dyn Keep>,
    auth: &AuthPayload,
    place: &str,
) -> CliResult<Arc<dyn AuthCrypt>> {
    let crypt = KeepAuthCrypt::new(keep, auth.seg.sector_size as usize, auth.spec.tuple_bytes())
        .map_err(|e| {
            CliError::new(
                Code::Daemon,
                format!("cannot use the keep: {e}"),
                place,
                "close and open again",
            )
        })?;
    Ok(Arc::new(crypt))
}

/// Opens the integrity device and serves it through `crypt`; failures are
/// counted in NAME's run directory for `status`.
pub fn volume(
    path: &Path,
    auth: &AuthPayload,
    crypt: Arc<dyn AuthCrypt>,
    name: &str,
    place: &str,
) -> CliResult<AuthVolume> {
    let dev = Device::open_external(path, auth.seg.offset, auth.mode, DEFAULT_BUFFER_SECTORS)
        .map_err(|e| failed(e, place))?;
    let vol = AuthVolume::new(dev, crypt).map_err(|e| {
        CliError::new(
            Code::Corrupt,
            e.to_string(),
            place,
            "the header and the data area do not belong together",
        )
    })?;
    state::save_integrity_counts(name, &IntegrityCounts::default())?;
    let name = name.to_string();
    // One record at a time: reads fail on several threads at once.
    let recorded = std::sync::Mutex::new(IntegrityCounts::default());
    Ok(vol.with_failure_hook(Box::new(move |failures, sector| {
        let mut c = recorded.lock().unwrap_or_else(|p| p.into_inner());
        if failures < c.failures {
            return;
        }
        *c = IntegrityCounts {
            failures,
            last_failure: Some(sector),
        };
        if let Err(e) = state::save_integrity_counts(&name, &c) {
            eprintln!("cryptkeep: {e}");
        }
    })))
}
