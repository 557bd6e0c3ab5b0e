//! The transport between the I/O process and the keep: a sealed memfd
//! ([`Arena`]) with a submission and a completion ring per queue (single
//! producer, single consumer; indices on their own cache lines) and one
//! data slot per queue. One request covers a whole FUSE request (up to the
//! slot size); as many are in flight as there are queues. Waiting sides spin
//! briefly (`spin.rs`), then sleep on a futex. The keep checks every descriptor
//! ([`serve`]); the I/O side ([`Client`]) notices a dead keep.

mod arena;
mod client;
mod entry;
mod futex;
mod server;
mod spin;

pub use arena::{Arena, ArenaConfig, MAX_QUEUES, MAX_WORKERS};
pub use client::{Client, Slot};
pub use entry::{Completion, Submission};
pub use server::{serve, serve_with, Handler, Server, ThreadInit};
