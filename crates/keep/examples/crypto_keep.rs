//! The keep's crypto example: this program starts itself again as a
//! runtime keep and has it do SHA-256, AES-256-GCM (encrypt and decrypt,
//! with the keep's message key) and RSA-2048 (key generation, OAEP-SHA-256
//! encrypt and decrypt, the private key staying in the keep) of one
//! 23-byte string, then destroys it — as the secGear report's
//! secgear_crypto does with an enclave. `crypto_host` is the same work
//! without the keep.
//!
//!     cargo build --release -p cryptkeep-keep --examples
//!     /usr/bin/time -f '%U %S %M' target/release/examples/crypto_keep

// The keep's allocations go to secret memory.
cryptkeep_keep::install_secret_heap!();

use cryptkeep_keep::calls::KeepCalls;
use cryptkeep_keep::keep::ProcessKeep;
use cryptkeep_keep::server::{run_runtime, ServerConfig};
use cryptkeep_keep::spawn::SpawnConfig;
use zeroize::Zeroizing;

/// The argument that makes this program the keep.
const BE_THE_KEEP: &str = "--be-the-keep";
/// The message: 23 bytes, as in the report.
const MSG: &[u8; 23] = b"Hello, cryptkeep keep!!";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

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
    println!("SHA-256: {}", hex(&keep.sha256(MSG)?));

    let ct = keep.gcm_encrypt(MSG)?;
    let pt = Zeroizing::new(keep.gcm_decrypt(&ct)?);
    if pt.as_slice() != MSG {
        return Err("AES-256-GCM: the decryption differs from the message".into());
    }
    println!("AES-256-GCM: {} bytes sealed and opened", ct.len());

    let public = keep.rsa_generate()?;
    let ct = keep.rsa_encrypt(MSG)?;
    let pt = Zeroizing::new(keep.rsa_decrypt(&ct)?);
    if pt.as_slice() != MSG {
        return Err("RSA-2048: the decryption differs from the message".into());
    }
    println!(
        "RSA-2048: key generated ({} bytes public), {} bytes encrypted and decrypted",
        public.len(),
        ct.len()
    );
    keep.destroy()?;
    Ok(())
}
