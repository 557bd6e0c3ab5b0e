//! The integration tests of cryptkeep-crypto, one module per topic, in one
//! test binary.

mod af_luks;
mod argon2_cli;
mod bench;
mod common;
mod cross_backend;
mod kat_ciphers;
mod kat_kdf;
mod openssl_cli;
