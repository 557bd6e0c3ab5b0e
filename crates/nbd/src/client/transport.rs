//! What a pipelined connection needs from its transport: a read half (used
//! by one thread at a time), a write half (used under a lock), and a way to
//! hang up that wakes both. A plain socket gives them with `try_clone`; a
//! TLS stream cannot be split into independent halves (one session state
//! for both directions), so its handles share that state (`tls/stream.rs`:
//! one reader, writers in turn, the lock never held while waiting on the
//! socket), which is exactly how the pipe uses them.

use std::io::{self, Read, Write};

use crate::stream::Stream;

/// Ends the connection in both directions: a blocked read or write on
/// either half returns.
pub(crate) type Hangup = Box<dyn Fn() + Send + Sync>;

/// The halves of one connection.
pub(crate) struct Halves {
    /// Replies come from here.
    pub reader: Box<dyn Read + Send>,
    /// Requests go here.
    pub writer: Box<dyn Write + Send>,
    /// Hangs up both.
    pub hangup: Hangup,
}

/// A transport that can be split into [`Halves`].
pub(crate) trait Split {
    /// The halves; timeouts set before the split stay in force.
    fn split(self) -> io::Result<Halves>;
}

impl Split for Stream {
    fn split(self) -> io::Result<Halves> {
        let writer = self.try_clone()?;
        let handle = self.try_clone()?;
        Ok(Halves {
            reader: Box::new(self),
            writer: Box::new(writer),
            hangup: Box::new(move || handle.shutdown()),
        })
    }
}
