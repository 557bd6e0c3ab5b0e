//! `cryptkeep header backup VOLUME --header-backup-file FILE` (alias
//! `luksHeaderBackup`): copy the binary header(s), JSON and keyslots area
//! to a new file (mode 0400), like cryptsetup, in bounded chunks.

use std::fs::OpenOptions;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::common;
use crate::exit::{from_luks, CliError, CliResult};

/// Options of `header backup`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// The backup file to create (must not exist).
    #[arg(long = "header-backup-file", value_name = "FILE")]
    pub header_backup_file: PathBuf,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
}

/// Runs `header backup`.
pub fn run(a: Args) -> CliResult {
    let place = common::place(&a.volume, a.header.as_deref());
    let io = common::open_header(&a.volume, a.header.as_deref(), false)?;
    let luks = common::load(&io, &place)?;
    let out_place = a.header_backup_file.display().to_string();
    let out = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o400)
        .open(&a.header_backup_file)
        .map_err(|e| {
            let mut c = CliError::io("cannot create the header backup file", &out_place, &e);
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                c.hint = "the backup file exists already; choose another name or remove it".into();
            }
            c
        })?;
    if let Err(e) = cryptkeep_luks::backup::write_backup(&luks, &io, &out) {
        drop(out);
        let _ = std::fs::remove_file(&a.header_backup_file);
        let shown = match &e {
            cryptkeep_luks::Error::Io { what, .. } if what.contains("backup") => out_place,
            _ => place,
        };
        return Err(from_luks(e, &shown));
    }
    Ok(())
}
