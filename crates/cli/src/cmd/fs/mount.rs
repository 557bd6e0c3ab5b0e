//! `cryptkeep fs mount CIPHERDIR MOUNTPOINT` (gocryptfs's default verb):
//! the plaintext view of a cipher directory (or with `--reverse` the
//! read-only ciphertext view of a plaintext directory) as a FUSE mount.
//!
//! In the background by default, like gocryptfs: the password is read
//! first, then the process forks; the daemon unlocks, mounts and reports
//! success or its error through a pipe, and the parent exits with that
//! result. The daemon serves until the mount is unmounted (`fs umount`,
//! `fusermount3 -u`) or it gets SIGTERM/SIGINT/SIGHUP, which unmount.
//! With `--keep` the daemon starts the keep, which reads the password.
//!
//! While the key is derived (scrypt, in the daemon or the keep), the
//! daemon dies with the parent, and a stop signal to the parent stops the
//! daemon and its keep, unmounts anything they got to mount and exits
//! 128 + the signal's number.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args as ClapArgs;
use cryptkeep_overlay::{CipherDir, Config, MasterKey};
use cryptkeep_overlayfs::{mount_overlay, mount_reverse, OverlayMount, OverlayOptions};

use super::common::{
    self, from_fuse, from_overlay, need_dir, PassArgs, CONF_NAME, CONF_REVERSE_NAME,
};
use crate::cmd::keep_start::{self, KeepGuard, KeepStarted};
use crate::daemon::{self, Forked, Stdio3};
use crate::exit::{CliError, CliResult, Code};
use crate::interrupt::{self, Signals};
use crate::passphrase::Passphrase;
use cryptkeep_keep::keep::ProcessKeep;
use cryptkeep_keep::overlay_keys::KeepKeyHolder;
use std::ffi::OsString;

/// Options of `fs mount`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The cipher directory (with --reverse: the plaintext directory).
    pub cipherdir: PathBuf,
    /// An existing directory to mount on.
    pub mountpoint: PathBuf,
    /// Mount read-only.
    #[arg(long)]
    pub ro: bool,
    /// Show the read-only encrypted view of a plaintext directory
    /// (created with `fs init --reverse`).
    #[arg(long)]
    pub reverse: bool,
    /// Unlock with the master key (hex, dashes allowed) instead of a password.
    #[arg(long, value_name = "HEX", conflicts_with_all = ["passfile", "extpass"])]
    pub masterkey: Option<String>,
    /// Keep the keys in the keep: a separate, sandboxed process reads the
    /// password, unwraps the master key and does all content and name
    /// crypto; this daemon never holds a key.
    #[arg(long, conflicts_with_all = ["masterkey", "reverse"])]
    pub keep: bool,
    /// Serve requests over FUSE-over-io_uring queues, one per CPU, each
    /// answered on the CPU that asked. The default when the kernel offers
    /// it (fuse module parameter enable_uring=Y, not with --reverse); with
    /// this flag the mount is refused when it does not.
    #[arg(long = "io-uring", conflicts_with_all = ["reverse", "no_io_uring"])]
    pub io_uring: bool,
    /// Read requests from /dev/fuse even when the kernel offers io_uring.
    #[arg(long = "no-io-uring")]
    pub no_io_uring: bool,
    /// Stay in the foreground until unmounted or interrupted.
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Let other users access the mount (needs user_allow_other for non-root).
    #[arg(long = "allow-other")]
    pub allow_other: bool,
    /// Read-ahead of the mount in KiB (set through
    /// /sys/class/bdi/*/read_ahead_kb when running as root; 0 keeps the
    /// kernel's 128).
    #[arg(long = "readahead", value_name = "KIB",
          default_value_t = cryptkeep_overlayfs::DEFAULT_READ_AHEAD_KIB,
          value_parser = clap::value_parser!(u32).range(0..=1 << 20))]
    pub read_ahead_kib: u32,
    /// How long the kernel may cache entries and attributes, in seconds.
    /// The mount assumes it is the only writer of CIPHERDIR, as gocryptfs
    /// does (gocryptfs keeps them 1 s); changes made behind its back show
    /// up within this time.
    #[arg(long = "cache-ttl", value_name = "SECS",
          default_value_t = cryptkeep_overlayfs::DEFAULT_CACHE_TTL.as_secs(),
          value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub cache_ttl: u64,
    /// CIPHERDIR is also changed behind the mount's back (another mount,
    /// a sync client): no entry or attribute caching and no kernel write
    /// cache (which keeps its own file sizes), so such changes show up at
    /// once (gocryptfs -sharedstorage). Small writes are slower.
    #[arg(long = "sharedstorage", conflicts_with = "cache_ttl")]
    pub shared_storage: bool,
    /// FUSE dispatch threads.
    #[arg(long, value_name = "N", default_value_t = 4,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub threads: u16,
    #[command(flatten)]
    pub pass: PassArgs,
}

