//! `cryptkeep header restore VOLUME --header-backup-file FILE` (alias
//! `luksHeaderRestore`): validate a header backup and write it back over
//! the volume's header area (asks first when a LUKS header is there).

use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use clap::Args as ClapArgs;
use zeroize::Zeroizing;

use super::common;
use crate::exit::{CliError, CliResult, Code};
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
    let backup = common::load(&backup_file, &bplace)?;
    let len = backup.header_len() as usize;
    let mut buf = Zeroizing::new(Vec::with_capacity(len));
    (&backup_file)
        .take(len as u64)
        .read_to_end(&mut buf)
        .map_err(|e| CliError::io("cannot read the header backup", &bplace, &e))?;
    if buf.len() != len {
        return Err(CliError::new(
            Code::Corrupt,
            format!(
                "the header backup holds {} bytes, its header needs {len}",
                buf.len()
            ),
            bplace,
            "the backup file is truncated; use another backup",
        ));
    }
    common::refuse_if_open(&a.volume, false)?;
    let place = common::place(&a.volume, a.header.as_deref());
    let io = common::open_header(&a.volume, a.header.as_deref(), true)?;
    if let Ok(cur) = cryptkeep_luks::Luks::load(&io) {
        let same = cur.luks.uuid() == backup.uuid();
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
    let size = {
        use std::io::{Seek, SeekFrom};
        let mut f = &io;
        f.seek(SeekFrom::End(0))
            .map_err(|e| CliError::io("cannot size the volume", &place, &e))?
    };
    if a.header.is_none() && size < len as u64 {
        return Err(CliError::new(
            Code::NotFound,
            format!("the volume ({size} bytes) is smaller than the backup's header ({len} bytes)"),
            place,
            "restore onto the device the backup was made from",
        ));
    }
    io.write_all_at(&buf, 0)
        .and_then(|_| io.sync_all())
        .map_err(|e| CliError::io("cannot write the header", &place, &e))?;
    Ok(())
}
