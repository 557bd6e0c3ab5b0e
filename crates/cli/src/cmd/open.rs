//! `cryptkeep open VOLUME NAME` (alias `luksOpen`): unlock and serve the
//! decrypted data as a FUSE file on a direct-I/O loop device; prints the
//! device. Runs a daemon unless `--foreground`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_luks::LuksVersion;

use super::common::{self, BackendArg, KeyFileArgs, TypeArg};
use super::serve::{self, OpenCtx, Payload};
use crate::daemon::{self, Forked};
use crate::exit::{from_luks, CliError, CliResult, Code};
use crate::interrupt::Signals;
use crate::state::{self, State};
use crate::volid::VolumeId;

/// Options of `open`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device, or an NBD export
    /// (nbd://HOST[:PORT]/EXPORT, nbd+unix:///EXPORT?socket=PATH; nbds://
    /// and nbds+unix:// with ?tls-certificates=DIR for TLS).
    pub volume: PathBuf,
    /// The name to open it under (state in $CRYPTKEEP_RUN_DIR/NAME).
    pub name: String,
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Try only this keyslot.
    #[arg(short = 'S', long = "key-slot", value_name = "N")]
    pub key_slot: Option<usize>,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Open read-only (FUSE file, loop device and mount).
    #[arg(short = 'r', long = "read-only")]
    pub read_only: bool,
    /// Pass discards down as hole punches in the image file.
    #[arg(long = "allow-discards")]
    pub allow_discards: bool,
    /// Authenticated volumes: write data and tags in place, without the
    /// integrity journal (faster; a crash can leave a sector that fails
    /// its tag, as with dm-integrity).
    #[arg(long = "integrity-no-journal")]
    pub integrity_no_journal: bool,
    /// Also mount the file system inside on DIR.
    #[arg(long, value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// Serve in the foreground until SIGINT/SIGTERM, then clean up.
    #[arg(long)]
    pub foreground: bool,
    /// Expected type: luks (either), luks1, luks2.
    #[arg(long = "type", value_enum)]
    pub kind: Option<TypeArg>,
    /// Crypto backend for the sector cipher.
    #[arg(long = "crypto-backend", value_enum, default_value = "accelerated")]
    pub crypto_backend: BackendArg,
    /// NBD volumes: how long the server may stay unreachable before I/O
    /// fails with EIO (the client reconnects and re-sends meanwhile).
    #[arg(long = "nbd-timeout", value_name = "SECONDS", default_value_t = crate::store::DEFAULT_NBD_TIMEOUT)]
    pub nbd_timeout: u64,
    /// Where the volume key lives: in a separate, sandboxed key process
    /// (process, the default) or in the I/O daemon itself (inline).
    #[arg(long, value_enum, default_value = "process")]
    pub keep: KeepArg,
    /// Serve the block file over FUSE-over-io_uring queues, one per CPU
    /// (Linux 6.14+, fuse module parameter enable_uring=Y), instead of
    /// /dev/fuse: random 4 KiB I/O through the keep about twice as fast on
    /// a machine that is not saturated, 1 MiB streams slower
    /// (docs/guide/performance.md).
    #[arg(long = "io-uring", conflicts_with = "no_loop")]
    pub io_uring: bool,
    #[command(flatten)]
    pub nbd: super::nbd_export::NbdArgs,
}

/// `--keep`: who holds the volume key.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeepArg {
    /// A separate key process (memfd_secret, seccomp); the I/O daemon never holds the key.
    Process,
    /// The key in the I/O daemon (mlocked, zeroized), for comparison and for
    /// systems without the isolation primitives.
    Inline,
}

fn already_open(st: &State) -> CliError {
    let dev = st
        .device
        .clone()
        .unwrap_or_else(|| "no loop device yet".into());
    CliError::new(
        Code::Busy,
        format!("volume {} is already open (device {dev})", st.name),
        st.volume.clone(),
        format!("close it first: cryptkeep close {}", st.name),
    )
}

