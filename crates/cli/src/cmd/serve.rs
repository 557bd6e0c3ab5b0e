//! Serving an unlocked volume: unlock (KDF), the sector engine, the FUSE
//! block file, the loop device and the optional mount; and the teardown
//! that `close`, signals and failed opens share.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cryptkeep_crypto::{new_sector_cipher, Backend};
use cryptkeep_fuse::mountinfo;
use cryptkeep_fuse::{
    block_file_path, mount_block_store, BlockFileMount, BlockFileOptions, BlockFileTuning,
    BlockStore,
};
use cryptkeep_luks::{Luks, Segment};
use cryptkeep_volume::{AuthCrypt, Engine, InlineCrypt, SectorCrypt};

use super::common;
use super::keep_start::{self, KeepGuard};
use crate::daemon::{self, Stdio3};
use crate::exit::{from_crypto, from_luks, CliError, CliResult, Code};
use crate::interrupt;
use crate::loopdev;
use crate::passphrase::Passphrase;
use crate::state::{self, State};
use cryptkeep_keep::crypt::KeepCrypt;
use cryptkeep_keep::keep::ProcessKeep;

/// Everything `open` prepared before unlocking.
pub struct OpenCtx {
    /// The state record written at claim time (pid = the opener).
    pub st: State,
    /// The volume path as given.
    pub volume: PathBuf,
    /// `--header`.
    pub header: Option<PathBuf>,
    /// The loaded header.
    pub luks: Luks,
    /// What the volume's data segment is.
    pub payload: Payload,
    /// The passphrase (wiped on drop), for `--keep inline`.
    pub pass: Option<Passphrase>,
    /// The arguments of the keep that will hold the key, for `--keep
    /// process` (started by [`start`], in the process that serves).
    pub keep: Option<Vec<OsString>>,
    /// `--key-slot`.
    pub key_slot: Option<usize>,
    /// `--allow-discards`.
    pub allow_discards: bool,
    /// `--crypto-backend`.
    pub backend: Backend,
    /// `--nbd`: the NBD export to serve too.
    pub nbd: Option<super::nbd_export::NbdOpts>,
    /// `--io-uring`: serve the block file over FUSE-over-io_uring queues.
    pub io_uring: bool,
}

/// The data segment `open` serves.
pub enum Payload {
    /// dm-crypt sectors: the sector engine.
    Plain {
        /// The crypt segment.
        seg: Segment,
        /// Decrypted data size in bytes (a multiple of the sector size).
        data_size: u64,
    },
    /// Authenticated sectors over a dm-integrity device.
    Auth(super::open_auth::AuthPayload),
}

impl Payload {
    /// Sector size in bytes.
    fn sector_size(&self) -> usize {
        match self {
            Payload::Plain { seg, .. } => seg.sector_size as usize,
            Payload::Auth(a) => a.seg.sector_size as usize,
        }
    }
}

/// Who does the sector crypto once unlocked: a keep, or this process.
enum Unlocked {
    Keep(Arc<dyn cryptkeep_keep::keep::Keep>),
    Inline(cryptkeep_crypto::SecretBytes),
}

/// A live FUSE block file and its engine.
pub struct Serving {
    mount: BlockFileMount,
    /// What the block file serves (dropped, wiping any key, when serving ends).
    store: Arc<dyn Send + Sync>,
    keep: Option<KeepGuard>,
    /// The NBD export, if any (stopped before the store is dropped).
    nbd: Option<cryptkeep_nbd::server::Server>,
    /// The state record (pid = this process).
    pub st: State,
}

fn daemon_err(what: &str, e: impl std::fmt::Display, place: &str, hint: &str) -> CliError {
    CliError::new(Code::Daemon, format!("{what}: {e}"), place, hint)
}

