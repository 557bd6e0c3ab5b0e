//! `cryptkeep integrity open DEVICE NAME` (integritysetup open): serves a
//! standalone integrity device as a FUSE block file on a direct-I/O loop
//! device, through the same daemon, state record and `close` as `open`.
//! Reads whose tag fails are I/O errors (the kernel's `EILSEQ`); writes go
//! through the journal unless `--integrity-no-journal`, or in place after
//! marking their region in the bitmap with `--integrity-bitmap-mode`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args as ClapArgs;
use cryptkeep_fuse::BlockStore;
use cryptkeep_integrity::{
    read_superblock, BitmapOptions, Device, Error, Mode, TagHash, DEFAULT_BUFFER_SECTORS,
};

use super::common;
use super::integrity_args::{failed, AlgArgs};
use super::open::{background, claim, foreground, Launch, Progress};
use super::serve::{self, Serving};
use crate::daemon::Stdio3;
use crate::exit::{CliError, CliResult};
use crate::state::{self, IntegrityCounts, State};
use crate::volid::VolumeId;

/// Options of `integrity open`.
#[derive(ClapArgs, Debug)]
pub struct OpenArgs {
    /// The image file or block device.
    pub device: PathBuf,
    /// The name to open it under (close it with `cryptkeep close NAME`).
    pub name: String,
    #[command(flatten)]
    pub alg: AlgArgs,
    /// Write data and tags in place, without the journal (a crash may
    /// leave a block whose tag fails).
    #[arg(short = 'D', long = "integrity-no-journal")]
    pub no_journal: bool,
    #[command(flatten)]
    pub bitmap: BitmapArgs,
    /// Open read-only.
    #[arg(short = 'r', long = "read-only")]
    pub read_only: bool,
    /// The metadata buffer the device was written with (--buffer-sectors).
    #[arg(long = "buffer-sectors", default_value_t = DEFAULT_BUFFER_SECTORS)]
    pub buffer_sectors: u32,
    /// Accepted for integritysetup's scripts: how full the journal may get
    /// before the kernel commits it. cryptkeep commits every write to the
    /// journal before acknowledging it, which meets any watermark.
    #[arg(long = "journal-watermark", value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub journal_watermark: Option<u8>,
    /// Accepted for integritysetup's scripts: how long the kernel may wait
    /// before committing the journal. cryptkeep commits every write to the
    /// journal before acknowledging it, which meets any commit time.
    #[arg(long = "journal-commit-time", value_name = "MS")]
    pub journal_commit_time: Option<u64>,
    /// Serve in the foreground until SIGINT/SIGTERM, then clean up.
    #[arg(long)]
    pub foreground: bool,
}

/// Bitmap mode's options, as integritysetup names them.
#[derive(ClapArgs, Debug)]
pub struct BitmapArgs {
    /// Write data and tags in place after marking their region dirty in a
    /// bitmap (no journal); regions dirty after a crash have their tags
    /// recalculated at the next open.
    #[arg(
        short = 'B',
        long = "integrity-bitmap-mode",
        conflicts_with = "no_journal"
    )]
    pub bitmap_mode: bool,
    /// 512-byte sectors per bitmap bit (a power of two; default 32768).
    #[arg(
        long = "bitmap-sectors-per-bit",
        value_name = "SECTORS",
        requires = "bitmap_mode"
    )]
    pub sectors_per_bit: Option<u64>,
    /// Milliseconds after which dirty bits are cleared (at the next flush;
    /// default 10000).
    #[arg(
        long = "bitmap-flush-time",
        value_name = "MS",
        requires = "bitmap_mode"
    )]
    pub flush_time: Option<u64>,
    /// Recompute keyed (hmac) tags the superblock marks as not yet
    /// recalculated or dirty (after a crash in bitmap mode). Refused
    /// without this: the superblock is not authenticated, so whoever can
    /// write the disk could have tampered data re-tagged. Check the data
    /// with `integrity verify` first.
    #[arg(long = "integrity-legacy-recalc")]
    pub legacy_recalc: bool,
}

impl BitmapArgs {
    /// The library's options.
    pub fn options(&self) -> BitmapOptions {
        let d = BitmapOptions::default();
        BitmapOptions {
            sectors_per_bit: self.sectors_per_bit,
            flush_interval: self
                .flush_time
                .map_or(d.flush_interval, Duration::from_millis),
            legacy_recalculate: self.legacy_recalc,
        }
    }
}

/// An integrity device served as a block file.
struct IntegrityStore {
    dev: Device,
    read_only: bool,
    /// NAME, for the failure counters `status` shows.
    name: String,
    /// Blocks that failed their tags since opening.
    failures: AtomicU64,
    /// Serializes the writes of the failure record.
    recording: std::sync::Mutex<()>,
}