/// Claims NAME under the run-directory lock, held from the checks to the
/// record: refuses a NAME in use or a volume (the same file or block
/// device, under any path) open under another name; clears stale records.
pub(crate) fn claim(st: &State) -> CliResult<()> {
    let _lock = state::lock()?;
    if let Some(old) = state::load(&st.name)? {
        if old.daemon_alive() {
            return Err(already_open(&old));
        }
        common::warn(&format!(
            "{} was left open by a daemon that died (pid {}); cleaning up",
            old.name, old.pid
        ));
        serve::clean_stale(&old);
    } else if state::name_dir(&st.name).exists() {
        let fuse = state::fuse_dir(&st.name);
        if cryptkeep_fuse::mountinfo::is_mount_point(&fuse) {
            let _ = crate::loopdev::fuse_unmount(&fuse, true);
        }
        state::remove(&st.name);
    }
    if let Some(id) = st.volume_id {
        for other in state::list()? {
            if other.same_volume(id) && other.daemon_alive() {
                return Err(open_elsewhere(st, &other));
            }
        }
    } else if crate::store::is_nbd(std::path::Path::new(&st.volume)) {
        // An NBD export is the same volume when its URI is.
        for other in state::list()? {
            if other.volume == st.volume && other.daemon_alive() {
                return Err(open_elsewhere(st, &other));
            }
        }
    }
    state::make_name_dir(&st.name)?;
    state::save(st)
}

/// The refusal of a volume already open as another NAME.
fn open_elsewhere(st: &State, other: &State) -> CliError {
    let path = if other.volume == st.volume {
        String::new()
    } else {
        format!(", from {}", other.volume)
    };
    CliError::new(
        Code::Busy,
        format!(
            "the volume is already open as {} (device {}{path})",
            other.name,
            other.device.as_deref().unwrap_or("not attached yet")
        ),
        st.volume.clone(),
        format!(
            "use that device, or close it first: cryptkeep close {}",
            other.name
        ),
    )
}

