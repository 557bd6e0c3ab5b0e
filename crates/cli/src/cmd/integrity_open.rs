//! `cryptkeep integrity open DEVICE NAME` (integritysetup open): serves a
//! standalone integrity device as a FUSE block file on a direct-I/O loop
//! device, through the same daemon, state record and `close` as `open`.
//! Reads whose tag fails are I/O errors (the kernel's `EILSEQ`); writes go
//! through the journal unless `--integrity-no-journal`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args as ClapArgs;
use cryptkeep_fuse::ops::{Errno, R};
use cryptkeep_fuse::BlockStore;
use cryptkeep_integrity::{read_superblock, Device, Error, Mode, TagHash, DEFAULT_BUFFER_SECTORS};

use super::common;
use super::integrity_args::{failed, AlgArgs};
use super::open::{background, claim, foreground, Launch, Progress};
use super::serve::{self, Serving};
use crate::daemon::Stdio3;
use crate::exit::{CliError, CliResult};
use crate::state::{self, State};
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
    /// Open read-only.
    #[arg(short = 'r', long = "read-only")]
    pub read_only: bool,
    /// The metadata buffer the device was written with (--buffer-sectors).
    #[arg(long = "buffer-sectors", default_value_t = DEFAULT_BUFFER_SECTORS)]
    pub buffer_sectors: u32,
    /// Serve in the foreground until SIGINT/SIGTERM, then clean up.
    #[arg(long)]
    pub foreground: bool,
}

/// An integrity device served as a block file.
struct IntegrityStore {
    dev: Device,
    read_only: bool,
}

fn errno(e: Error) -> Errno {
    match e {
        Error::Io { source, .. } => Errno::from_i32(source.raw_os_error().unwrap_or(libc::EIO)),
        Error::TagMismatch { sector } => {
            // As the kernel logs "Checksum failed at sector".
            eprintln!("cryptkeep: integrity tag mismatch at sector {sector}");
            Errno::EIO
        }
        _ => Errno::EIO,
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
    fn read_at(&self, buf: &mut [u8], offset: u64) -> R<usize> {
        self.dev.read_at(buf, offset).map_err(errno)
    }
    fn write_at(&self, data: &[u8], offset: u64) -> R<usize> {
        self.dev.write_at(data, offset).map_err(errno)?;
        Ok(data.len())
    }
    fn flush(&self) -> R<()> {
        self.dev.flush().map_err(errno)
    }
}

/// What the daemon needs to serve the device.
struct IntegrityCtx {
    st: State,
    device: PathBuf,
    hash: TagHash,
    mode: Mode,
    buffer_sectors: u32,
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
        let dev = Device::open(&self.device, self.hash, self.mode, self.buffer_sectors)
            .map_err(|e| failed(e, &place))?;
        after_unlock()?;
        let store = IntegrityStore {
            dev,
            read_only: self.mode == Mode::ReadOnly,
        };
        serve::serve_store(self.st, Arc::new(store), false, None)
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
    let mode = match (a.read_only, a.no_journal) {
        (true, _) => Mode::ReadOnly,
        (false, true) => Mode::Direct,
        (false, false) => Mode::Journal,
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
    };
    claim(&st)?;
    let ctx = IntegrityCtx {
        st,
        device: a.device.clone(),
        hash,
        mode,
        buffer_sectors: a.buffer_sectors,
    };
    let progress = Progress { show: false };
    if a.foreground {
        foreground(ctx, None, progress)
    } else {
        background(ctx, None, progress)
    }
}
