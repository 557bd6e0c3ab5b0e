//! The integration tests of cryptkeep-luks, one module per topic, in one
//! test binary.

mod authenticated;
mod common;
mod cryptsetup_features;
mod cryptsetup_to_us;
mod kdf_limits;
mod keyslots;
mod malformed;
mod memory;
mod mutations;
mod recovery;
mod us_to_cryptsetup;
