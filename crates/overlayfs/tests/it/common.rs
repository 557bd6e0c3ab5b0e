//! Helpers of the overlay file system tests: a cheap cipher directory of our own (the
//! gocryptfs oracle, test trees and temporary directories come from the
//! testkit and are re-exported here).

use std::path::Path;

pub use cryptkeep_testkit::gocryptfs::{gocryptfs_init, passfile, Mount, PASSWORD};
pub use cryptkeep_testkit::tree::{assert_same_tree, bytes, make_tree, set_xattr, TreeOpts};
pub use cryptkeep_testkit::{alone, need, run_cmd, TempDir};

/// A new cipher directory at `cipher` in gocryptfs's default format, with
/// a cheap scrypt cost (N = 2^10) and [`PASSWORD`], unlocked.
pub fn init_cheap(cipher: &Path) -> cryptkeep_overlay::CipherDir {
    let opts = cryptkeep_overlay::InitOptions {
        scrypt_log_n: 10,
        ..cryptkeep_overlay::InitOptions::default()
    };
    cryptkeep_overlay::CipherDir::init(cipher, PASSWORD.as_bytes(), &opts)
        .unwrap()
        .0
}