/// What unlocks the directory, obtained before forking.
enum Secret {
    /// A secret this process derives the keys from.
    Here(Unlock),
    /// The arguments of a keep that will read the password, unlock the
    /// directory and hold its keys; started by the process that serves.
    Keep(Vec<OsString>),
}

/// A password or master key read by this process.
enum Unlock {
    Password(Passphrase),
    Key(MasterKey),
}

/// Everything the serving process needs.
struct MountCtx {
    cipherdir: PathBuf,
    mountpoint: PathBuf,
    reverse: bool,
    secret: Secret,
    opts: OverlayOptions,
}

/// Runs `fs mount`.
pub fn run(a: Args) -> CliResult {
    need_dir(&a.cipherdir, "cipher directory")?;
    need_dir(&a.mountpoint, "mount point")?;
    common::ensure_run_dir()?;
    let mountpoint = a.mountpoint.canonicalize().map_err(|e| {
        CliError::io(
            "cannot resolve the mount point",
            a.mountpoint.display().to_string(),
            &e,
        )
    })?;
    let cipherdir = a.cipherdir.canonicalize().map_err(|e| {
        CliError::io(
            "cannot resolve the cipher directory",
            a.cipherdir.display().to_string(),
            &e,
        )
    })?;
    if cryptkeep_fuse::mountinfo::is_mount_point(&mountpoint) {
        return Err(CliError::new(
            Code::Busy,
            "something is already mounted there",
            mountpoint.display().to_string(),
            "unmount it first: cryptkeep fs umount MOUNTPOINT",
        ));
    }
    if mountpoint.starts_with(&cipherdir) && !a.reverse {
        return Err(CliError::usage(
            "the mount point is inside the cipher directory",
            mountpoint.display().to_string(),
            "mount somewhere outside CIPHERDIR",
        ));
    }
    // Refuse a missing or unreadable config before asking for a password.
    let conf = cipherdir.join(if a.reverse {
        CONF_REVERSE_NAME
    } else {
        CONF_NAME
    });
    Config::load(&conf).map_err(|e| from_overlay(e, &conf))?;
    let secret = match &a.masterkey {
        Some(hex) => Secret::Here(Unlock::Key(
            MasterKey::from_hex(hex).map_err(|e| from_overlay(e, &conf))?,
        )),
        None if a.keep => Secret::Keep(keep_args(&cipherdir, &conf, &a.pass, &mountpoint)),
        None => Secret::Here(Unlock::Password(a.pass.read("Password: ", false)?)),
    };
    let ctx = MountCtx {
        cipherdir: cipherdir.clone(),
        mountpoint,
        reverse: a.reverse,
        secret,
        opts: OverlayOptions {
            read_only: a.ro || a.reverse,
            allow_other: a.allow_other,
            threads: a.threads as usize,
            read_ahead_kib: a.read_ahead_kib,
            writeback_cache: !a.shared_storage,
            cache_ttl: std::time::Duration::from_secs(if a.shared_storage {
                0
            } else {
                a.cache_ttl
            }),
            io_uring: a.io_uring
                || (!a.no_io_uring && !a.reverse && cryptkeep_fuse::uring::kernel_allows()),
            fs_name: cipherdir.display().to_string(),
        },
    };
    if a.foreground {
        foreground(ctx)
    } else {
        background(ctx)
    }
}

/// The keep's arguments for `--keep`: it reads the password itself (same
/// sources as without the keep) and unlocks before the mount is made.
fn keep_args(cipherdir: &Path, conf: &Path, pass: &PassArgs, mountpoint: &Path) -> Vec<OsString> {
    let log = keep_log(mountpoint);
    let mut args: Vec<OsString> = vec!["__keep".into(), "overlay".into(), cipherdir.into()];
    args.extend(["--config".into(), conf.into()]);
    if let Some(f) = &pass.passfile {
        args.extend(["--passfile".into(), f.into()]);
    }
    if let Some(c) = &pass.extpass {
        args.extend(["--extpass".into(), c.into()]);
    }
    args.extend(["--log".into(), log.into()]);
    args
}

