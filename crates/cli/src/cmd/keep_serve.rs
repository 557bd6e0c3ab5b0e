//! `cryptkeep __keep volume|overlay|runtime` (hidden): the keep process
//! itself. Started by `open` and `fs mount --keep` (and by library users for
//! `runtime`) with its control socket on descriptor 3. For a volume it reads
//! the passphrase or key file itself, runs the keyslot KDF, checks the
//! digest, keeps the volume key in `memfd_secret` pages and serves sector
//! crypto; for an overlay it unwraps the gocryptfs master key, derives the
//! content and name keys into its secret heap and serves block and name
//! crypto; see docs/threat-model.md.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args as ClapArgs, Subcommand};
use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};
use cryptkeep_keep::handler::KeepHandler;
use cryptkeep_keep::keep::{send_failed, Failure};
use cryptkeep_keep::ops::dispatch::Ops;
use cryptkeep_keep::ops::seal::SealKey;
use cryptkeep_keep::secret_heap;
use cryptkeep_keep::secret_mem::{SecretKind, SecretMem};
use cryptkeep_keep::service::{self, ServiceOptions};
use cryptkeep_keep::spawn::CONTROL_FD;
use cryptkeep_volume::InlineCrypt;

use super::common::{self, BackendArg, KeyFileArgs};
use super::fs::common::{from_overlay, PassArgs};
use crate::daemon;
use crate::exit::{from_crypto, from_luks, CliError, CliResult, Code};
use cryptkeep_overlay::{Config, HeldKeys};

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
}

/// Options of `__keep runtime`.
#[derive(ClapArgs, Debug)]
pub struct RuntimeArgs {
    /// Append the keep's log to FILE.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Also serve sector crypto with this cipher and a random key made in
    /// the keep (for benchmarks).
    #[arg(long = "sector-cipher", value_name = "SPEC")]
    pub sector_cipher: Option<String>,
    /// Key size in bits for --sector-cipher.
    #[arg(long = "key-size", value_name = "BITS", default_value_t = 512)]
    pub key_size: usize,
    /// Sector size for --sector-cipher.
    #[arg(long = "sector-size", default_value_t = 4096)]
    pub sector_size: usize,
}

/// Runs the keep; never returns.
pub fn run(cmd: KeepCmd) -> ! {
    // Before AWS-LC allocates anything: its heap follows ours into secret
    // memory once the secret heap is active.
    let lc_hooked = secret_heap::install_aws_lc_hooks();
    // Until then (and for blocks from before then), what the ordinary heap
    // frees or outgrows is wiped first.
    secret_heap::wipe_ordinary_frees();
    let control = match take_control_fd() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("cryptkeep: {e}");
            std::process::exit(e.code.as_i32());
        }
    };
    if let Err(e) = cryptkeep_keep::sandbox::harden() {
        fail(
            &control,
            &CliError::new(Code::Daemon, e.to_string(), "keep", "report this bug"),
        );
    }
    let (handler, secret, mut facts, log) = match cmd {
        KeepCmd::Volume(a) => match unlock(&a) {
            Ok((h, s, f)) => (h, Some(s), f, a.log),
            Err(e) => fail(&control, &e),
        },
        KeepCmd::Overlay(a) => match unlock_overlay(&a) {
            Ok((h, s, f)) => (h, s, f, a.log),
            Err(e) => fail(&control, &e),
        },
        KeepCmd::Runtime(a) => match runtime(&a) {
            Ok((h, s, f)) => (h, s, f, a.log),
            Err(e) => fail(&control, &e),
        },
    };
    // Reading the passphrase, the KDF, unwrapping and key setup left key
    // bytes in dead stack frames below this one and round keys in vector
    // registers: wipe every frame they used, down to the deepest.
    cryptkeep_keep::wipe::wipe_stack();
    facts.push((
        "heap",
        match (secret_heap::is_active(), lc_hooked) {
            (true, true) => "memfd_secret (Rust and AWS-LC)".to_string(),
            (true, false) => "memfd_secret (Rust only)".to_string(),
            _ => "ordinary (mlocked)".to_string(),
        },
    ));
    if let Some(log) = &log {
        daemon::detach_stdio(log);
    } else {
        // SAFETY: setsid has no memory-safety preconditions.
        unsafe { libc::setsid() };
    }
    let summary: Vec<String> = facts.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    if log.is_some() {
        eprintln!(
            "cryptkeep keep: pid {}; {}",
            std::process::id(),
            summary.join("; ")
        );
    }
    if let Err(e) = daemon::lock_memory() {
        eprintln!("cryptkeep keep: warning: cannot lock memory (mlockall): {e}");
    }
    let opts = ServiceOptions {
        verbose: log.is_some(),
        facts,
        ..ServiceOptions::default()
    };
    let code = match service::run(control, Arc::new(handler), opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("cryptkeep keep: {e}");
            Code::Daemon.as_i32()
        }
    };
    drop(secret);
    std::process::exit(code);
}

