//! The Network Block Device protocol (NBD's `doc/proto.md`), for cryptkeep:
//! the wire constants shared by the server that exports a volume and the
//! client that keeps a volume's ciphertext on an NBD server, and the
//! [`server`]: fixed newstyle negotiation, structured replies,
//! `base:allocation`, several requests in flight per connection, over unix
//! or TCP sockets, for any [`server::BlockStore`].

#![forbid(unsafe_code)]

mod error;
pub mod proto;
pub mod server;

pub use error::Error;
