//! `cryptkeep __keep volume|overlay|runtime|scratch-volume` (hidden): the
//! keep process itself, a host of the keep crate's servers
//! (`cryptkeep_keep::server`). Started by `open` and `fs mount --keep` (and
//! by `bench keep`) with its control socket on descriptor 3. What is the
//! CLI's own is here: reading the passphrase or key file, opening the LUKS
//! keyslot, unwrapping the gocryptfs master key, and exit codes; the
//! library does the rest (secret heap, stack wipe, sandbox, serving only
//! the kind's operations); see docs/threat-model.md.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Subcommand};
use cryptkeep_crypto::sector_aead::AuthSpec;
use cryptkeep_crypto::{Backend, CipherSpec};
use cryptkeep_keep::keep::Failure;
use cryptkeep_keep::server::{
    self, AuthVolumeKey, OverlayKey, ServerConfig, UnlockedVolume, VolumeKey,
};

use super::common::{self, BackendArg, KeyFileArgs};
use super::fs::common::{from_overlay, PassArgs};
use crate::exit::{from_crypto, from_luks, CliError, CliResult, Code};
use cryptkeep_overlay::Config;

/// What kind of keep to run.
#[derive(Subcommand, Debug)]
pub enum KeepCmd {
    /// Unlock a LUKS volume and serve its sector crypto.
    Volume(VolumeArgs),
    /// Unlock a gocryptfs-format cipher directory and serve its content and
    /// name crypto.
    Overlay(OverlayArgs),
    /// A keep with no volume: seal/unseal, SHA-256, AES-GCM, RSA (library use, bench).
    Runtime(RuntimeArgs),
    /// A volume keep with a random key made in the keep: sector crypto
    /// only, for benchmarks and tests.
    ScratchVolume(ScratchArgs),
}

