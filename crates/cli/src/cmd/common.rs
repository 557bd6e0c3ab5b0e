//! Options and helpers shared by the verbs: key-file options, the crypto
//! backend, opening a volume's header (attached or `--header`), loading it.

use std::path::{Path, PathBuf};

use clap::{Args as ClapArgs, ValueEnum};
use cryptkeep_crypto::Backend;
use cryptkeep_luks::{BlockIo, Luks, LuksVersion};

use crate::exit::{from_luks, CliError, CliResult};
use crate::passphrase::KeySource;
use crate::store::Store;

/// `--key-file`, `--keyfile-size`, `--keyfile-offset` (cryptsetup's).
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct KeyFileArgs {
    /// Read the passphrase from FILE (binary, whole, up to 8 MiB); `-` = standard input.
    #[arg(short = 'd', long = "key-file", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Read at most N bytes of the key file.
    #[arg(short = 'l', long = "keyfile-size", value_name = "N")]
    pub keyfile_size: Option<u64>,
    /// Skip N bytes at the start of the key file.
    #[arg(long = "keyfile-offset", value_name = "N", default_value_t = 0)]
    pub keyfile_offset: u64,
}

impl KeyFileArgs {
    /// The passphrase source these options describe.
    pub fn source(&self) -> KeySource {
        KeySource {
            key_file: self.key_file.clone(),
            keyfile_size: self.keyfile_size,
            keyfile_offset: self.keyfile_offset,
        }
    }
}

/// `--crypto-backend`: which implementation of the ciphers to use.
#[derive(ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BackendArg {
    /// aws-lc (AES-NI/VAES); the default.
    #[default]
    Accelerated,
    /// Pure Rust.
    Portable,
}

impl BackendArg {
    /// The crypto crate's backend.
    pub fn backend(self) -> Backend {
        match self {
            BackendArg::Accelerated => Backend::Accelerated,
            BackendArg::Portable => Backend::Portable,
        }
    }
}

/// `--type` of format/open.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeArg {
    /// Either version (open only; like cryptsetup's `luks`).
    Luks,
    /// LUKS1.
    Luks1,
    /// LUKS2.
    Luks2,
}

/// "LUKS1" or "LUKS2".
pub fn version_name(v: LuksVersion) -> &'static str {
    match v {
        LuksVersion::V1 => "LUKS1",
        _ => "LUKS2",
    }
}

/// "luks1" or "luks2" (state.json's `type`).
pub fn version_tag(v: LuksVersion) -> &'static str {
    match v {
        LuksVersion::V1 => "luks1",
        _ => "luks2",
    }
}

/// How to name a volume in messages: `VOLUME`, or `HEADER (header of VOLUME)`.
pub fn place(volume: &Path, header: Option<&Path>) -> String {
    match header {
        Some(h) => format!("{} (header of {})", h.display(), volume.display()),
        None => volume.display().to_string(),
    }
}

pub use crate::store::open_file;

/// Opens where the header lives: `--header FILE`, else the volume itself
/// (a path or an NBD URI).
pub fn open_header(volume: &Path, header: Option<&Path>, write: bool) -> CliResult<Store> {
    match header {
        Some(h) => crate::store::open(h, write, "header file"),
        None => crate::store::open(volume, write, "volume"),
    }
}

/// Loads the LUKS header from `io`, printing recovery notices to stderr.
pub fn load(io: &dyn BlockIo, place: &str) -> CliResult<Luks> {
    let loaded = Luks::load(io).map_err(|e| from_luks(e, place))?;
    for n in &loaded.notices {
        eprintln!("cryptkeep: notice: {n} ({place})");
    }
    Ok(loaded.luks)
}

/// Prints a warning to stderr.
pub fn warn(msg: &str) {
    eprintln!("cryptkeep: warning: {msg}");
}

/// Refuses to change a volume that is open now, under any path (the same
/// file or block device; its keyslots may still be changed by cryptsetup,
/// but cryptkeep keeps it simple and safe).
pub fn refuse_if_open(volume: &Path, allow: bool) -> CliResult<()> {
    if allow {
        return Ok(());
    }
    if crate::store::is_nbd(volume) {
        // An NBD export is the same volume when its URI is.
        let uri = volume.display().to_string();
        for st in crate::state::list_visible()? {
            if st.volume == uri && st.daemon_alive() {
                return Err(CliError::new(
                    crate::exit::Code::Busy,
                    format!("volume is open as {}", st.name),
                    uri,
                    format!("close it first: cryptkeep close {}", st.name),
                ));
            }
        }
        return Ok(());
    }
    let Ok(id) = crate::volid::VolumeId::of_path(volume) else {
        // Not there yet: nothing can have it open.
        return Ok(());
    };
    for st in crate::state::list_visible()? {
        if st.same_volume(id) && st.daemon_alive() {
            return Err(CliError::new(
                crate::exit::Code::Busy,
                format!("volume is open as {}", st.name),
                volume.display().to_string(),
                format!("close it first: cryptkeep close {}", st.name),
            ));
        }
    }
    Ok(())
}

/// Refuses a header whose data would start inside its own header and
/// keyslot areas when the header is on the data device itself (no
/// `--header`, or `--header` naming the volume): serving such data would
/// let the first write destroy the header. Exit 6, like any corrupt header.
pub fn check_data_clear_of_header(
    luks: &Luks,
    volume: &Path,
    header: Option<&Path>,
    place: &str,
) -> CliResult<()> {
    use crate::volid::VolumeId;
    let same = |h: &Path| match (VolumeId::of_path(h), VolumeId::of_path(volume)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if header.is_some_and(|h| !same(h)) {
        return Ok(());
    }
    luks.check_attached().map_err(|e| {
        let mut c = from_luks(e, place);
        c.hint = "if the header was made detached, pass its file with --header; \
                  otherwise restore a header backup: cryptkeep header restore VOLUME --header-backup-file FILE"
            .into();
        c
    })
}