/// Where the keep logs once it serves: the mount's log.
fn keep_log(mountpoint: &Path) -> PathBuf {
    common::ensure_run_dir()
        .ok()
        .flatten()
        .map(|_| common::log_path(mountpoint))
        .unwrap_or_else(|| PathBuf::from("/dev/null"))
}

/// Connects to the keep and opens the directory with its keys there.
fn open_held(place: &Path, k: KeepStarted) -> CliResult<(CipherDir, KeepGuard)> {
    let guard = KeepGuard::new(&k)?;
    let conf = place.join(CONF_NAME);
    let config = Config::load(&conf).map_err(|e| from_overlay(e, &conf))?;
    let keep_err = |e: cryptkeep_keep::Error| {
        CliError::new(
            Code::Daemon,
            format!("cannot reach the keep: {e}"),
            "keep",
            "mount again",
        )
    };
    let keep = ProcessKeep::connect(k.arena, k.control, k.pid).map_err(keep_err)?;
    let holder = KeepKeyHolder::new(Arc::new(keep), config.content_alg()).map_err(keep_err)?;
    eprintln!(
        "cryptkeep: keys held by the keep (pid {}, {}; {})",
        k.pid, k.state.secret_mem, k.state.sandbox
    );
    let cd = CipherDir::with_key_holder(place, config, Arc::new(holder))
        .map_err(|e| from_overlay(e, place))?;
    Ok((cd, guard))
}

/// An unlocked directory, and the keep holding its keys (if any).
type Unlocked = (CipherDir, Option<KeepGuard>);

/// Unlocks: the key derivation runs here (on a helper thread, so that a
/// stop signal ends it) or in a keep started now with `stdio` as its
/// standard streams. A stop signal gives `interrupted` (exit 128 + N).
fn unlock(ctx: &mut MountCtx, stdio: Option<Stdio3>) -> CliResult<Unlocked> {
    let place = ctx.cipherdir.clone();
    let shown = place.display().to_string();
    let secret = std::mem::replace(&mut ctx.secret, Secret::Keep(Vec::new()));
    match secret {
        Secret::Keep(args) => {
            let log = keep_log(&ctx.mountpoint);
            let k = keep_start::spawn_and_wait(args, &log, &shown, stdio)?;
            let (cd, guard) = open_held(&place, k)?;
            Ok((cd, Some(guard)))
        }
        Secret::Here(u) => {
            let reverse = ctx.reverse;
            let cd = interrupt::run(&shown, move || open_here(&place, u, reverse))??;
            Ok((cd, None))
        }
    }
}

/// Mounts the unlocked directory.
fn mount(cd: CipherDir, ctx: &MountCtx) -> CliResult<OverlayMount> {
    let cd = Arc::new(cd);
    let m = if ctx.reverse {
        mount_reverse(cd, &ctx.mountpoint, &ctx.opts)
    } else {
        mount_overlay(cd, &ctx.mountpoint, &ctx.opts)
    };
    m.map_err(|e| from_fuse(e, &ctx.mountpoint))
}

/// Derives the keys in this process from a password or the master key.
fn open_here(place: &Path, secret: Unlock, reverse: bool) -> CliResult<CipherDir> {
    let cd = match (&secret, reverse) {
        (Unlock::Password(pw), false) => CipherDir::open(place, pw),
        (Unlock::Password(pw), true) => CipherDir::open_reverse(place, pw),
        (Unlock::Key(mk), false) => CipherDir::open_with_master_key(place, mk),
        (Unlock::Key(mk), true) => {
            let conf = place.join(CONF_REVERSE_NAME);
            Config::load(&conf).and_then(|c| {
                CipherDir::from_parts(place, c, mk, cryptkeep_crypto::Backend::default())
            })
        }
    }
    .map_err(|e| from_overlay(e, place))?;
    drop(secret);
    Ok(cd)
}

