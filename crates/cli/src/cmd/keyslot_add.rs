//! `cryptkeep keyslot add VOLUME [NEW_KEY_FILE]` (alias `luksAddKey`): add
//! a passphrase in a free keyslot, after an existing one unlocks the volume
//! key (cryptsetup luksAddKey).

use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_crypto::HashAlg;

use super::common::{self, BackendArg, KeyFileArgs};
use super::kdf_opts::PbkdfArgs;
use crate::exit::{from_crypto, from_luks, CliResult, Code};
use crate::passphrase::{KeySource, Passphrase};

/// Options of `keyslot add`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// Read the new passphrase from this file (binary, like --key-file).
    pub new_key_file: Option<PathBuf>,
    /// Existing passphrase: --key-file etc.
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Bytes of NEW_KEY_FILE to read.
    #[arg(long = "new-keyfile-size", value_name = "N")]
    pub new_keyfile_size: Option<u64>,
    /// Bytes of NEW_KEY_FILE to skip.
    #[arg(long = "new-keyfile-offset", value_name = "N", default_value_t = 0)]
    pub new_keyfile_offset: u64,
    /// Keyslot for the new passphrase (default: the first free one).
    #[arg(
        short = 'S',
        long = "key-slot",
        alias = "new-key-slot",
        value_name = "N"
    )]
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

/// Parses --hash for keyslot verbs.
pub fn parse_hash(h: &str) -> CliResult<HashAlg> {
    HashAlg::parse(h).map_err(|e| {
        let mut c = from_crypto(&e, "--hash");
        c.code = Code::Usage;
        c.hint = "use sha1, sha256 or sha512".into();
        c
    })
}

/// Reads a new passphrase: from `file` (key-file semantics) or asked twice.
pub fn new_passphrase(
    file: &Option<PathBuf>,
    size: Option<u64>,
    offset: u64,
) -> CliResult<Passphrase> {
    let src = KeySource {
        key_file: file.clone(),
        keyfile_size: size,
        keyfile_offset: offset,
    };
    src.read("Enter new passphrase for key slot: ", true)
}

/// Runs `keyslot add`.
pub fn run(a: Args) -> CliResult {
    let place = common::place(&a.volume, a.header.as_deref());
    let hash = parse_hash(&a.hash)?;
    let io = crate::isolate::header_io(common::open_header(&a.volume, a.header.as_deref(), true)?);
    let mut luks = common::load(&io, &place)?;
    let old = a
        .key
        .source()
        .read("Enter any existing passphrase: ", false)?;
    let backend = a.crypto_backend.backend();
    // Long KDFs are announced (a stop signal ends this key process at
    // once, before anything is written: see isolate.rs).
    let drawing = crate::kdf_time::announce_unlock(&luks, None, true);
    let (_slot, vk) = luks
        .unlock(&io, &old, None, backend)
        .map_err(|e| from_luks(e, &place))?;
    drop(drawing);
    drop(old);
    let new = new_passphrase(&a.new_key_file, a.new_keyfile_size, a.new_keyfile_offset)?;
    let kdf = a.kdf.make(luks.version(), hash, vk.len())?;
    let drawing =
        crate::kdf_time::for_kdf(&kdf, vk.len(), "the new keyslot").and_then(|e| e.announce(true));
    let slot = luks
        .add_keyslot(&io, vk.as_slice(), &new, a.key_slot, &kdf, backend)
        .map_err(|e| from_luks(e, &place))?;
    drop(drawing);
    io.sync_all()
        .map_err(|e| crate::exit::CliError::io("cannot sync the header", &place, &e))?;
    eprintln!("Key slot {slot} created.");
    Ok(())
}
