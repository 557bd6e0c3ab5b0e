//! `cryptkeep keyslot remove VOLUME [KEY_FILE]` (alias `luksRemoveKey`):
//! wipe the keyslot the given passphrase opens; with `--key-slot N`, wipe
//! slot N like `luksKillSlot`.

use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::common::{self, BackendArg, KeyFileArgs};
use super::keyslot_kill;
use crate::exit::{from_luks, CliResult};
use crate::passphrase::{confirm, KeySource};

/// Options of `keyslot remove`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// File holding the passphrase to remove (like --key-file).
    pub key_file_arg: Option<PathBuf>,
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Wipe this keyslot instead (asks for another passphrase unless --batch-mode).
    #[arg(short = 'S', long = "key-slot", value_name = "N")]
    pub key_slot: Option<usize>,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Do not ask for confirmation.
    #[arg(short = 'q', long = "batch-mode")]
    pub batch_mode: bool,
    /// Crypto backend for the keyslot decryption.
    #[arg(long = "crypto-backend", value_enum, default_value = "accelerated")]
    pub crypto_backend: BackendArg,
}

/// Runs `keyslot remove`.
pub fn run(a: Args) -> CliResult {
    if let Some(slot) = a.key_slot {
        return keyslot_kill::kill(
            &a.volume,
            a.header.as_deref(),
            slot,
            &a.key,
            a.batch_mode,
            a.crypto_backend,
        );
    }
    let place = common::place(&a.volume, a.header.as_deref());
    let io = crate::isolate::header_io(common::open_header(&a.volume, a.header.as_deref(), true)?);
    let mut luks = common::load(&io, &place)?;
    let mut src: KeySource = a.key.source();
    if src.key_file.is_none() {
        src.key_file = a.key_file_arg.clone();
    }
    let pass = src.read("Enter passphrase to be deleted: ", false)?;
    let drawing = crate::kdf_time::announce_unlock(&luks, None, true);
    let (slot, _vk) = luks
        .unlock(&io, &pass, None, a.crypto_backend.backend())
        .map_err(|e| from_luks(e, &place))?;
    drop(drawing);
    let active = luks.keyslots().iter().filter(|k| k.active).count();
    if active <= 1 {
        confirm(
            &format!("WARNING!\n========\nThis is the last keyslot. Device {} will become unusable after purging this key.", a.volume.display()),
            &place,
            a.batch_mode,
        )?;
    }
    luks.remove_keyslot(&io, slot)
        .map_err(|e| from_luks(e, &place))?;
    io.sync_all()
        .map_err(|e| crate::exit::CliError::io("cannot sync the header", &place, &e))?;
    eprintln!("Key slot {slot} removed.");
    Ok(())
}