/// Runs `open`.
pub fn run(a: Args) -> CliResult {
    state::check_name(&a.name)?;
    state::ensure_run_dir()?;
    if let Some(old) = state::load(&a.name)? {
        if old.daemon_alive() {
            return Err(already_open(&old));
        }
    }
    if let Some(dir) = &a.mount {
        if !dir.is_dir() {
            return Err(CliError::new(
                Code::NotFound,
                "the mount directory does not exist",
                dir.display().to_string(),
                "create it first: mkdir -p DIR",
            ));
        }
    }
    if a.io_uring && !cryptkeep_fuse::uring::kernel_allows() {
        return Err(CliError::usage(
            "FUSE over io_uring is off in this kernel",
            cryptkeep_fuse::uring::ENABLE_PARAM,
            format!(
                "as root: echo Y > {} (Linux 6.14 or later), or open without --io-uring",
                cryptkeep_fuse::uring::ENABLE_PARAM
            ),
        ));
    }
    let nbd = a.nbd.opts(
        &a.name,
        a.read_only,
        a.allow_discards,
        a.keep == KeepArg::Inline,
    )?;
    crate::store::set_nbd_timeout(a.nbd_timeout);
    let place = common::place(&a.volume, a.header.as_deref());
    // The header is read and closed before the data device opens: an NBD
    // server may take one client at a time (qemu-nbd's default).
    let hdr = common::open_header(&a.volume, a.header.as_deref(), false)?;
    let luks = common::load(&hdr, &place)?;
    drop(hdr);
    // The data device must open too (read-write unless --read-only); what
    // it is decides whether it is open already (an NBD export: its URI).
    let data = crate::store::open(&a.volume, !a.read_only, "volume")?;
    let volume_id = match data.as_file() {
        Some(f) => Some(VolumeId::of_file(f).map_err(|e| {
            CliError::io(
                "cannot check the volume",
                a.volume.display().to_string(),
                &e,
            )
        })?),
        None => None,
    };
    let vol_size = data
        .size()
        .map_err(|e| CliError::io("cannot size the volume", a.volume.display().to_string(), &e))?;
    drop(data);
    match (a.kind, luks.version()) {
        (Some(TypeArg::Luks1), LuksVersion::V1)
        | (Some(TypeArg::Luks2), LuksVersion::V2)
        | (Some(TypeArg::Luks) | None, _) => {}
        (Some(t), v) => {
            let want = format!("{t:?}").to_uppercase();
            return Err(CliError::new(
                Code::NotFound,
                format!("the volume is {}, not {want}", common::version_name(v)),
                place,
                "leave out --type or use --type luks",
            ));
        }
    }
    common::check_data_clear_of_header(&luks, &a.volume, a.header.as_deref(), &place)?;
    let payload = if luks.is_authenticated() {
        if crate::store::is_nbd(&a.volume) {
            return Err(CliError::usage(
                "authenticated (--integrity) volumes cannot live on an NBD server yet",
                place,
                "copy the image to a local file (nbdcopy URI FILE) and open that",
            ));
        }
        if a.allow_discards {
            return Err(CliError::usage(
                "an authenticated volume cannot pass discards down (a discarded sector would fail its tag, as with dm-crypt)",
                "--allow-discards",
                "leave out --allow-discards",
            ));
        }
        Payload::Auth(super::open_auth::payload(
            &luks,
            &a.volume,
            a.read_only,
            a.integrity_no_journal,
            &place,
        )?)
    } else {
        if a.integrity_no_journal {
            return Err(CliError::usage(
                "--integrity-no-journal applies to authenticated volumes only",
                "--integrity-no-journal",
                "leave it out",
            ));
        }
        let seg = luks.segment().map_err(|e| from_luks(e, &place))?;
        let ss = seg.sector_size as u64;
        let data_size = match seg.size {
            Some(s) => s,
            None => vol_size.saturating_sub(seg.offset) / ss * ss,
        };
        if data_size == 0 || seg.offset.saturating_add(data_size) > vol_size {
            return Err(CliError::new(
                Code::Corrupt,
                format!("the data segment (offset {}, {} bytes) does not fit in the volume ({vol_size} bytes)", seg.offset, data_size),
                place,
                "the volume is truncated, or the header belongs to another device",
            ));
        }
        Payload::Plain { seg, data_size }
    };
    let (cipher, integrity, key_bits, sector_size, data_size) = match &payload {
        Payload::Plain { seg, data_size } => (
            seg.cipher.to_string(),
            None,
            seg.key_bytes * 8,
            seg.sector_size,
            *data_size,
        ),
        Payload::Auth(p) => (
            p.seg.encryption.clone(),
            Some(p.seg.integrity.clone()),
            p.seg.key_bytes * 8,
            p.seg.sector_size,
            p.data_size,
        ),
    };

    // With a process keep, the keep reads the passphrase itself.
    let pass = match a.keep {
        KeepArg::Inline => Some(a.key.source().read(
            &format!("Enter passphrase for {}: ", a.volume.display()),
            false,
        )?),
        KeepArg::Process => None,
    };

    let mut st = State {
        name: a.name.clone(),
        volume: state::canonical(&a.volume),
        header: a.header.as_deref().map(state::canonical),
        device: None,
        file: String::new(),
        kind: common::version_tag(luks.version()).into(),
        cipher,
        integrity,
        key_size: key_bits as u32,
        sector_size,
        read_only: a.read_only,
        pid: std::process::id() as i32,
        pid_start: crate::procid::own_start_time(),
        mountpoint: None,
        uuid: luks.uuid().to_string(),
        size: data_size,
        keep: None,
        volume_id,
        nbd: None,
    };
    // The keep is started by the process that serves (the daemon, or this
    // one with --foreground): it dies with that process, never before.
    let keep = match a.keep {
        KeepArg::Inline => {
            st.keep = Some(state::KeepState::inline());
            None
        }
        KeepArg::Process => Some(keep_args(
            &a,
            &st.name,
            matches!(payload, Payload::Plain { .. }) && nbd.is_none(),
        )),
    };
    // How long the keyslot KDF will take is said once the daemon is forked
    // (the probe may start threads); the progress line is drawn by the
    // waiting process, unless a keep asks for the passphrase meanwhile.
    let progress = Progress {
        show: pass.is_some() || a.key.key_file.is_some(),
    };
    claim(&st)?;
    let ctx = OpenCtx {
        st,
        volume: a.volume.clone(),
        header: a.header.clone(),
        luks,
        payload,
        pass,
        keep,
        key_slot: a.key_slot,
        allow_discards: a.allow_discards,
        backend: a.crypto_backend.backend(),
        nbd,
        io_uring: a.io_uring,
    };
    if a.foreground {
        foreground(ctx, a.mount.as_deref(), progress)
    } else {
        background(ctx, a.mount.as_deref(), progress)
    }
}

