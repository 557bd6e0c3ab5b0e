//! Writes a file's bytes into a standalone crc32c integrity device through
//! [`cryptkeep_integrity::Device`] in journal mode — optionally "losing
//! power" right after the journal commit, so the next activation must
//! replay it. Used by the kernel oracle test
//! (`tests/kernel/integrity-to-cryptkeep.sh`); also a small example of the
//! library.
//!
//! usage: integrity_write DEVICE OFFSET_BYTES FILE [--crash-after-commit]

use std::path::Path;
use std::process::ExitCode;

use cryptkeep_integrity::{Device, Mode, TagHash, DEFAULT_BUFFER_SECTORS};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: integrity_write DEVICE OFFSET_BYTES FILE [--crash-after-commit]");
        return ExitCode::from(1);
    }
    let run = || -> Result<(), String> {
        let offset: u64 = args[2].parse().map_err(|e| format!("offset: {e}"))?;
        let data = std::fs::read(&args[3]).map_err(|e| format!("{}: {e}", args[3]))?;
        let mut d = Device::open(
            Path::new(&args[1]),
            TagHash::Crc32c,
            Mode::Journal,
            DEFAULT_BUFFER_SECTORS,
        )
        .map_err(|e| e.to_string())?;
        if args.get(4).map(String::as_str) == Some("--crash-after-commit") {
            d.crash_after_commit();
        }
        d.write_at(&data, offset).map_err(|e| e.to_string())?;
        d.flush().map_err(|e| e.to_string())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("integrity_write: {e}");
            ExitCode::from(1)
        }
    }
}
