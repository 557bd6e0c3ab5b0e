//! The client's connections: up to N live ones, shared by every request
//! (each carries several at once); a request goes to the least busy one. A
//! connection that broke is dropped and counted as missing until a
//! reconnect replaces it.

use std::sync::{Arc, Mutex, MutexGuard};

use super::conn::Conn;

/// The connections and how many are missing.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    state: Mutex<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    live: Vec<Arc<Conn>>,
    missing: usize,
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A pool of the given connections.
    pub(crate) fn new(conns: Vec<Conn>) -> Pool {
        Pool {
            state: Mutex::new(Slots {
                live: conns.into_iter().map(Arc::new).collect(),
                missing: 0,
            }),
        }
    }

    /// The live connection with the fewest requests in flight; None when
    /// no connection is live (a reconnect is needed).
    pub(crate) fn pick(&self) -> Option<Arc<Conn>> {
        let s = self.lock();
        s.live
            .iter()
            .filter(|c| !c.is_dead())
            .min_by_key(|c| c.load())
            .or_else(|| s.live.first())
            .cloned()
    }

    /// Drops a connection that broke (once, however many of its requests
    /// report it).
    pub(crate) fn lose(&self, c: &Arc<Conn>) {
        let mut s = self.lock();
        if let Some(i) = s.live.iter().position(|x| Arc::ptr_eq(x, c)) {
            s.live.swap_remove(i);
            s.missing += 1;
        }
    }

    /// How many connections are missing (only meaningful while no request
    /// runs).
    pub(crate) fn missing(&self) -> usize {
        self.lock().missing
    }

    /// Adds a new connection in place of a missing one.
    pub(crate) fn add(&self, c: Conn) {
        let mut s = self.lock();
        s.missing = s.missing.saturating_sub(1);
        s.live.push(Arc::new(c));
    }

    /// Takes every connection (for the disconnect at the end).
    pub(crate) fn drain(&self) -> Vec<Arc<Conn>> {
        std::mem::take(&mut self.lock().live)
    }
}
