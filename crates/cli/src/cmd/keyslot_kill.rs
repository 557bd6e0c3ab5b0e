//! `cryptkeep luksKillSlot VOLUME N`: wipe keyslot N. Unless
//! `--batch-mode` without a key file, a passphrase of another keyslot must
//! unlock first (cryptsetup's rule); the last keyslot needs a confirmation.

use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;

use super::common::{self, BackendArg, KeyFileArgs};
use crate::exit::{from_luks, CliError, CliResult, Code};
use crate::passphrase::confirm;

/// Options of `luksKillSlot`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// The keyslot to wipe.
    pub slot: usize,
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Do not ask for confirmation or (without --key-file) a passphrase.
    #[arg(short = 'q', long = "batch-mode")]
    pub batch_mode: bool,
    /// Crypto backend for the keyslot decryption.
    #[arg(long = "crypto-backend", value_enum, default_value = "accelerated")]
    pub crypto_backend: BackendArg,
}

/// Wipes keyslot `slot` after checking a remaining passphrase.
pub fn kill(
    volume: &Path,
    header: Option<&Path>,
    slot: usize,
    key: &KeyFileArgs,
    batch: bool,
    backend: BackendArg,
) -> CliResult {
    let place = common::place(volume, header);
    let io = crate::isolate::header_io(common::open_header(volume, header, true)?);
    let mut luks = common::load(&io, &place)?;
    let slots = luks.keyslots();
    let Some(info) = slots.iter().find(|k| k.slot == slot) else {
        return Err(from_luks(
            cryptkeep_luks::Error::KeyslotOutOfRange(slot),
            &place,
        ));
    };
    if !info.active {
        return Err(from_luks(
            cryptkeep_luks::Error::KeyslotInactive(slot),
            &place,
        ));
    }
    let others: Vec<usize> = slots
        .iter()
        .filter(|k| k.active && k.slot != slot)
        .map(|k| k.slot)
        .collect();
    if others.is_empty() {
        confirm(
            &format!("WARNING!\n========\nThis is the last keyslot. Device {} will become unusable after purging this key.", volume.display()),
            &place,
            batch,
        )?;
    } else if !batch || key.key_file.is_some() {
        let pass = key
            .source()
            .read("Enter any remaining passphrase: ", false)?;
        let ok = others
            .iter()
            .any(|&s| luks.unlock(&io, &pass, Some(s), backend.backend()).is_ok());
        if !ok {
            return Err(CliError::new(
                Code::Permission,
                format!("no remaining keyslot (other than {slot}) opened with this passphrase"),
                place,
                "give a passphrase of a keyslot you keep, or --batch-mode to skip the check",
            ));
        }
    }
    luks.remove_keyslot(&io, slot)
        .map_err(|e| from_luks(e, &place))?;
    io.sync_all()
        .map_err(|e| CliError::io("cannot sync the header", &place, &e))?;
    eprintln!("Key slot {slot} removed.");
    Ok(())
}

/// Runs `luksKillSlot`.
pub fn run(a: Args) -> CliResult {
    kill(
        &a.volume,
        a.header.as_deref(),
        a.slot,
        &a.key,
        a.batch_mode,
        a.crypto_backend,
    )
}