/// Serves until unmounted; a signal unmounts. Removes the pid file at the
/// end and lets the keep, if any, wipe its keys and exit.
fn serve(m: OverlayMount, pid_file: Option<PathBuf>, keep: Option<KeepGuard>) {
    let mp = m.mountpoint().to_path_buf();
    let watcher = mp.clone();
    let _ = std::thread::Builder::new()
        .name("ck-fs-signals".into())
        .spawn(move || loop {
            let sig = daemon::wait_signal();
            eprintln!("cryptkeep: signal {sig}: unmounting {}", watcher.display());
            match unmount(&watcher) {
                Ok(()) => break,
                Err(e) => eprintln!("cryptkeep: {e}"),
            }
        });
    m.wait();
    if let Some(p) = pid_file {
        let _ = std::fs::remove_file(p);
    }
    if let Some(k) = keep {
        k.close_and_wait();
    }
    eprintln!("cryptkeep: {} unmounted", mp.display());
}

/// Records the daemon's pid for `fs umount` (best effort).
fn write_pid_file(mountpoint: &Path) -> Option<PathBuf> {
    use std::io::Write;
    common::ensure_run_dir().ok()??;
    let p = common::pid_path(mountpoint);
    crate::rundir::create(&p)
        .and_then(|mut f| f.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .ok()?;
    Some(p)
}

fn foreground(mut ctx: MountCtx) -> CliResult {
    daemon::block_signals();
    daemon::harden();
    let (cd, keep) = unlock(&mut ctx, None)?;
    let m = mount(cd, &ctx)?;
    let pid = write_pid_file(m.mountpoint());
    eprintln!("Filesystem mounted and ready.");
    serve(m, pid, keep);
    Ok(())
}

fn background(mut ctx: MountCtx) -> CliResult {
    let log = common::ensure_run_dir()
        .ok()
        .flatten()
        .map(|_| common::log_path(&ctx.mountpoint))
        .unwrap_or_else(|| PathBuf::from("/dev/null"));
    // Blocked before the fork: a stop signal from here on is read by
    // whichever side waits, never fatal halfway.
    let signals = Signals::block()?;
    match daemon::fork()? {
        Forked::Child(n) => {
            drop(signals);
            // The keep asks for the password on our caller's terminal.
            let stdio = Stdio3::save();
            cryptkeep_keep::detach::detach(Some(&log));
            daemon::block_signals();
            daemon::harden();
            let unlocked = unlock(&mut ctx, stdio).and_then(|u| {
                if n.outlive_parent() {
                    Ok(u)
                } else {
                    Err(CliError::new(
                        Code::Daemon,
                        "fs mount exited while the key was derived",
                        ctx.cipherdir.display().to_string(),
                        "nothing was mounted",
                    ))
                }
            });
            match unlocked.and_then(|(cd, keep)| Ok((mount(cd, &ctx)?, keep))) {
                Ok((m, keep)) => {
                    let pid = write_pid_file(m.mountpoint());
                    if !n.ready() {
                        eprintln!("cryptkeep: fs mount exited before the mount was ready");
                        let _ = unmount(m.mountpoint());
                    }
                    serve(m, pid, keep);
                    std::process::exit(0);
                }
                Err(e) => {
                    eprintln!("cryptkeep: {e}");
                    n.fail(&e);
                    std::process::exit(e.code.as_i32());
                }
            }
        }
        Forked::Parent { child, rx } => {
            let mountpoint = ctx.mountpoint.clone();
            let place = ctx.cipherdir.display().to_string();
            drop(ctx);
            if let Err(e) = daemon::wait_ready(rx, &log, &signals, &place) {
                daemon::stop(child);
                // A daemon stopped right after it mounted unmounts on
                // SIGTERM; one that had to be killed leaves a dead mount.
                if cryptkeep_fuse::mountinfo::is_mount_point(&mountpoint) {
                    let _ = unmount(&mountpoint);
                }
                return Err(e);
            }
            println!("Filesystem mounted and ready.");
            Ok(())
        }
    }
}

/// Unmounts MOUNTPOINT, retried for two seconds while busy.
pub fn unmount(mp: &Path) -> CliResult {
    cryptkeep_fuse::mountinfo::unmount_when_idle(mp, std::time::Duration::from_secs(2)).map_err(
        |e| {
            CliError::new(
                Code::Busy,
                format!("unmounting failed: {e}"),
                mp.display().to_string(),
                "close the files and shells using it (see: fuser -m MOUNTPOINT), then retry",
            )
        },
    )
}
