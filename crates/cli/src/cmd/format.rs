//! `cryptkeep format` (alias `luksFormat`): write a new LUKS1/LUKS2 header
//! with one keyslot, like `cryptsetup luksFormat`, creating the image file
//! when `--size` is given.

use std::fs::OpenOptions;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;
use cryptkeep_crypto::sector_aead::AuthSpec;
use cryptkeep_crypto::{CipherSpec, HashAlg, SecretBytes};
use cryptkeep_luks::{AuthFormat, FormatOptions, Luks, LuksVersion};

use super::common::{self, BackendArg, KeyFileArgs, TypeArg};
use super::format_auth;
use super::kdf_opts::PbkdfArgs;
use crate::exit::{from_crypto, from_luks, CliError, CliResult, Code};
use crate::passphrase::confirm;
use crate::size::parse_size;

/// Options of `format`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// Create the file with this total size (like truncate -s: 256M, 1G, bytes) if it does not exist.
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// luks2 (default) or luks1.
    #[arg(long = "type", value_enum, default_value = "luks2")]
    pub kind: TypeArg,
    /// dm-crypt cipher spec (default aes-xts-plain64).
    #[arg(short = 'c', long, default_value = "aes-xts-plain64")]
    pub cipher: String,
    /// Volume key size in bits (default 512 for XTS, 256 otherwise).
    #[arg(short = 's', long = "key-size", value_name = "BITS")]
    pub key_size: Option<u32>,
    /// Encryption sector size: 512..4096 (default 4096 on LUKS2 files, 512 on block devices and LUKS1).
    #[arg(long = "sector-size", value_name = "N")]
    pub sector_size: Option<u32>,
    #[command(flatten)]
    pub kdf: PbkdfArgs,
    /// Hash for PBKDF2, the AF splitter and the digest (default sha256).
    #[arg(long, default_value = "sha256")]
    pub hash: String,
    /// LUKS2 label.
    #[arg(long)]
    pub label: Option<String>,
    /// LUKS2 subsystem.
    #[arg(long)]
    pub subsystem: Option<String>,
    /// Use this UUID instead of a random one.
    #[arg(long)]
    pub uuid: Option<String>,
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Write the header to this detached file (created if missing); data starts at 0 on VOLUME.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Data offset in 512-byte sectors (cryptsetup --offset; 0 = the default).
    #[arg(long, value_name = "SECTORS")]
    pub offset: Option<u64>,
    /// LUKS2 metadata (binary header + JSON) size: 16K … 4M (cryptsetup's option).
    #[arg(long = "luks2-metadata-size", value_parser = parse_size, value_name = "SIZE")]
    pub luks2_metadata_size: Option<u64>,
    /// LUKS2 keyslots area size (cryptsetup's option).
    #[arg(long = "luks2-keyslots-size", value_parser = parse_size, value_name = "SIZE")]
    pub luks2_keyslots_size: Option<u64>,
    /// Do not ask for confirmation.
    #[arg(short = 'q', long = "batch-mode")]
    pub batch_mode: bool,
    /// Crypto backend for the keyslot encryption.
    #[arg(long = "crypto-backend", value_enum, default_value = "accelerated")]
    pub crypto_backend: BackendArg,
    /// Authenticated encryption (LUKS2): hmac-sha256, hmac-sha1 or
    /// hmac-sha512 with aes-xts-plain64; aead with aegis128-random or
    /// aes-gcm-random; poly1305 with chacha20-random. Each sector gets a
    /// tag, kept by a dm-integrity device in the data area.
    #[arg(long, value_name = "ALG")]
    pub integrity: Option<String>,
    /// With --integrity: do not wipe the data area (sectors never written
    /// then fail authentication when read, as with cryptsetup).
    #[arg(long = "integrity-no-wipe")]
    pub integrity_no_wipe: bool,
}

/// The LUKS magic at offset 0 of both versions.
const LUKS_MAGIC: &[u8; 6] = b"LUKS\xba\xbe";

