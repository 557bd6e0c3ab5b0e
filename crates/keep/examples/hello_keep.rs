//! The keep's helloworld: this program starts itself again as a runtime
//! keep, makes one call that brings the keep's greeting back, prints it and
//! destroys the keep — create, one call, destroy, as the secGear report's
//! secgear_helloworld does with an enclave. `hello_host` is the same
//! program without the keep.
//!
//!     cargo build --release -p cryptkeep-keep --examples
//!     /usr/bin/time -f '%U %S %M' target/release/examples/hello_keep
//!
//! (Linux; the keep locks itself down with seccomp and Landlock and keeps
//! its heap in `memfd_secret` memory where the kernel has it.)

// The keep's allocations go to secret memory.
cryptkeep_keep::install_secret_heap!();

use cryptkeep_keep::calls::KeepCalls;
use cryptkeep_keep::keep::ProcessKeep;
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
    let (keep, _facts) = ProcessKeep::spawn(SpawnConfig {
        args: vec![BE_THE_KEEP.into()],
        ..SpawnConfig::default()
    })?;
    let greeting = keep.hello()?;
    println!("{}", String::from_utf8_lossy(&greeting));
    keep.destroy()?;
    Ok(())
}