/// What `open` serves, once claimed: a LUKS volume, or an integrity
/// device. The daemon (or `--foreground`) calls [`Launch::start`].
pub(crate) trait Launch {
    /// The NAME it is opened under.
    fn name(&self) -> String;
    /// What error messages name.
    fn place(&self) -> String;
    /// Announces a long key derivation; the progress line (drawn when
    /// `show`) lasts as long as the returned guard.
    fn progress(&self, show: bool) -> Option<crate::kdf_time::Progress>;
    /// Whether the daemon derives a key the user should hear about.
    fn unlocks_in_daemon(&self) -> bool;
    /// Starts serving: unlock if needed, mount the block file, record the
    /// state with this process as the daemon.
    fn start(
        self,
        stdio: Option<daemon::Stdio3>,
        after_unlock: &dyn Fn() -> CliResult<()>,
    ) -> CliResult<serve::Serving>;
}

impl Launch for OpenCtx {
    fn name(&self) -> String {
        self.st.name.clone()
    }
    fn place(&self) -> String {
        self.volume.display().to_string()
    }
    fn progress(&self, show: bool) -> Option<crate::kdf_time::Progress> {
        crate::kdf_time::announce_unlock(&self.luks, self.key_slot, show)
    }
    fn unlocks_in_daemon(&self) -> bool {
        self.keep.is_none()
    }
    fn start(
        self,
        stdio: Option<daemon::Stdio3>,
        after_unlock: &dyn Fn() -> CliResult<()>,
    ) -> CliResult<serve::Serving> {
        serve::start(self, stdio, after_unlock)
    }
}

/// What to say while the key is derived.
pub(crate) struct Progress {
    /// Whether to draw the progress line (on a terminal).
    pub(crate) show: bool,
}

/// Serves `ctx` in this process until stopped, printing the loop device.
pub(crate) fn foreground<L: Launch>(
    ctx: L,
    mount: Option<&std::path::Path>,
    progress: Progress,
) -> CliResult {
    let name = ctx.name();
    daemon::block_signals();
    let drawing = ctx.progress(progress.show);
    let started = ctx.start(None, &|| Ok(()));
    drop(drawing);
    let mut s = match started {
        Ok(s) => s,
        Err(e) => {
            state::remove(&name);
            return Err(e);
        }
    };
    if let Err(e) = serve::attach_and_mount(&mut s.st, mount) {
        let fuse = state::fuse_dir(&name);
        // Unmounting FUSE ends the session; wait_stopped then cleans up.
        let _ = crate::loopdev::fuse_unmount(&fuse, true);
        serve::wait_stopped(s);
        return Err(e);
    }
    serve::print_served(&s.st);
    let _ = std::io::stdout().flush();
    serve::wait_stopped(s);
    Ok(())
}

