//! `cryptkeep header restore VOLUME --header-backup-file FILE` (alias
//! `luksHeaderRestore`): validate a header backup and write it back over
//! the volume's header area (asks first when a LUKS header is there), in
//! bounded chunks. Nothing is written until the backup loaded, the volume's
//! current header (if any) matched its layout and the answer was yes.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_luks::backup;

use super::common;
use crate::exit::{from_luks, CliError, CliResult, Code};
use crate::passphrase::confirm;

/// Options of `header restore`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// The backup made by `header backup` or `cryptsetup luksHeaderBackup`.
    #[arg(long = "header-backup-file", value_name = "FILE")]
    pub header_backup_file: PathBuf,
    /// Detached header file to restore into.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Do not ask for confirmation.
    #[arg(short = 'q', long = "batch-mode")]
    pub batch_mode: bool,
}

/// Runs `header restore`.
pub fn run(a: Args) -> CliResult {
    let bplace = a.header_backup_file.display().to_string();
    let backup_file = common::open_file(&a.header_backup_file, false, "header backup file")?;
    // Loading checks that the file holds the whole header_len.
    let saved = common::load(&backup_file, &bplace)?;
    let len = saved.header_len();
    common::refuse_if_open(&a.volume, false)?;
    let place = common::place(&a.volume, a.header.as_deref());
    let io = common::open_header(&a.volume, a.header.as_deref(), true)?;
    if let Ok(cur) = cryptkeep_luks::Luks::load(&io) {
        if let Err(e) = backup::check_compatible(&saved, &cur.luks) {
            let mut c = from_luks(e, &place);
            c.hint = "restore onto the device this backup was made from (cryptkeep dump shows both headers)".into();
            return Err(c);
        }
        let same = cur.luks.uuid() == saved.uuid();
        confirm(
            &format!(
                "Device {} already contains a LUKS header{}. Replacing the header will destroy its existing keyslots.",
                a.volume.display(),
                if same { "" } else { " with a different UUID" }
            ),
            &place,
            a.batch_mode,
        )?;
    }
    let size = io
        .size()
        .map_err(|e| CliError::io("cannot size the volume", &place, &e))?;
    if a.header.is_none() && size < len {
        return Err(CliError::new(
            Code::NotFound,
            format!("the volume ({size} bytes) is smaller than the backup's header ({len} bytes)"),
            place,
            "restore onto the device the backup was made from",
        ));
    }
    backup::restore(&saved, &backup_file, &io).map_err(|e| {
        let shown = match &e {
            cryptkeep_luks::Error::Io { what, .. } if what.contains("backup") => bplace.clone(),
            _ => place.clone(),
        };
        from_luks(e, &shown)
    })
}
