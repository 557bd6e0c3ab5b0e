//! Helpers shared by the integration tests of cryptkeep's crates.
//!
//! Each crate has one integration-test binary (`tests/it/main.rs`) that
//! depends on this crate for what more than one crate's tests use:
//! - [`TempDir`]: a directory removed on drop;
//! - [`Rng`] and [`random_key`]: deterministic and random test data;
//! - [`need!`] and [`alone!`]: requirement marks (root, FUSE, loop devices,
//!   outside tools) that skip a test, or fail it under `CRYPTKEEP_TEST_ALL=1`,
//!   and a lock for tests that must not run beside others of their binary;
//! - [`run()`]: running an outside command that must succeed;
//! - [`mounts`]: guards for a tmpfs, a loop device and a mounted file system;
//! - [`gocryptfs`] and [`tree`]: the gocryptfs oracle and test trees;
//! - [`SharedMap`]: memory mapped twice, with a thread rewriting or
//!   watching it, for code that must hold up against a peer sharing its
//!   memory.
//!
//! Nothing here depends on cryptkeep's own crates, so every crate can use it.

pub mod alone;
pub mod gocryptfs;
pub mod mounts;
pub mod need;
pub mod rng;
pub mod run;
pub mod shared_map;
pub mod tempdir;
pub mod tree;

pub use rng::{random_key, Rng};
pub use run::{run, run_cmd};
pub use shared_map::{Rewriter, SharedMap, Watcher};
pub use tempdir::TempDir;
