//! The client's connections: up to N live ones, each used by one request
//! at a time; a request waits for a free one. A connection that broke is
//! dropped and counted as missing until a reconnect replaces it.

use std::sync::{Condvar, Mutex, MutexGuard};

use super::conn::Conn;

/// The connections and how many are missing.
#[derive(Debug, Default)]
pub(crate) struct Pool {
    state: Mutex<Slots>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct Slots {
    idle: Vec<Conn>,
    in_use: usize,
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
                idle: conns,
                in_use: 0,
                missing: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// A free connection, waiting while all live ones are busy; None when
    /// no connection is live (a reconnect is needed).
    pub(crate) fn take(&self) -> Option<Conn> {
        let mut s = self.lock();
        loop {
            if let Some(c) = s.idle.pop() {
                s.in_use += 1;
                return Some(c);
            }
            if s.in_use == 0 {
                return None;
            }
            s = self.freed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Returns a connection that is still good.
    pub(crate) fn give_back(&self, c: Conn) {
        let mut s = self.lock();
        s.in_use -= 1;
        s.idle.push(c);
        self.freed.notify_one();
    }

    /// Drops a connection that broke.
    pub(crate) fn lose(&self, c: Conn) {
        drop(c);
        let mut s = self.lock();
        s.in_use -= 1;
        s.missing += 1;
        self.freed.notify_all();
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
        s.idle.push(c);
        self.freed.notify_one();
    }

    /// Takes every idle connection (for the disconnect at the end).
    pub(crate) fn drain(&self) -> Vec<Conn> {
        std::mem::take(&mut self.lock().idle)
    }
}
