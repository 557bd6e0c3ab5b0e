//! `cryptkeep header backup VOLUME --header-backup-file FILE` (alias
//! `luksHeaderBackup`): copy the binary header(s), JSON and keyslots area
//! to a new file (mode 0400), like cryptsetup.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;

use clap::Args as ClapArgs;
use zeroize::Zeroizing;

use super::common;
use crate::exit::{CliError, CliResult};

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
    let len = luks.header_len() as usize;
    let mut buf = Zeroizing::new(vec![0u8; len]);
    io.read_exact_at(&mut buf, 0)
        .map_err(|e| CliError::io("cannot read the header", &place, &e))?;
    let out_place = a.header_backup_file.display().to_string();
    let mut out = OpenOptions::new()
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
    let r = out.write_all(&buf).and_then(|_| out.sync_all());
    if let Err(e) = r {
        let _ = std::fs::remove_file(&a.header_backup_file);
        return Err(CliError::io(
            "cannot write the header backup",
            out_place,
            &e,
        ));
    }
    Ok(())
}