/// Forks the daemon that serves `ctx`, waits until it serves, attaches
/// the loop device and prints it.
pub(crate) fn background<L: Launch>(
    ctx: L,
    mount: Option<&std::path::Path>,
    progress: Progress,
) -> CliResult {
    let name = ctx.name();
    let log = state::log_path(&name);
    // Blocked before the fork: a stop signal from here on is read by
    // whichever side waits, never fatal halfway.
    let signals = match Signals::block() {
        Ok(s) => s,
        Err(e) => {
            state::remove(&name);
            return Err(e);
        }
    };
    match daemon::fork() {
        Err(e) => {
            state::remove(&name);
            Err(e)
        }
        Ok(Forked::Child(n)) => {
            drop(signals);
            // The keep asks for the passphrase on our caller's terminal.
            let stdio = daemon::Stdio3::save();
            cryptkeep_keep::detach::detach(Some(&log));
            daemon::block_signals();
            let after_unlock = || {
                if n.outlive_parent() {
                    Ok(())
                } else {
                    Err(CliError::new(
                        Code::Daemon,
                        "open exited while the key was derived",
                        name.clone(),
                        "nothing was opened",
                    ))
                }
            };
            match ctx.start(stdio, &after_unlock) {
                Ok(s) => {
                    if !n.ready() {
                        // Nobody will attach the loop device: stop serving.
                        eprintln!("cryptkeep: open exited before the volume was ready");
                        let _ = crate::loopdev::fuse_unmount(&state::fuse_dir(&name), true);
                    }
                    serve::wait_stopped(s);
                    std::process::exit(0);
                }
                Err(e) => {
                    eprintln!("cryptkeep: {e}");
                    n.fail(&e);
                    std::process::exit(e.code.as_i32());
                }
            }
        }
        Ok(Forked::Parent { child, rx }) => {
            let place = ctx.place();
            if crate::passphrase::stderr_is_tty() && ctx.unlocks_in_daemon() {
                eprintln!("cryptkeep: unlocking {place} (the keyslot KDF runs in the daemon)...");
            }
            let drawing = ctx.progress(progress.show);
            drop(ctx);
            let ready = daemon::wait_ready(rx, &log, &signals, &place);
            drop(drawing);
            if let Err(e) = ready {
                daemon::stop(child);
                if let Ok(Some(st)) = state::load(&name) {
                    serve::clean_stale(&st);
                } else {
                    state::remove(&name);
                }
                return Err(e);
            }
            let mut st = state::load(&name)?.ok_or_else(|| {
                CliError::new(
                    Code::Daemon,
                    "the daemon left no state record",
                    state::name_dir(&name).display().to_string(),
                    "retry with --foreground to see errors",
                )
            })?;
            if let Err(e) = serve::attach_and_mount(&mut st, mount) {
                daemon::stop(child);
                serve::clean_stale(&st);
                return Err(e);
            }
            serve::print_served(&st);
            Ok(())
        }
    }
}

/// The arguments of `cryptkeep __keep volume` for `open` of NAME;
/// `large_requests`: the keep serves only the loop device's block file of a
/// plain volume, whose large requests ordinary workers serve better
/// (`--ordinary-workers`).
fn keep_args(a: &Args, name: &str, large_requests: bool) -> Vec<OsString> {
    let mut v: Vec<OsString> = vec!["__keep".into(), "volume".into(), a.volume.clone().into()];
    let mut opt = |k: &str, val: OsString| {
        v.push(k.into());
        v.push(val);
    };
    if let Some(h) = &a.header {
        opt("--header", h.clone().into());
    }
    if let Some(f) = &a.key.key_file {
        opt("--key-file", f.clone().into());
    }
    if let Some(n) = a.key.keyfile_size {
        opt("--keyfile-size", n.to_string().into());
    }
    opt("--keyfile-offset", a.key.keyfile_offset.to_string().into());
    if let Some(s) = a.key_slot {
        opt("--key-slot", s.to_string().into());
    }
    let backend = match a.crypto_backend {
        BackendArg::Accelerated => "accelerated",
        BackendArg::Portable => "portable",
    };
    opt("--crypto-backend", backend.into());
    opt("--log", state::log_path(name).into());
    if large_requests {
        v.push("--ordinary-workers".into());
    }
    v
}