/// Descriptor 3, checked to be a socket.
fn take_control_fd() -> CliResult<OwnedFd> {
    // SAFETY: fstat on a descriptor number only reads its metadata.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid out-pointer.
    let ok = unsafe { libc::fstat(CONTROL_FD, &mut st) } == 0;
    if !ok || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(CliError::new(
            Code::Usage,
            "the keep needs its control socket on descriptor 3",
            "__keep",
            "this subcommand is started by cryptkeep open; do not run it by hand",
        ));
    }
    // SAFETY: descriptor 3 is an open socket that nothing else in this
    // process owns (it was placed there by the spawner).
    Ok(unsafe { OwnedFd::from_raw_fd(CONTROL_FD) })
}

fn fail(control: &OwnedFd, e: &CliError) -> ! {
    let f = Failure {
        code: e.code.as_i32(),
        what: e.what.clone(),
        place: e.place.clone(),
        hint: e.hint.clone(),
    };
    let _ = send_failed(control.as_fd(), &f);
    std::process::exit(e.code.as_i32());
}

/// Facts for the READY message and the log.
type Facts = Vec<(&'static str, String)>;
type Unlocked = (KeepHandler, SecretMem, Facts);
type Prepared = (KeepHandler, Option<SecretMem>, Facts);

/// A keep without a volume: a random sealing key, and a random sector key
/// when `--sector-cipher` asks for one.
// Not inlined: its frames must lie below run()'s, where wipe_stack wipes.
#[inline(never)]
fn runtime(a: &RuntimeArgs) -> CliResult<Prepared> {
    let mut facts = vec![("keep", "runtime".to_string())];
    let Some(spec) = &a.sector_cipher else {
        let h = KeepHandler::new(None, Ops::new(SealKey::random()));
        return Ok((h, None, facts));
    };
    let spec = CipherSpec::parse(spec).map_err(|e| from_crypto(&e, "--sector-cipher"))?;
    activate_heap();
    let mut secret = new_secret(a.key_size / 8)?;
    cryptkeep_crypto::rand::fill_random(secret.as_mut_slice())
        .map_err(|e| from_crypto(&e, "keep"))?;
    facts.push(("secret_mem", secret_kind(&secret).to_string()));
    let cipher = new_sector_cipher(&spec, secret.as_slice(), Backend::Accelerated)
        .map_err(|e| from_crypto(&e, "--sector-cipher"))?;
    let sectors = InlineCrypt::new(cipher, a.sector_size, 0);
    let h = KeepHandler::new(Some(sectors), Ops::new(SealKey::random()));
    Ok((h, Some(secret), facts))
}

/// From here on every allocation of the keep is in secret memory.
fn activate_heap() {
    if let Err(e) = secret_heap::activate() {
        eprintln!(
            "cryptkeep keep: warning: no secret heap ({e}); cipher state stays in mlocked memory"
        );
    }
}

fn new_secret(len: usize) -> CliResult<SecretMem> {
    SecretMem::new(len).map_err(|e| {
        CliError::new(
            Code::NoMemory,
            e.to_string(),
            "keep",
            "raise RLIMIT_MEMLOCK",
        )
    })
}

fn secret_kind(s: &SecretMem) -> &'static str {
    match s.kind() {
        SecretKind::MemfdSecret => "memfd_secret",
        SecretKind::LockedFallback => {
            eprintln!(
                "cryptkeep keep: warning: memfd_secret is not available; the key is in mlocked, \
                 non-dumpable memory instead (root can read it through /proc/PID/mem)"
            );
            "mlock+MADV_DONTDUMP (memfd_secret unavailable)"
        }
    }
}

