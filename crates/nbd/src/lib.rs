//! The Network Block Device protocol (NBD's `doc/proto.md`), for cryptkeep:
//! the wire constants ([`proto`]); the [`server`] that exports a volume
//! (fixed newstyle negotiation, structured replies, `base:allocation`,
//! several requests in flight per connection, over unix or TCP sockets, for
//! any [`server::BlockStore`]); and the [`client::Client`] that keeps a
//! volume's ciphertext on an NBD server.

#![deny(unsafe_code)]

pub mod client;
mod error;
pub mod proto;
pub mod server;
mod stream;

pub use error::Error;
