//! `cryptkeep keyslot list VOLUME [--json]`: the keyslots and their KDFs.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_crypto::Pbkdf;

use super::common;
use crate::exit::CliResult;

/// Options of `keyslot list`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn kdf_text(k: &Option<Pbkdf>) -> String {
    match k {
        Some(Pbkdf::Pbkdf2 { hash, iterations }) => {
            format!("pbkdf2 {} {iterations} iterations", hash.name())
        }
        Some(Pbkdf::Argon2i {
            time,
            memory_kib,
            parallel,
        }) => format!("argon2i time {time}, memory {memory_kib} KiB, {parallel} threads"),
        Some(Pbkdf::Argon2id {
            time,
            memory_kib,
            parallel,
        }) => format!("argon2id time {time}, memory {memory_kib} KiB, {parallel} threads"),
        _ => String::new(),
    }
}

/// Runs `keyslot list`.
pub fn run(a: Args) -> CliResult {
    let place = common::place(&a.volume, a.header.as_deref());
    let io = common::open_header(&a.volume, a.header.as_deref(), false)?;
    let luks = common::load(&io, &place)?;
    let slots = luks.keyslots();
    if a.json {
        let v: Vec<_> = slots
            .iter()
            .map(|k| serde_json::json!({"slot": k.slot, "active": k.active, "kdf": kdf_text(&k.kdf), "priority": k.priority}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return Ok(());
    }
    for k in &slots {
        if k.active {
            println!("Key slot {}: ENABLED  {}", k.slot, kdf_text(&k.kdf));
        } else {
            println!("Key slot {}: DISABLED", k.slot);
        }
    }
    Ok(())
}
