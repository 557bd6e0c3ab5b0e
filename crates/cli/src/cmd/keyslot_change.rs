//! `cryptkeep keyslot change VOLUME [NEW_KEY_FILE]` (alias
//! `luksChangeKey`): replace a passphrase. The new keyslot is written
//! before the old one is wiped, so a crash never loses both.

use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::common::{self, BackendArg, KeyFileArgs};
use super::kdf_opts::PbkdfArgs;
use super::keyslot_add::{new_passphrase, parse_hash};
use crate::exit::{from_luks, CliError, CliResult};

/// Options of `keyslot change`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// Read the new passphrase from this file (binary, like --key-file).
    pub new_key_file: Option<PathBuf>,
    /// The passphrase to change: --key-file etc.
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Bytes of NEW_KEY_FILE to read.
    #[arg(long = "new-keyfile-size", value_name = "N")]
    pub new_keyfile_size: Option<u64>,
    /// Bytes of NEW_KEY_FILE to skip.
    #[arg(long = "new-keyfile-offset", value_name = "N", default_value_t = 0)]
    pub new_keyfile_offset: u64,
    /// Change only this keyslot.
    #[arg(short = 'S', long = "key-slot", value_name = "N")]
    pub key_slot: Option<usize>,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    #[command(flatten)]
    pub kdf: PbkdfArgs,
    /// Hash for a PBKDF2 keyslot (default sha256).
    #[arg(long, default_value = "sha256")]
    pub hash: String,
    /// Do not ask for confirmation.
    #[arg(short = 'q', long = "batch-mode")]
    pub batch_mode: bool,
    /// Crypto backend for the keyslot encryption.
    #[arg(long = "crypto-backend", value_enum, default_value = "accelerated")]
    pub crypto_backend: BackendArg,
}

/// Runs `keyslot change`.
pub fn run(a: Args) -> CliResult {
    let place = common::place(&a.volume, a.header.as_deref());
    let hash = parse_hash(&a.hash)?;
    let io = crate::isolate::header_io(common::open_header(&a.volume, a.header.as_deref(), true)?);
    let mut luks = common::load(&io, &place)?;
    let backend = a.crypto_backend.backend();
    let old = a
        .key
        .source()
        .read("Enter passphrase to be changed: ", false)?;
    let drawing = crate::kdf_time::announce_unlock(&luks, a.key_slot, true);
    let (old_slot, vk) = luks
        .unlock(&io, &old, a.key_slot, backend)
        .map_err(|e| from_luks(e, &place))?;
    drop(drawing);
    drop(old);
    let new = new_passphrase(&a.new_key_file, a.new_keyfile_size, a.new_keyfile_offset)?;
    let kdf = a.kdf.make(luks.version(), hash, vk.len())?;
    let new_slot = match luks.add_keyslot(&io, vk.as_slice(), &new, None, &kdf, backend) {
        Ok(s) => {
            luks.remove_keyslot(&io, old_slot)
                .map_err(|e| from_luks(e, &place))?;
            s
        }
        Err(cryptkeep_luks::Error::NoFreeKeyslot) => {
            // No room for a copy: overwrite in place, as cryptsetup does then.
            luks.remove_keyslot(&io, old_slot)
                .map_err(|e| from_luks(e, &place))?;
            luks.add_keyslot(&io, vk.as_slice(), &new, Some(old_slot), &kdf, backend)
                .map_err(|e| from_luks(e, &place))?
        }
        Err(e) => return Err(from_luks(e, &place)),
    };
    io.sync_all()
        .map_err(|e| CliError::io("cannot sync the header", &place, &e))?;
    if new_slot == old_slot {
        eprintln!("Key slot {old_slot} changed.");
    } else {
        eprintln!("Key slot {old_slot} changed (the passphrase now lives in key slot {new_slot}).");
    }
    Ok(())
}
