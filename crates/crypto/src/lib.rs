//! cryptkeep's cryptography: dm-crypt sector ciphers with the kernel's IV
//! semantics, the KDFs LUKS uses (PBKDF2, Argon2i, Argon2id), the LUKS
//! anti-forensic splitter, hashes, and zeroizing secret types.
//! Nothing in this crate does I/O.
//!
//! # What other crates use
//!
//! | module | items | standard |
//! |---|---|---|
//! | [`spec`] | [`CipherSpec`] (`parse("aes-xts-plain64")`, `parse_luks1("aes", "xts-plain64")`, `Display`, `luks1_cipher_name`/`luks1_cipher_mode`, `check_key_size`), [`spec::ChainMode`], [`spec::IvMode`] | dm-crypt table syntax |
//! | [`sector`] | [`SectorCipher`] (`encrypt`/`decrypt(buf, sector_size, first_iv, iv_step)`, `spec`, `key_len`, `backend`, `implementation`), [`new_sector_cipher`] | IEEE 1619 XTS, SP 800-38A CBC/ECB, kernel IV generators |
//! | [`aead`] | [`aead::new_aead`], [`aead::Aead`] (`seal`/`open`), [`aead::AeadAlg`], [`aead::AeadImpl`], [`aead::new_aead_with`] | SP 800-38D GCM (our VAES/AVX2 code or aws-lc), RFC 5297 AES-SIV, XChaCha20-Poly1305 |
//! | [`sector_aead`] | [`sector_aead::AuthSpec`] (`parse("aes-xts-plain64", "hmac(sha256)")`, `from_cli`, `tag_bytes`/`iv_bytes`/`tuple_bytes`, `kernel_name`), [`sector_aead::SectorAead`] (`seal`/`open(sector, data, tuples)`) | dm-crypt AEAD sectors (LUKS2 `--integrity`): `authenc(hmac(sha*),xts(aes))`, AEGIS-128, RFC 8439 ChaCha20-Poly1305, SP 800-38D GCM |
//! | [`backend`] | [`Backend`] (`Accelerated` = aws-lc, the default; `Portable` = pure Rust) | |
//! | [`kdf`] | [`Pbkdf`], [`PbkdfKind`], [`kdf::derive`], [`kdf::calibrate`], [`kdf::estimate`], [`kdf::pbkdf2_iterations_per_second`] | RFC 8018, RFC 9106, cryptsetup's benchmark rules |
//! | [`af`] | [`af::split`], [`af::merge`], [`af::material_len`] | LUKS1 on-disk format §2.4 (`af.c`) |
//! | [`hash`] | [`HashAlg`] (`parse`, `name`, `digest_len`, `digest`, `digest_parts`, `hmac`) | FIPS 180-4, RIPEMD-160, RFC 2104 |
//! | [`secret`] | [`SecretBytes`] (mlocked, zeroized on drop, `Debug` shows the length only), [`secret::ct_eq`] | |
//! | [`rand`] | [`rand::fill_random`] | getrandom(2) |
//! | [`mod@bench`] | [`bench::cipher_throughput`], [`bench::aead_throughput`], [`bench::sector_aead_throughput`] for `cryptkeep benchmark` | like `cryptsetup benchmark` |
//! | [`error`] | [`Error`], the crate's one error enum | |
//!
//! # Sector numbering
//!
//! A buffer passed to [`SectorCipher::encrypt`] is whole sectors; sector `i`
//! of the buffer gets the IV of sector number `first_iv + i * iv_step`. LUKS2
//! and dm-crypt count IVs in 512-byte units unless `iv_large_sectors` is set,
//! so 4096-byte sectors usually mean `iv_step = 8`.
//!
//! # Backends
//!
//! Both backends give identical bytes (the tests run every known-answer
//! vector on both and compare them on random data). aws-lc has no
//! AES-128/192-XTS and refuses XTS keys with equal halves; an accelerated
//! request for those is served by the portable code and
//! [`SectorCipher::backend`] then reports [`Backend::Portable`].

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
pub mod sector_aead;
pub mod spec;

pub use backend::Backend;
pub use error::Error;
pub use hash::HashAlg;
pub use kdf::{Pbkdf, PbkdfKind};
pub use secret::SecretBytes;
pub use sector::{new_sector_cipher, SectorCipher};
pub use spec::CipherSpec;
