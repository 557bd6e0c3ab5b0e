//! The host-only twin of `crypto_keep`: SHA-256, AES-256-GCM (encrypt and
//! decrypt) and RSA-2048 (key generation, OAEP-SHA-256 encrypt and decrypt)
//! of one 23-byte string, with the same library code the keep runs, in
//! this process. With `crypto_keep` it measures what the keep costs a
//! program that does a little cryptography (the secGear report's crypto
//! against secgear_crypto):
//!
//!     cargo build --release -p cryptkeep-keep --examples
//!     /usr/bin/time -f '%U %S %M' target/release/examples/crypto_host

use cryptkeep_keep::ops::{self, gcm::Gcm, rsa::RsaKeyPair};
use zeroize::Zeroizing;

/// The message: 23 bytes, as in the report.
const MSG: &[u8; 23] = b"Hello, cryptkeep keep!!";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("SHA-256: {}", hex(&ops::sha256(MSG)));

    let mut key = Zeroizing::new([0u8; 32]);
    cryptkeep_crypto::rand::fill_random(&mut key[..])?;
    let gcm = Gcm::new(&key);
    let ct = gcm.encrypt(MSG, &[])?;
    let pt = Zeroizing::new(gcm.decrypt(&ct, &[])?);
    if pt.as_slice() != MSG {
        return Err("AES-256-GCM: the decryption differs from the message".into());
    }
    println!("AES-256-GCM: {} bytes sealed and opened", ct.len());

    let rsa = RsaKeyPair::generate_2048()?;
    let ct = rsa.encrypt_oaep_sha256(MSG)?;
    let pt = Zeroizing::new(rsa.decrypt_oaep_sha256(&ct)?);
    if pt.as_slice() != MSG {
        return Err("RSA-2048: the decryption differs from the message".into());
    }
    println!(
        "RSA-2048: key generated ({} bytes public), {} bytes encrypted and decrypted",
        rsa.public_key_der().len(),
        ct.len()
    );
    Ok(())
}
