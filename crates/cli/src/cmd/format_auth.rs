//! `format --integrity`: a LUKS2 volume with authenticated encryption, as
//! `cryptsetup luksFormat --integrity` makes it: the LUKS2 header with an
//! authenticated segment, then a dm-integrity device at the segment offset
//! whose tags hold each sector's tag and stored IV, wiped (every sector
//! sealed as encrypted zeros) unless `--integrity-no-wipe`.

use std::path::Path;

use cryptkeep_crypto::sector_aead::{AuthSpec, SectorAead};
use cryptkeep_integrity::{format_external, FormatOptions, Superblock, TagHash};

use super::integrity::wipe_progress;
use crate::exit::{from_crypto, CliError, CliResult, Code};

/// The authenticated mode asked for with `--cipher` and `--integrity`.
pub fn spec(cipher: &str, integrity: &str) -> CliResult<AuthSpec> {
    AuthSpec::from_cli(cipher, integrity).map_err(|e| {
        let mut c = from_crypto(&e, "--integrity");
        c.code = Code::Usage;
        c.hint = "use --integrity hmac-sha256|hmac-sha1|hmac-sha512 with -c aes-xts-plain64, \
                  or --integrity aead with -c aegis128-random or aes-gcm-random, \
                  or --integrity poly1305 with -c chacha20-random"
            .into();
        c
    })
}

/// The volume key size in bytes: `--key-size` (the encryption key, as
/// cryptsetup counts it) plus the MAC key, or the mode's default.
pub fn key_bytes(spec: &AuthSpec, key_bits: Option<u32>) -> CliResult<usize> {
    let n = match key_bits {
        None => spec.default_key_bytes(),
        Some(b) => (b / 8) as usize + spec.mac_key_bytes(),
    };
    spec.check_key_bytes(n)
        .map_err(|e| from_crypto(&e, "--key-size"))?;
    Ok(n)
}

/// Writes the dm-integrity device of a freshly formatted authenticated
/// volume at byte `offset` of `volume`, sealing zero sectors with the
/// volume key `vk` when wiping.
pub fn write_integrity(
    volume: &Path,
    offset: u64,
    spec: &AuthSpec,
    vk: &[u8],
    sector_size: u32,
    wipe: bool,
) -> CliResult<Superblock> {
    let place = volume.display().to_string();
    let aead =
        SectorAead::new(spec, vk, sector_size as usize).map_err(|e| from_crypto(&e, &place))?;
    let tuple = spec.tuple_bytes();
    let tag_size = u16::try_from(tuple).map_err(|_| {
        CliError::new(
            Code::Unexpected,
            format!("a {tuple}-byte tag"),
            &place,
            "please report this bug",
        )
    })?;
    let o = FormatOptions {
        // Not used: the tags come from the sector AEAD.
        hash: TagHash::Crc32c,
        tag_size: Some(tag_size),
        sector_size,
        journal_bytes: None,
        interleave_sectors: 0,
        wipe,
    };
    let ss = sector_size as u64;
    let mut seal = |_: &Superblock, sector: u64, data: &mut [u8], tags: &mut [u8]| {
        aead.seal(sector * 512 / ss, data, tags)
            .map_err(|e| cryptkeep_integrity::Error::BadHash(e.to_string()))
    };
    let fill: Option<&mut cryptkeep_integrity::Fill> = if wipe { Some(&mut seal) } else { None };
    format_external(
        volume,
        offset,
        &o,
        tag_size,
        [0; 16],
        fill,
        &mut wipe_progress(),
    )
    .map_err(|e| super::integrity_args::failed(e, &place))
}
