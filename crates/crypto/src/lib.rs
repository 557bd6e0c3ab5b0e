//! cryptkeep's cryptography: dm-crypt sector ciphers with the kernel's IV
//! semantics, the KDFs LUKS uses (PBKDF2, Argon2i, Argon2id), the LUKS
//! anti-forensic splitter, hashes, and zeroizing secret types.
//!
//! Two backends implement every sector cipher behind [`sector::SectorCipher`]:
//! [`Backend::Accelerated`] (aws-lc) and [`Backend::Portable`] (pure Rust).
//! Nothing in this crate does I/O.

pub mod aead;
pub mod af;
pub mod backend;
pub mod bench;
pub mod eme;
pub mod error;
pub mod hash;
pub mod kdf;
pub mod rand;
pub mod secret;
pub mod sector;
pub mod spec;

pub use backend::Backend;
pub use error::Error;
pub use hash::HashAlg;
pub use kdf::{Pbkdf, PbkdfKind};
pub use secret::SecretBytes;
pub use sector::{new_sector_cipher, SectorCipher};
pub use spec::CipherSpec;