fn has_luks_magic(path: &Path) -> bool {
    let Ok(s) = crate::store::open(path, false, "volume") else {
        return false;
    };
    let mut b = [0u8; 6];
    cryptkeep_luks::BlockIo::read_at(&s, &mut b, 0).is_ok() && &b == LUKS_MAGIC
}

/// Whether the volume (or header file) is there: a path that exists, or an
/// NBD export (always there; its server decides).
fn exists(path: &Path) -> bool {
    crate::store::is_nbd(path) || path.exists()
}

/// Creates (or grows) the image file to `size` bytes; returns whether it
/// was created by us. An NBD export keeps the size its server gives it.
fn prepare_file(path: &Path, size: Option<u64>) -> CliResult<bool> {
    let shown = path.display().to_string();
    if crate::store::is_nbd(path) {
        let have = device_size(path)?;
        return match size {
            Some(s) if s != have => Err(CliError::usage(
                format!(
                    "the NBD export has {have} bytes; its server sets the size, not --size {s}"
                ),
                shown,
                "leave out --size, or resize the export on the server",
            )),
            _ => Ok(false),
        };
    }
    match std::fs::metadata(path) {
        Ok(md) => {
            if let Some(s) = size {
                if md.file_type().is_block_device() {
                    return Err(CliError::usage(
                        "--size applies to image files, not block devices",
                        shown,
                        "leave out --size",
                    ));
                }
                if md.len() > s {
                    return Err(CliError::usage(
                        format!("the file is larger ({} bytes) than --size {s}", md.len()),
                        shown,
                        "leave out --size to keep its size, or remove the file first",
                    ));
                }
                if md.len() < s {
                    let f = OpenOptions::new()
                        .write(true)
                        .open(path)
                        .map_err(|e| CliError::io("cannot open", &shown, &e))?;
                    f.set_len(s)
                        .map_err(|e| CliError::io("cannot grow the file", &shown, &e))?;
                }
            }
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let Some(s) = size else {
                return Err(CliError::new(
                    Code::NotFound,
                    "the volume does not exist",
                    shown,
                    "pass --size SIZE (e.g. --size 256M) to create an image file",
                ));
            };
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| CliError::io("cannot create the volume file", &shown, &e))?;
            f.set_len(s)
                .map_err(|e| CliError::io("cannot size the volume file", &shown, &e))?;
            Ok(true)
        }
        Err(e) => Err(CliError::io("cannot inspect the volume", shown, &e)),
    }
}

fn device_size(path: &Path) -> CliResult<u64> {
    crate::store::open(path, false, "volume")?
        .size()
        .map_err(|e| CliError::io("cannot size the volume", path.display().to_string(), &e))
}

