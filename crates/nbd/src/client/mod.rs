//! The NBD client: a volume's ciphertext on an NBD server.
//!
//! - `uri.rs`: libnbd's URIs (`nbd://HOST[:PORT]/EXPORT`,
//!   `nbd+unix:///EXPORT?socket=PATH`, and `nbds` for TLS);
//! - `handshake.rs`: fixed newstyle, structured replies, `NBD_OPT_GO`
//!   with block sizes; `secure.rs`: `NBD_OPT_STARTTLS` and the TLS
//!   handshake for `nbds` URIs;
//! - `wire.rs`, `reply.rs`: requests, and replies checked and reassembled;
//! - `pipe.rs`: several requests in flight on one connection, replies
//!   matched by cookie; `transport.rs`: the halves of a connection it needs;
//! - `conn.rs`: one connection; `pool.rs`: several;
//! - `session.rs`: [`Client`], with reconnect and the replay of un-flushed
//!   writes (`unflushed.rs`);
//! - `backing.rs`: the client as the volume engine's backing device and as
//!   the LUKS header code's `BlockIo`.

mod backing;
mod conn;
mod handshake;
mod pipe;
mod pool;
mod reply;
mod secure;
mod session;
#[cfg(test)]
mod tests;
mod transport;
mod unflushed;
mod uri;
mod wire;

pub use handshake::ExportInfo;
pub use session::{Client, Options};
pub use uri::{Transport, Uri, DEFAULT_PORT};