/// Reads the passphrase, opens a keyslot and builds the handler with the
/// volume's sector cipher; the volume key ends up in secret memory.
// Not inlined: its frames must lie below run()'s, where wipe_stack wipes.
#[inline(never)]
fn unlock(a: &VolumeArgs) -> CliResult<Unlocked> {
    let place = common::place(&a.volume, a.header.as_deref());
    let hdr = common::open_header(&a.volume, a.header.as_deref(), false)?;
    let luks = common::load(&hdr, &place)?;
    let seg = luks.segment().map_err(|e| from_luks(e, &place))?;
    let backend = a.crypto_backend.backend();
    let pass = a.key.source().read(
        &format!("Enter passphrase for {}: ", a.volume.display()),
        false,
    )?;
    let (slot, vk) = luks
        .unlock(&hdr, &pass, a.key_slot, backend)
        .map_err(|e| from_luks(e, &place))?;
    drop(pass);
    drop(hdr);
    activate_heap();
    let mut secret = new_secret(vk.len())?;
    secret.as_mut_slice().copy_from_slice(vk.as_slice());
    drop(vk);
    let kind = secret_kind(&secret);
    let cipher = new_sector_cipher(&seg.cipher, secret.as_slice(), backend)
        .map_err(|e| from_crypto(&e, &place))?;
    let sectors = InlineCrypt::new(cipher, seg.sector_size as usize, seg.iv_tweak);
    let ops = Ops::new(SealKey::derive(secret.as_slice(), luks.uuid().as_bytes()));
    let mut facts = vec![
        ("keep", "volume".to_string()),
        ("keyslot", slot.to_string()),
        ("secret_mem", kind.to_string()),
    ];
    facts.push(("unlocked", format!("keyslot {slot} ({place})")));
    Ok((KeepHandler::new(Some(sectors), ops), secret, facts))
}

/// Reads the password, unwraps the overlay's master key and derives the
/// content and name keys in the secret heap; the master key is wiped.
// Not inlined: its frames must lie below run()'s, where wipe_stack wipes.
#[inline(never)]
fn unlock_overlay(a: &OverlayArgs) -> CliResult<Prepared> {
    let conf = a.config.as_path();
    let cfg = Config::load(conf).map_err(|e| from_overlay(e, conf))?;
    let pw = a.pass.read("Password: ", false)?;
    let mk = cfg.unlock(&pw, conf).map_err(|e| from_overlay(e, conf))?;
    drop(pw);
    activate_heap();
    let keys = HeldKeys::derive(&mk, &cfg, Backend::Accelerated)
        .map_err(|e| from_overlay(e, &a.cipherdir))?;
    drop(mk);
    let heap = if secret_heap::is_active() {
        "memfd_secret"
    } else {
        "mlock (memfd_secret unavailable)"
    };
    let facts = vec![
        ("keep", "overlay".to_string()),
        ("secret_mem", heap.to_string()),
        ("unlocked", a.cipherdir.display().to_string()),
    ];
    let h = KeepHandler::new(None, Ops::new(SealKey::random())).with_overlay(keys);
    Ok((h, None, facts))
}