/// Runs `format`.
pub fn run(a: Args) -> CliResult {
    let version = match a.kind {
        TypeArg::Luks1 => LuksVersion::V1,
        TypeArg::Luks2 => LuksVersion::V2,
        TypeArg::Luks => {
            return Err(CliError::usage(
                "--type luks is ambiguous for format",
                "--type",
                "use --type luks2 or --type luks1",
            ))
        }
    };
    let auth = match &a.integrity {
        None => None,
        Some(_) if version != LuksVersion::V2 => {
            return Err(CliError::usage(
                "authenticated encryption needs LUKS2",
                "--integrity",
                "use --type luks2",
            ))
        }
        Some(_) if crate::store::is_nbd(&a.volume) => {
            return Err(CliError::usage(
                "authenticated (--integrity) volumes cannot live on an NBD server yet",
                "--integrity",
                "leave out --integrity, or format a local image file",
            ))
        }
        Some(i) => Some(format_auth::spec(&a.cipher, i)?),
    };
    if auth.is_none() && a.integrity_no_wipe {
        return Err(CliError::usage(
            "--integrity-no-wipe needs --integrity",
            "--integrity-no-wipe",
            "leave it out, or choose an --integrity algorithm",
        ));
    }
    // An authenticated segment's cipher is not a sector cipher; its
    // keyslots use cryptsetup's default keyslot cipher (see luks2.md).
    let cipher = match &auth {
        Some(_) => FormatOptions::default().cipher,
        None => CipherSpec::parse(&a.cipher).map_err(|e| from_crypto(&e, "--cipher"))?,
    };
    let hash = HashAlg::parse(&a.hash).map_err(|e| {
        let mut c = from_crypto(&e, "--hash");
        c.code = Code::Usage;
        c.hint = "use sha1, sha256 or sha512".into();
        c
    })?;
    let is_xts = a.cipher.contains("-xts-");
    let bits = a.key_size.unwrap_or(if is_xts { 512 } else { 256 });
    if !bits.is_multiple_of(8) || bits == 0 {
        return Err(CliError::usage(
            format!("--key-size {bits} is not a multiple of 8"),
            "--key-size",
            "use e.g. 256 or 512",
        ));
    }
    let key_bytes = match &auth {
        Some(spec) => format_auth::key_bytes(spec, a.key_size)?,
        None => {
            let n = (bits / 8) as usize;
            cipher
                .check_key_size(n)
                .map_err(|e| from_crypto(&e, "--key-size"))?;
            n
        }
    };
    let place = common::place(&a.volume, a.header.as_deref());
    let is_blockdev = std::fs::metadata(&a.volume)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false);
    let sector_size = match (version, a.sector_size) {
        (LuksVersion::V1, None | Some(512)) => 512,
        (LuksVersion::V1, Some(n)) => {
            return Err(CliError::usage(
                format!("LUKS1 supports only 512-byte sectors, not {n}"),
                "--sector-size",
                "leave out --sector-size, or use --type luks2",
            ))
        }
        (_, Some(n)) if !(512..=4096).contains(&n) || !n.is_power_of_two() => {
            return Err(CliError::usage(
                format!("invalid --sector-size {n}"),
                "--sector-size",
                "use 512, 1024, 2048 or 4096",
            ))
        }
        (_, Some(n)) => n,
        (_, None) if is_blockdev => 512,
        (_, None) => 4096,
    };
    if a.label.is_some() && version == LuksVersion::V1 {
        return Err(CliError::usage(
            "LUKS1 has no label",
            "--label",
            "leave out --label, or use --type luks2",
        ));
    }
    common::refuse_if_open(&a.volume, false)?;
    if let Some(h) = &a.header {
        common::refuse_if_open(h, false)?;
    }

    // Confirm before touching anything that exists.
    let target = a.header.as_deref().unwrap_or(&a.volume);
    if exists(target) {
        let q = if has_luks_magic(target) {
            format!("WARNING!\n========\nThis will overwrite the existing LUKS header on {} irrevocably: its keyslots and data become unreadable.", target.display())
        } else {
            format!(
                "WARNING!\n========\nThis will overwrite data on {} irrevocably.",
                target.display()
            )
        };
        if has_luks_magic(target) || crate::passphrase::stdin_is_tty() {
            confirm(&q, &target.display().to_string(), a.batch_mode).map_err(|mut e| {
                if has_luks_magic(target) && e.what.starts_with("refused") {
                    e.code = Code::Busy;
                    e.what = "the volume already has a LUKS header; refusing to overwrite it without confirmation".into();
                }
                e
            })?;
        }
    }

    let created = prepare_file(&a.volume, a.size)?;
    let result = format_inner(
        &a,
        version,
        cipher,
        auth.as_ref(),
        hash,
        key_bytes,
        sector_size,
        &place,
    );
    if result.is_err() && created {
        let _ = std::fs::remove_file(&a.volume);
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn format_inner(
    a: &Args,
    version: LuksVersion,
    cipher: CipherSpec,
    auth: Option<&AuthSpec>,
    hash: HashAlg,
    key_bytes: usize,
    sector_size: u32,
    place: &str,
) -> CliResult {
    // Like cryptsetup, --offset 0 means the default offset, never data on
    // top of an attached header.
    let data_offset = match a.offset.filter(|&s| s != 0) {
        None => None,
        Some(s) => Some(s.checked_mul(512).ok_or_else(|| {
            CliError::usage(
                format!("--offset {s} sectors is too large"),
                "--offset",
                "give the data offset in 512-byte sectors, e.g. --offset 32768 for 16 MiB",
            )
        })?),
    };
    let vol_size = device_size(&a.volume)?;
    if a.header.is_none() {
        let min = data_offset.unwrap_or(match version {
            LuksVersion::V1 => 2 << 20,
            _ => 16 << 20,
        });
        if vol_size <= min {
            return Err(CliError::new(
                Code::NotFound,
                format!("the volume is too small ({vol_size} bytes): {} needs more than {min} bytes for its header", common::version_name(version)),
                place,
                "make it larger, e.g. --size 64M for a new file",
            ));
        }
    }
    let data_start = if a.header.is_some() {
        data_offset.unwrap_or(0)
    } else {
        0
    };
    if (vol_size - data_start.min(vol_size)) % sector_size as u64 != 0 {
        return Err(CliError::usage(
            format!(
                "the volume size {vol_size} is not a multiple of the sector size {sector_size}"
            ),
            place,
            "resize the volume to a multiple of 4096 bytes, or pick --sector-size 512",
        ));
    }

    let source = a.key.source();
    let prompt = format!("Enter passphrase for {}: ", a.volume.display());
    let pass = source.read(&prompt, true)?;
    let slot_kdf = a.kdf.make(version, hash, key_bytes)?;

    let mut vk = SecretBytes::new(key_bytes);
    cryptkeep_crypto::rand::fill_random(vk.as_mut_slice())
        .map_err(|e| from_crypto(&e, "volume key"))?;

    if let Some(h) = &a.header {
        if !h.exists() {
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(h)
                .map_err(|e| {
                    CliError::io("cannot create the header file", h.display().to_string(), &e)
                })?;
        }
    }
    let io = crate::isolate::header_io(common::open_header(&a.volume, a.header.as_deref(), true)?);
    // `..default()` keeps this compiling when the luks crate adds options.
    #[allow(clippy::needless_update)]
    let opts = FormatOptions {
        version,
        cipher,
        key_bytes,
        sector_size,
        hash,
        label: a.label.clone(),
        subsystem: a.subsystem.clone(),
        uuid: a.uuid.clone(),
        data_offset,
        detached_header: a.header.is_some(),
        auth: auth.map(|s| AuthFormat {
            encryption: s.encryption().into(),
            integrity: s.integrity().into(),
        }),
        // Like cryptsetup: a forced KDF cost (no benchmark) also gives the
        // digest the minimum 1000 iterations instead of a 125 ms benchmark.
        digest_iterations: a.kdf.force_iterations.map(|_| 1000),
        luks2_metadata_size: a.luks2_metadata_size,
        luks2_keyslots_size: a.luks2_keyslots_size,
        ..FormatOptions::default()
    };
    let luks = Luks::format(
        &io,
        &opts,
        vk.as_slice(),
        &pass,
        &slot_kdf,
        a.crypto_backend.backend(),
    )
    .map_err(|e| from_luks(e, place))?;
    io.sync_all()
        .map_err(|e| CliError::io("cannot sync the header", place, &e))?;
    if let Some(spec) = auth {
        if let Some(w) = spec.warning() {
            common::warn(w);
        }
        let seg = luks
            .authenticated_segment()
            .map_err(|e| from_luks(e, place))?;
        format_auth::write_integrity(
            &a.volume,
            seg.offset,
            spec,
            vk.as_slice(),
            sector_size,
            !a.integrity_no_wipe,
        )?;
    }
    if crate::passphrase::stderr_is_tty() {
        eprintln!(
            "cryptkeep: formatted {} as {} ({}{}, {}-bit key, {}-byte sectors), UUID {}",
            a.volume.display(),
            common::version_name(version),
            a.cipher,
            auth.map(|s| format!(" with {}", s.integrity()))
                .unwrap_or_default(),
            key_bytes * 8,
            sector_size,
            luks.uuid()
        );
    }
    Ok(())
}
