//! The NBD server: one export of a [`BlockStore`] over unix or TCP sockets,
//! fixed newstyle negotiation only.
//!
//! - `listener.rs` accepts connections (at most [`Limits::max_connections`]
//!   at once, [`Limits::max_per_address`] from one TCP address; more are
//!   closed at once) and stops the server; `conns.rs` tracks them and cuts
//!   off negotiations longer than [`Limits::negotiation_limit`];
//!   `refusals.rs` logs the clients turned away, a line a second at most;
//! - `handshake.rs` runs the negotiation, `options.rs` parses option
//!   payloads and `optreply.rs` builds the option replies; with TLS
//!   configured ([`serve_tls`]), `NBD_OPT_STARTTLS` upgrades the
//!   connection and the negotiation goes on inside TLS (`starttls.rs`);
//! - `request.rs` parses and checks transmission requests,
//!   `transmission.rs` runs them: one reader per connection, a small worker
//!   pool, replies (`reply.rs`) serialized by a writer lock, and at most
//!   [`Limits::in_flight_bytes`] of requests in flight per connection;
//! - `budget.rs` is the in-flight byte budget;
//! - `sockpath.rs` binds, checks and removes a unix socket through its
//!   parent directory's descriptor.
//!
//! Every length from the wire is checked before anything is allocated: a
//! hostile client can only end its own connection.

mod budget;
mod conns;
mod handshake;
mod listener;
mod options;
mod optreply;
mod pool;
mod refusals;
mod reply;
mod request;
// The server's only unsafe code: the `*at` calls on the socket's directory.
#[allow(unsafe_code)]
mod sockpath;
mod starttls;
mod transmission;

use std::time::Duration;

pub use cryptkeep_volume::BlockStore;
pub use listener::{serve, serve_tls, Endpoint, Server};
pub use sockpath::{SocketId, SocketPath};

use crate::proto::tflag;
use crate::tls::TlsMode;

/// What the server exports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Export {
    /// The export's name (clients asking for `""`, the default export, get
    /// it too).
    pub name: String,
    /// A human-readable description (`NBD_INFO_DESCRIPTION`), if any.
    pub description: Option<String>,
    /// Refuse writes (`EPERM`) even if the store takes them.
    pub read_only: bool,
    /// Pass `NBD_CMD_TRIM` to the store as a discard.
    pub allow_trim: bool,
}

/// Bounds on what clients may ask of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Connections served at once; more are closed as soon as accepted.
    pub max_connections: usize,
    /// Connections one TCP client address may hold at once (half the cap
    /// by default): one address cannot take every slot.
    pub max_per_address: usize,
    /// The largest read or write request (`NBD_INFO_BLOCK_SIZE` maximum).
    pub max_block: u32,
    /// The preferred block size advertised.
    pub preferred_block: u32,
    /// Bytes of requests (read replies and write payloads) in flight per
    /// connection; the reader waits beyond it.
    pub in_flight_bytes: usize,
    /// Worker threads per connection. One per core, from two (so a reply
    /// can go out while the next request runs) to four: more only wait
    /// on the store calls' limit and cost wake-ups (measured on two cores
    /// with nbdcopy and fio through nbdfuse: four per connection were
    /// 5–20 % slower than two, for 8 % more CPU time per GiB read). Each
    /// worker keeps up to two reply buffers.
    pub workers: usize,
    /// Store operations running at once over all connections (more wait;
    /// replies are sent outside this limit). The engine already spreads one
    /// large request over the cores: more than one call per core only adds
    /// threads that wait on one another and on the keep (measured on two
    /// cores with nbdcopy: 4 calls at once were slower than 2).
    pub store_calls: usize,
    /// The largest option payload read; larger ones get `NBD_REP_ERR_TOO_BIG`.
    pub max_option: u32,
    /// Options per negotiation before the connection is closed.
    pub max_options: u32,
    /// How long the negotiation may wait on the client at each step.
    pub handshake_timeout: Duration,
    /// How long a whole negotiation may last (a client dripping its
    /// options is cut off).
    pub negotiation_limit: Duration,
    /// How long a reply may wait for the client to read it.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 32,
            max_per_address: 16,
            max_block: 32 << 20,
            preferred_block: 4096,
            in_flight_bytes: 64 << 20,
            workers: cores().clamp(2, 4),
            store_calls: cores(),
            max_option: 16 << 10,
            max_options: 256,
            handshake_timeout: Duration::from_secs(10),
            negotiation_limit: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// The CPUs this process may run on.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

impl Limits {
    /// These limits with `n` workers per connection (at least one).
    pub fn with_workers(mut self, n: usize) -> Limits {
        self.workers = n.max(1);
        self
    }

    /// These limits with at most `n` connections at once (at least one),
    /// half of them (rounded up) from one TCP address.
    pub fn with_max_connections(mut self, n: usize) -> Limits {
        self.max_connections = n.max(1);
        self.max_per_address = self.max_connections.div_ceil(2);
        self
    }
}

/// What the negotiation settled for one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Session {
    /// Structured replies were negotiated.
    pub(crate) structured: bool,
    /// `base:allocation` was selected (its context id is [`ALLOC_ID`]).
    pub(crate) alloc: bool,
}

/// The metadata context id of `base:allocation`.
pub(crate) const ALLOC_ID: u32 = 1;

/// The export as the negotiation sees it: its configuration and its
/// store's geometry.
#[derive(Clone, Debug)]
pub(crate) struct Shape {
    pub(crate) export: Export,
    pub(crate) size: u64,
    pub(crate) min_block: u32,
    pub(crate) read_only: bool,
    pub(crate) limits: Limits,
    /// TLS offered or required (`None`: `NBD_OPT_STARTTLS` is unsupported).
    pub(crate) tls: Option<TlsMode>,
}

impl Shape {
    /// The shape of `store` exported as `export`.
    pub(crate) fn of<S: BlockStore>(
        store: &S,
        export: Export,
        limits: Limits,
        tls: Option<TlsMode>,
    ) -> Shape {
        Shape {
            tls,
            read_only: export.read_only || store.read_only(),
            size: store.size(),
            min_block: store.block_size() as u32,
            export,
            limits,
        }
    }

    /// Whether a client asking for `name` means this export.
    pub(crate) fn matches(&self, name: &[u8]) -> bool {
        name.is_empty() || name == self.export.name.as_bytes()
    }

    /// The transmission flags for a session.
    pub(crate) fn tflags(&self, structured: bool) -> u16 {
        let mut f = tflag::HAS_FLAGS
            | tflag::SEND_FLUSH
            | tflag::SEND_FUA
            | tflag::SEND_WRITE_ZEROES
            | tflag::SEND_CACHE
            | tflag::CAN_MULTI_CONN;
        if structured {
            f |= tflag::SEND_DF;
        }
        if self.read_only {
            f |= tflag::READ_ONLY;
        } else if self.export.allow_trim {
            f |= tflag::SEND_TRIM;
        }
        f
    }

    /// Preferred block size: at least the minimum.
    pub(crate) fn preferred(&self) -> u32 {
        self.limits.preferred_block.max(self.min_block)
    }
}

#[cfg(test)]
mod testutil;

#[cfg(test)]
mod tests;
