//! A whole host of a keep: this program starts itself again as a runtime
//! keep, has it seal, unseal and hash, and stops it. The same binary is
//! both sides, as `cryptkeep` is: the spawner runs `/proc/self/exe` with an
//! argument the program recognises, and that process becomes the keep.
//!
//!     cargo run --release -p cryptkeep-keep --example runtime_keep
//!
//! (Linux; the keep locks itself down with seccomp and Landlock, and puts
//! its heap in `memfd_secret` memory where the kernel has it.)

// The one line a host adds: the keep's allocations go to secret memory.
cryptkeep_keep::install_secret_heap!();

use cryptkeep_keep::calls::KeepCalls;
use cryptkeep_keep::keep::{Keep, ProcessKeep};
use cryptkeep_keep::server::{run_runtime, ServerConfig};
use cryptkeep_keep::spawn::SpawnConfig;

/// The argument that makes this program the keep.
const BE_THE_KEEP: &str = "--be-the-keep";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some(BE_THE_KEEP) {
        // The keep: serves until the spawner closes the channel.
        let r = run_runtime(ServerConfig::default());
        std::process::exit(r.map_or_else(|f| f.code, |()| 0));
    }
    // The spawner: start the keep (this program again) and use it.
    let (keep, facts) = ProcessKeep::spawn(SpawnConfig {
        args: vec![BE_THE_KEEP.into()],
        ..SpawnConfig::default()
    })?;
    for (k, v) in &facts {
        println!("keep {k}: {v}");
    }
    let blob = keep.seal(b"only this keep opens it")?;
    assert_eq!(keep.unseal(&blob)?, b"only this keep opens it");
    let digest = keep.sha256(b"abc")?;
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    println!(
        "sealed {} bytes into {}; SHA-256(abc) = {hex}",
        23,
        blob.len()
    );
    // A runtime keep has no volume: sector crypto is not among its operations.
    let mut sector = vec![0u8; 4096];
    let refused = keep.call(
        cryptkeep_keep::proto::OP_ENCRYPT_SECTORS,
        0,
        &mut sector,
        4096,
    );
    println!(
        "sector encryption in a runtime keep: {}",
        match refused {
            Ok(_) => "answered (unexpected)".to_string(),
            Err(e) => e.to_string(),
        }
    );
    keep.destroy()?;
    Ok(())
}