/// Unlocks the volume, builds the engine, mounts the FUSE block file and
/// records the state with this process as the daemon. The key derivation
/// runs in a keep started here (with `stdio` as its standard streams) or,
/// inline, on a helper thread; either way a stop signal ends it with
/// [`interrupt::interrupted`]. `after_unlock` runs once the key is there,
/// before anything is mounted.
pub fn start(
    mut ctx: OpenCtx,
    stdio: Option<Stdio3>,
    after_unlock: &dyn Fn() -> CliResult<()>,
) -> CliResult<Serving> {
    daemon::harden();
    let place = common::place(&ctx.volume, ctx.header.as_deref());
    let read_only = ctx.st.read_only;
    let ss = ctx.payload.sector_size();
    let mut guard = None;
    let unlocked = match (ctx.keep.take(), ctx.pass.take()) {
        (Some(args), _) => {
            let log = state::log_path(&ctx.st.name);
            let k = keep_start::spawn_and_wait(args, &log, &place, stdio)?;
            ctx.st.keep = Some(k.state.clone());
            guard = Some(KeepGuard::new(&k)?);
            let keep = ProcessKeep::connect(k.arena, k.control, k.pid).map_err(|e| {
                daemon_err("cannot reach the keep", e, &place, "close and open again")
            })?;
            eprintln!("cryptkeep: sector crypto by the keep (pid {})", k.pid);
            if let Err(e) = daemon::lock_memory() {
                eprintln!("cryptkeep: warning: cannot lock memory (mlockall): {e}");
            }
            Unlocked::Keep(Arc::new(keep))
        }
        (None, Some(pass)) => {
            let hdr = common::open_header(&ctx.volume, ctx.header.as_deref(), false)?;
            let luks = ctx.luks.clone();
            let (key_slot, backend, shown) = (ctx.key_slot, ctx.backend, place.clone());
            let (slot, vk) = interrupt::run(&place, move || {
                luks.unlock(&hdr, &pass, key_slot, backend)
                    .map_err(|e| from_luks(e, &shown))
            })??;
            eprintln!("cryptkeep: keyslot {slot} unlocked ({place}); key inline");
            // After the KDF (whose memory is freed by now), before serving.
            if let Err(e) = daemon::lock_memory() {
                eprintln!("cryptkeep: warning: cannot lock memory (mlockall): {e}");
            }
            Unlocked::Inline(vk)
        }
        (None, None) => {
            return Err(CliError::new(
                Code::Unexpected,
                "neither a keep nor a passphrase to unlock with",
                place,
                "please report this bug",
            ))
        }
    };
    match ctx.payload {
        Payload::Plain { seg, data_size } => {
            let crypt: Arc<dyn SectorCrypt> = match unlocked {
                Unlocked::Keep(keep) => Arc::new(KeepCrypt::new(keep, ss)),
                Unlocked::Inline(vk) => {
                    let cipher = new_sector_cipher(&seg.cipher, vk.as_slice(), ctx.backend)
                        .map_err(|e| from_crypto(&e, &place))?;
                    Arc::new(InlineCrypt::new(cipher, ss, seg.iv_tweak))
                }
            };
            after_unlock()?;
            // The daemon makes its own connection to an NBD server.
            let data = crate::store::open_served(&ctx.volume, !read_only)?.into_backing();
            let engine =
                Engine::new(data, seg.offset, data_size, crypt, read_only).map_err(|e| {
                    daemon_err(
                        "cannot start the sector engine",
                        e,
                        &place,
                        "check the volume file",
                    )
                })?;
            serve_store(
                ctx.st,
                Arc::new(engine),
                ctx.allow_discards,
                guard,
                ctx.nbd.as_ref(),
                ctx.io_uring,
            )
        }
        Payload::Auth(auth) => {
            let crypt: Arc<dyn AuthCrypt> = match unlocked {
                Unlocked::Keep(keep) => super::open_auth::keep_crypt(keep, &auth, &place)?,
                Unlocked::Inline(vk) => super::open_auth::inline_crypt(&auth, &vk, &place)?,
            };
            after_unlock()?;
            let vol = super::open_auth::volume(&ctx.volume, &auth, crypt, &ctx.st.name, &place)?;
            serve_store(
                ctx.st,
                Arc::new(vol),
                false,
                guard,
                ctx.nbd.as_ref(),
                ctx.io_uring,
            )
        }
    }
}

/// Mounts the FUSE block file for `store` under NAME's run directory and
/// records the state with this process as the daemon (`keep`: the key
/// process to close when serving ends); with `nbd`, exports it over NBD
/// too; with `io_uring`, the block file is served over FUSE-over-io_uring
/// queues instead of /dev/fuse.
pub fn serve_store<S: BlockStore>(
    mut st: State,
    store: Arc<S>,
    allow_discards: bool,
    keep: Option<KeepGuard>,
    nbd: Option<&super::nbd_export::NbdOpts>,
    io_uring: bool,
) -> CliResult<Serving> {
    let fuse_dir = state::fuse_dir(&st.name);
    crate::rundir::make_dir(&fuse_dir).map_err(|e| {
        CliError::io(
            "cannot create the FUSE mountpoint",
            fuse_dir.display().to_string(),
            &e,
        )
    })?;
    let opts = block_opts(&st.name, st.read_only, allow_discards);
    let tuning = BlockFileTuning::default().with_io_uring(io_uring);
    let mount = mount_block_store(store.clone(), &fuse_dir, &opts, tuning).map_err(|e| {
        daemon_err(
            "cannot mount the FUSE block file",
            e,
            &fuse_dir.display().to_string(),
            if io_uring {
                "open without --io-uring to read requests from /dev/fuse"
            } else {
                "check /dev/fuse exists (modprobe fuse) and fuse3 is installed"
            },
        )
    })?;
    let nbd = match nbd {
        Some(o) => match super::nbd_export::start(store.clone(), o) {
            Ok((srv, rec)) => {
                st.nbd = Some(rec);
                Some(srv)
            }
            Err(e) => {
                let _ = loopdev::fuse_unmount(&fuse_dir, true);
                mount.wait();
                return Err(e);
            }
        },
        None => None,
    };
    st.set_pid_to_self();
    st.file = block_file_path(&fuse_dir, &opts).display().to_string();
    state::save(&st)?;
    Ok(Serving {
        mount,
        store,
        keep,
        nbd,
        st,
    })
}

