//! `cryptkeep dump VOLUME` (alias `luksDump`): print the header like
//! `cryptsetup luksDump`, as JSON with `--json`, or the volume key with
//! `--dump-volume-key` in cryptsetup's layout.

use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::common::{self, BackendArg, KeyFileArgs};
use crate::exit::{from_luks, CliResult};
use crate::passphrase::confirm;

/// Options of `dump`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Print the header as JSON.
    #[arg(long)]
    pub json: bool,
    /// Print the volume key (asks for a passphrase and a confirmation).
    #[arg(long = "dump-volume-key", alias = "dump-master-key")]
    pub dump_volume_key: bool,
    #[command(flatten)]
    pub key: KeyFileArgs,
    /// Try only this keyslot.
    #[arg(short = 'S', long = "key-slot", value_name = "N")]
    pub key_slot: Option<usize>,
    /// Do not ask for confirmation.
    #[arg(short = 'q', long = "batch-mode")]
    pub batch_mode: bool,
    /// Crypto backend for the keyslot decryption.
    #[arg(long = "crypto-backend", value_enum, default_value = "accelerated")]
    pub crypto_backend: BackendArg,
}

/// Formats key bytes as cryptsetup's "MK dump:" block (16 bytes a line).
pub fn key_block(key: &[u8]) -> String {
    let mut s = String::new();
    for (i, chunk) in key.chunks(16).enumerate() {
        s.push_str(if i == 0 { "MK dump:\t" } else { "\t\t" });
        for b in chunk {
            s.push_str(&format!("{b:02x} "));
        }
        s.push('\n');
    }
    s
}

/// Runs `dump`.
pub fn run(a: Args) -> CliResult {
    let place = common::place(&a.volume, a.header.as_deref());
    let io = common::open_header(&a.volume, a.header.as_deref(), false)?;
    let luks = common::load(&io, &place)?;
    if !a.dump_volume_key {
        if a.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&luks.dump_json()).unwrap_or_default()
            );
        } else {
            print!("{}", luks.dump());
        }
        return Ok(());
    }
    confirm(
        "Header dump with volume key is sensitive information\nwhich allows access to encrypted partition without a passphrase.\nThis dump should be stored encrypted in a safe place.",
        &place,
        a.batch_mode,
    )?;
    let pass = a.key.source().read(
        &format!("Enter passphrase for {}: ", a.volume.display()),
        false,
    )?;
    // The KDF runs on a helper thread while this one waits for it or for
    // SIGINT/SIGTERM/SIGHUP, which stop the command at once.
    let drawing = crate::kdf_time::for_unlock(&luks, a.key_slot).and_then(|e| e.announce(true));
    let (slot, backend) = (a.key_slot, a.crypto_backend.backend());
    let (luks, unlocked) = crate::interrupt::run(&place, move || {
        let r = luks.unlock(&io, &pass, slot, backend);
        (luks, r)
    })?;
    drop(drawing);
    let (_slot, vk) = unlocked.map_err(|e| from_luks(e, &place))?;
    // An authenticated segment's cipher is a string, not a sector cipher.
    let spec = if luks.is_authenticated() {
        luks.authenticated_segment()
            .map_err(|e| from_luks(e, &place))?
            .encryption
    } else {
        luks.segment()
            .map_err(|e| from_luks(e, &place))?
            .cipher
            .to_string()
    };
    let (cname, cmode) = spec.split_once('-').unwrap_or((spec.as_str(), ""));
    if a.json {
        let hex: zeroize::Zeroizing<String> =
            zeroize::Zeroizing::new(vk.as_slice().iter().map(|b| format!("{b:02x}")).collect());
        let v = serde_json::json!({
            "cipher": spec, "uuid": luks.uuid(), "payload_offset": luks.data_offset() / 512,
            "key_size": vk.len() * 8, "volume_key": hex.as_str(),
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    // The text holds the key: keep it in a buffer wiped on drop.
    let mut out = zeroize::Zeroizing::new(format!(
        "LUKS header information for {}\n",
        a.volume.display()
    ));
    out.push_str(&format!("Cipher name:   \t{cname}\n"));
    out.push_str(&format!("Cipher mode:   \t{cmode}\n"));
    out.push_str(&format!("Payload offset:\t{}\n", luks.data_offset() / 512));
    out.push_str(&format!("UUID:          \t{}\n", luks.uuid()));
    out.push_str(&format!("MK bits:       \t{}\n", vk.len() * 8));
    out.push_str(&zeroize::Zeroizing::new(key_block(vk.as_slice())));
    print!("{}", out.as_str());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn key_block_matches_cryptsetup_layout() {
        let key: Vec<u8> = (0u8..32).collect();
        let s = super::key_block(&key);
        assert_eq!(
            s,
            "MK dump:\t00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f \n\t\t10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f \n"
        );
    }
}