/// Options of `__keep overlay`.
#[derive(ClapArgs, Debug)]
pub struct OverlayArgs {
    /// The cipher directory (for messages).
    pub cipherdir: PathBuf,
    /// Its `gocryptfs.conf`.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    #[command(flatten)]
    pub pass: PassArgs,
    /// Append the keep's log to FILE once unlocked.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

/// Options of `__keep volume`.
#[derive(ClapArgs, Debug)]
pub struct VolumeArgs {
    /// The image file or block device.
    pub volume: PathBuf,
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Try only this keyslot.
    #[arg(short = 'S', long = "key-slot", value_name = "N")]
    pub key_slot: Option<usize>,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Crypto backend for the sector cipher.
    #[arg(long = "crypto-backend", value_enum, default_value = "accelerated")]
    pub crypto_backend: BackendArg,
    /// Append the keep's log to FILE once unlocked.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    #[command(flatten)]
    pub workers: WorkerArgs,
}

/// How a volume keep's workers are scheduled.
#[derive(ClapArgs, Debug)]
pub struct WorkerArgs {
    /// Keep the workers under the ordinary scheduler unless
    /// `CRYPTKEEP_KEEP_RTPRIO` says otherwise: the I/O comes in large
    /// requests (a plain volume's loop device), which ordinary workers
    /// serve better on a busy machine.
    #[arg(long = "ordinary-workers")]
    pub ordinary: bool,
}

/// Options of `__keep runtime`.
#[derive(ClapArgs, Debug)]
pub struct RuntimeArgs {
    /// Append the keep's log to FILE.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

/// Options of `__keep scratch-volume`.
#[derive(ClapArgs, Debug)]
pub struct ScratchArgs {
    /// Append the keep's log to FILE.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// The sector cipher.
    #[arg(long, value_name = "SPEC", default_value = "aes-xts-plain64")]
    pub cipher: String,
    /// Key size in bits.
    #[arg(long = "key-size", value_name = "BITS", default_value_t = 512)]
    pub key_size: usize,
    /// Sector size.
    #[arg(long = "sector-size", default_value_t = 4096)]
    pub sector_size: usize,
    /// An authenticated volume's keep instead: the LUKS2 `integrity.type`
    /// (`aead`, `poly1305`, `hmac(sha256)`, ...) to use with `--cipher`
    /// as the segment's `encryption` (e.g. `aes-gcm-random`); the key has
    /// the mode's default size.
    #[arg(long, value_name = "TYPE")]
    pub integrity: Option<String>,
    #[command(flatten)]
    pub workers: WorkerArgs,
}

/// Runs the keep; never returns.
pub fn run(cmd: KeepCmd) -> ! {
    let cfg = |log: Option<PathBuf>, ordinary_workers: bool| ServerConfig {
        log,
        ordinary_workers,
        ..ServerConfig::default()
    };
    let r = match cmd {
        KeepCmd::Volume(a) => {
            server::run_volume(cfg(a.log.clone(), a.workers.ordinary), || unlock(&a))
        }
        KeepCmd::Overlay(a) => {
            server::run_overlay(cfg(a.log.clone(), false), || unlock_overlay(&a))
        }
        KeepCmd::Runtime(a) => server::run_runtime(cfg(a.log, false)),
        KeepCmd::ScratchVolume(a) => {
            server::run_volume(cfg(a.log.clone(), a.workers.ordinary), || scratch(&a))
        }
    };
    // A failure went to the spawner, which reports it.
    std::process::exit(r.map_or_else(|f| f.code, |()| 0))
}

fn failure(e: CliError) -> Failure {
    Failure {
        code: e.code.as_i32(),
        what: e.what,
        place: e.place,
        hint: e.hint,
    }
}

/// A random key for `__keep scratch-volume`.
fn scratch(a: &ScratchArgs) -> Result<UnlockedVolume, Failure> {
    if let Some(integrity) = &a.integrity {
        let spec = AuthSpec::parse(&a.cipher, integrity).map_err(|e| {
            failure(CliError::new(
                Code::Usage,
                e.to_string(),
                "--integrity",
                "use a supported authenticated mode",
            ))
        })?;
        return AuthVolumeKey::random(spec, a.sector_size).map(Into::into);
    }
    let spec = CipherSpec::parse(&a.cipher).map_err(|e| failure(from_crypto(&e, "--cipher")))?;
    VolumeKey::random(spec, a.key_size, a.sector_size).map(Into::into)
}

/// Reads the passphrase and opens a keyslot; the keep takes the volume key
/// from here into secret memory. An authenticated LUKS2 volume
/// (`--integrity`) gives an [`AuthVolumeKey`], every other volume a
/// [`VolumeKey`].
fn unlock(a: &VolumeArgs) -> Result<UnlockedVolume, Failure> {
    unlock_luks(a).map_err(failure)
}

/// What the keep will do with the key once the keyslot gave it.
enum Mode {
    Plain(cryptkeep_luks::Segment),
    Authenticated(AuthSpec, usize),
}

fn unlock_luks(a: &VolumeArgs) -> CliResult<UnlockedVolume> {
    let place = common::place(&a.volume, a.header.as_deref());
    let hdr = common::open_header(&a.volume, a.header.as_deref(), false)?;
    let luks = common::load(&hdr, &place)?;
    // Checked before the passphrase is asked for: a volume the keep cannot
    // serve fails at once.
    let mode = if luks.is_authenticated() {
        let seg = luks
            .authenticated_segment()
            .map_err(|e| from_luks(e, &place))?;
        let spec = auth_spec(&seg, &place)?;
        Mode::Authenticated(spec, seg.sector_size as usize)
    } else {
        Mode::Plain(luks.segment().map_err(|e| from_luks(e, &place))?)
    };
    let backend = a.crypto_backend.backend();
    let pass = a.key.source().read(
        &format!("Enter passphrase for {}: ", a.volume.display()),
        false,
    )?;
    let (slot, key) = luks
        .unlock(&hdr, &pass, a.key_slot, backend)
        .map_err(|e| from_luks(e, &place))?;
    drop(pass);
    drop(hdr);
    let facts = vec![
        ("keyslot", slot.to_string()),
        ("unlocked", format!("keyslot {slot} ({place})")),
    ];
    Ok(match mode {
        Mode::Plain(seg) => UnlockedVolume::Plain(VolumeKey {
            key,
            cipher: seg.cipher,
            sector_size: seg.sector_size as usize,
            iv_tweak: seg.iv_tweak,
            backend,
            facts,
            place,
        }),
        Mode::Authenticated(spec, sector_size) => UnlockedVolume::Authenticated(AuthVolumeKey {
            key,
            spec,
            sector_size,
            facts,
            place,
        }),
    })
}

/// The sector AEAD of an authenticated segment, if the keep can serve it.
fn auth_spec(seg: &cryptkeep_luks::AuthSegment, place: &str) -> CliResult<AuthSpec> {
    let spec = AuthSpec::parse(&seg.encryption, &seg.integrity).map_err(|e| {
        CliError::new(
            Code::Usage,
            e.to_string(),
            place,
            "this authenticated mode is not supported; open the volume with cryptsetup",
        )
    })?;
    // The AEAD keys its tag MAC with the mode's default MAC key size and
    // binds the sector number without an offset.
    if seg.integrity_key_bytes != spec.mac_key_bytes() {
        return Err(CliError::new(
            Code::Usage,
            format!(
                "integrity key of {} bytes for {} (supported: {})",
                seg.integrity_key_bytes,
                seg.integrity,
                spec.mac_key_bytes()
            ),
            place,
            "open the volume with cryptsetup",
        ));
    }
    if seg.iv_tweak != 0 {
        return Err(CliError::new(
            Code::Usage,
            format!(
                "authenticated segment with an IV offset of {} sectors",
                seg.iv_tweak
            ),
            place,
            "open the volume with cryptsetup",
        ));
    }
    Ok(spec)
}

/// Reads the password and unwraps the overlay's master key; the keep
/// derives the content and name keys from it and wipes it.
fn unlock_overlay(a: &OverlayArgs) -> Result<OverlayKey, Failure> {
    let conf = a.config.as_path();
    let config = Config::load(conf).map_err(|e| failure(from_overlay(e, conf)))?;
    let pw = a.pass.read("Password: ", false).map_err(failure)?;
    let master_key = config
        .unlock(&pw, conf)
        .map_err(|e| failure(from_overlay(e, conf)))?;
    drop(pw);
    Ok(OverlayKey {
        master_key,
        config,
        backend: Backend::Accelerated,
        place: a.cipherdir.display().to_string(),
        facts: vec![("unlocked", a.cipherdir.display().to_string())],
    })
}