impl IntegrityStore {
    fn store_error(&self, e: Error) -> cryptkeep_volume::Error {
        match e {
            Error::Io { source, .. } => cryptkeep_volume::Error::Io {
                what: "integrity device I/O",
                offset: 0,
                source,
            },
            Error::TagMismatch { sector } => {
                // As the kernel logs "Checksum failed at sector".
                eprintln!("cryptkeep: integrity tag mismatch at sector {sector}");
                // One record at a time: reads fail on several threads.
                let _one = self.recording.lock().unwrap_or_else(|p| p.into_inner());
                let c = IntegrityCounts {
                    failures: self.failures.fetch_add(1, Ordering::Relaxed) + 1,
                    last_failure: Some(sector / (self.dev.block_size() as u64 / 512)),
                };
                if let Err(e) = state::save_integrity_counts(&self.name, &c) {
                    eprintln!("cryptkeep: {e}");
                }
                cryptkeep_volume::Error::Authentication { sector }
            }
            e => cryptkeep_volume::Error::Integrity(e.to_string()),
        }
    }
}

impl Drop for IntegrityStore {
    /// A clean stop: in bitmap mode, the bitmap is retired as the kernel's
    /// close does (nothing left to recalculate).
    fn drop(&mut self) {
        if let Err(e) = self.dev.close() {
            eprintln!("cryptkeep: closing the integrity device: {e}");
        }
    }
}

impl BlockStore for IntegrityStore {
    fn size(&self) -> u64 {
        self.dev.size()
    }
    fn block_size(&self) -> usize {
        self.dev.block_size()
    }
    fn read_only(&self) -> bool {
        self.read_only
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, cryptkeep_volume::Error> {
        self.dev
            .read_at(buf, offset)
            .map_err(|e| self.store_error(e))
    }
    fn write_at(&self, data: &[u8], offset: u64) -> Result<usize, cryptkeep_volume::Error> {
        self.dev
            .write_at(data, offset)
            .map_err(|e| self.store_error(e))?;
        Ok(data.len())
    }
    fn flush(&self) -> Result<(), cryptkeep_volume::Error> {
        self.dev.flush().map_err(|e| self.store_error(e))
    }
}

/// What the daemon needs to serve the device.
struct IntegrityCtx {
    st: State,
    device: PathBuf,
    hash: TagHash,
    mode: Mode,
    buffer_sectors: u32,
    bitmap: BitmapOptions,
}

impl Launch for IntegrityCtx {
    fn name(&self) -> String {
        self.st.name.clone()
    }
    fn place(&self) -> String {
        self.device.display().to_string()
    }
    fn progress(&self, _show: bool) -> Option<crate::kdf_time::Progress> {
        None
    }
    fn unlocks_in_daemon(&self) -> bool {
        false
    }
    fn start(
        self,
        _stdio: Option<Stdio3>,
        after_unlock: &dyn Fn() -> CliResult<()>,
    ) -> CliResult<Serving> {
        let place = self.place();
        let dev = Device::open_with_bitmap(
            &self.device,
            self.hash,
            self.mode,
            self.buffer_sectors,
            self.bitmap,
        )
        .map_err(|e| failed(e, &place))?;
        after_unlock()?;
        state::save_integrity_counts(&self.st.name, &IntegrityCounts::default())?;
        let store = IntegrityStore {
            dev,
            read_only: self.mode == Mode::ReadOnly,
            name: self.st.name.clone(),
            failures: AtomicU64::new(0),
            recording: std::sync::Mutex::new(()),
        };
        serve::serve_store(self.st, Arc::new(store), false, None, None, false)
    }
}

/// Runs `integrity open`.
pub fn run(a: OpenArgs) -> CliResult {
    state::check_name(&a.name)?;
    state::ensure_run_dir()?;
    let place = a.device.display().to_string();
    let hash = a.alg.hash(&place)?;
    let sb = read_superblock(&a.device).map_err(|e| failed(e, &place))?;
    let file = common::open_file(&a.device, !a.read_only, "device")?;
    let volume_id = VolumeId::of_file(&file)
        .map_err(|e| CliError::io("cannot check the device", &place, &e))?;
    drop(file);
    let mode = match (a.read_only, a.no_journal, a.bitmap.bitmap_mode) {
        (true, _, _) => Mode::ReadOnly,
        (false, true, _) => Mode::Direct,
        (false, false, true) => Mode::Bitmap,
        (false, false, false) => Mode::Journal,
    };
    let st = State {
        name: a.name.clone(),
        volume: state::canonical(&a.device),
        header: None,
        device: None,
        file: String::new(),
        kind: "integrity".into(),
        cipher: "none".into(),
        integrity: Some(hash.name().into()),
        key_size: 0,
        sector_size: sb.sectors_per_block() * 512,
        read_only: a.read_only,
        pid: std::process::id() as i32,
        pid_start: crate::procid::own_start_time(),
        mountpoint: None,
        uuid: String::new(),
        size: sb.provided_data_sectors * 512,
        keep: None,
        volume_id: Some(volume_id),
        nbd: None,
    };
    claim(&st)?;
    let ctx = IntegrityCtx {
        st,
        device: a.device.clone(),
        hash,
        mode,
        buffer_sectors: a.buffer_sectors,
        bitmap: a.bitmap.options(),
    };
    let progress = Progress { show: false };
    if a.foreground {
        foreground(ctx, None, progress)
    } else {
        background(ctx, None, progress)
    }
}