/// The FUSE options for NAME.
pub fn block_opts(name: &str, read_only: bool, allow_discards: bool) -> BlockFileOptions {
    BlockFileOptions {
        read_only,
        allow_discards,
        file_name: "volume".into(),
        fs_name: format!("cryptkeep:{name}"),
    }
}

/// Serves until SIGTERM/SIGINT/SIGHUP (then tears down the mount and the
/// loop device and unmounts FUSE) or until FUSE is unmounted from outside;
/// drops the engine (wiping the key) and removes the state record.
/// Signals must have been blocked with [`daemon::block_signals`] before
/// any thread started.
pub fn wait_stopped(s: Serving) {
    let name = s.st.name.clone();
    let fuse_dir = state::fuse_dir(&name);
    let sig_name = name.clone();
    std::thread::spawn(move || {
        let sig = daemon::wait_signal();
        eprintln!("cryptkeep: signal {sig}: closing {sig_name}");
        if let Ok(Some(st)) = state::load(&sig_name) {
            if let Err(e) = teardown_io(&st) {
                eprintln!("cryptkeep: {e}");
            }
        }
        if let Err(e) = loopdev::fuse_unmount(&fuse_dir, true) {
            eprintln!("cryptkeep: {e}");
        }
    });
    s.mount.wait();
    if let Some(srv) = s.nbd {
        srv.stop();
    }
    drop(s.store);
    if let Some(k) = s.keep {
        k.close_and_wait();
    }
    state::remove(&name);
}

/// Unmounts every mount of the loop device (and the recorded mountpoint)
/// and detaches the loop device if it still points at our FUSE file.
pub fn teardown_io(st: &State) -> CliResult<()> {
    if let Some(mp) = &st.mountpoint {
        if mountinfo::is_mount_point(Path::new(mp))
            && st
                .device
                .as_deref()
                .map(|d| mountinfo::mounts_of(Path::new(d)).contains(&PathBuf::from(mp)))
                .unwrap_or(false)
        {
            loopdev::umount(mp)?;
        }
    }
    if let Some(dev) = &st.device {
        for m in mountinfo::mounts_of(Path::new(dev)) {
            loopdev::umount(&m.to_string_lossy())?;
        }
        if let Some(back) = loopdev::backing_file(dev) {
            if back == st.file || back.starts_with(&st.file) {
                loopdev::detach(dev)?;
            }
        }
    }
    Ok(())
}

/// After the daemon serves: attach the loop device, record it, mount when
/// asked. Undoes its own steps on failure.
pub fn attach_and_mount(st: &mut State, mount_dir: Option<&Path>) -> CliResult<()> {
    if st.nbd.as_ref().is_some_and(|n| n.no_loop) {
        return Ok(());
    }
    let dev = loopdev::attach(Path::new(&st.file), st.sector_size, st.read_only)?;
    st.device = Some(dev.clone());
    state::save(st)?;
    if let Some(dir) = mount_dir {
        if let Err(e) = loopdev::mount(&dev, dir, st.read_only) {
            let _ = loopdev::detach(&dev);
            return Err(e);
        }
        st.mountpoint = Some(state::canonical(dir));
        state::save(st)?;
    }
    Ok(())
}

/// Removes what a dead or failed daemon left: mounts, loop device, FUSE
/// mount, state directory.
pub fn clean_stale(st: &State) {
    let _ = teardown_io(st);
    if let Some(n) = &st.nbd {
        super::nbd_export::remove_stale_socket(n);
    }
    let fuse_dir = state::fuse_dir(&st.name);
    if mountinfo::is_mount_point(&fuse_dir) {
        let _ = loopdev::fuse_unmount(&fuse_dir, true);
    }
    state::remove(&st.name);
}

/// What `open` prints once serving: the loop device (if any), then the NBD
/// URI (if any), one per line.
pub fn print_served(st: &State) {
    if let Some(d) = &st.device {
        println!("{d}");
    }
    if let Some(n) = &st.nbd {
        println!("{}", n.uri);
    }
}
