//! The keep: volume keys unlocked and held only in an isolated process.
//!
//! Both halves are here: [`spawn`] and [`keep::ProcessKeep`] start a keep
//! and talk to it; [`server`] (`run_volume`, `run_overlay`,
//! `run_runtime`) is what the keep process runs. A program that runs keeps
//! installs the secret heap with one line,
//! [`install_secret_heap!`](crate::install_secret_heap) (see there why).
//! `examples/runtime_keep.rs` is a whole host in 60 lines.
//!
//! - [`shm`]: the transport, a sealed memfd shared with the I/O process that
//!   holds submission/completion rings and data buffers, with spin-then-futex
//!   waiting and bounds-checked descriptors.
//! - [`sandbox`]: what the keep does to itself before it serves: not
//!   dumpable, no core, fds closed, seccomp allowlist, Landlock.
//! - [`secret_mem`]: key pages in `memfd_secret(2)` memory (removed from the
//!   kernel's direct map), falling back to `mlock` + `MADV_DONTDUMP`.
//! - [`server`]: the three kinds of keep and their request handlers; each
//!   answers only its own operations ([`proto::VOLUME_OPS`] or, for an
//!   authenticated volume, [`proto::AUTH_VOLUME_OPS`],
//!   [`proto::OVERLAY_OPS`], [`proto::RUNTIME_OPS`]).
//! - [`ops`]: the runtime keep's enclave-style operations (seal/unseal,
//!   SHA-256, AES-256-GCM, RSA-2048) and the overlay keep's block and name
//!   crypto, as functions.
//! - [`detach`]: the one way a daemon leaves its terminal (setsid, standard
//!   streams on `/dev/null` and a log).
//! - [`wipe`]: dead stack frames and vector registers wiped after key work.
//! - [`overlay_keys`]: the overlay file system's key holder served by a
//!   keep (`fs mount --keep`).
//! - [`crypt`] and [`auth_crypt`]: the volume engine's seams
//!   ([`crypt::KeepCrypt`] for plain volumes, [`auth_crypt::KeepAuthCrypt`]
//!   for authenticated ones) served by a keep.
//! - [`proto`]: operation codes and status codes on the rings.
//! - [`Error`]: the crate's one error type.

pub mod auth_crypt;
pub mod calls;
pub mod control;
pub mod crypt;
pub mod detach;
mod error;
pub mod keep;
pub mod ops;
pub mod overlay_keys;
pub mod proto;
pub mod rings;
pub mod sandbox;
pub mod sched;
pub mod secret_heap;
pub mod secret_mem;
pub mod server;
pub mod service;
pub mod sha_stream;
pub mod spawn;
pub mod wipe;

pub use error::Error;
pub use rings as shm;
