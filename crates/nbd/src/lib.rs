//! The Network Block Device protocol (NBD's `doc/proto.md`), for cryptkeep:
//! the wire constants ([`proto`]); the [`server`] that exports a volume
//! (fixed newstyle negotiation, structured replies, `base:allocation`,
//! several requests in flight per connection, over unix or TCP sockets, for
//! any [`server::BlockStore`]); the [`client::Client`] that keeps a
//! volume's ciphertext on an NBD server; and [`tls`], `NBD_OPT_STARTTLS`
//! for both with rustls.

#![deny(unsafe_code)]

pub mod client;
mod error;
pub mod proto;
pub mod server;
mod sockbuf;
mod stream;
pub mod tls;

pub use error::Error;
