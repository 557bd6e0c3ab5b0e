//! [`Conns`]: the live connections of a server — handles to shut them
//! down, their count (the connection cap), and how long each has been
//! negotiating (a client that drips its options a byte at a time is cut
//! off at the negotiation limit).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::stream::Stream;

/// One live connection.
struct Conn {
    stream: Stream,
    since: Instant,
    negotiating: Arc<AtomicBool>,
}

/// The live connections.
#[derive(Default)]
pub(crate) struct Conns {
    open: Mutex<HashMap<u64, Conn>>,
    gone: Condvar,
    next: AtomicU64,
}

/// A connection's registration: its id and the flag it clears when the
/// negotiation is over.
pub(crate) struct Admitted {
    pub(crate) id: u64,
    pub(crate) negotiating: Arc<AtomicBool>,
}

impl Conns {
    /// Registers a connection unless `max` are open already.
    pub(crate) fn admit(&self, s: &Stream, max: usize) -> Option<Admitted> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= max {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let negotiating = Arc::new(AtomicBool::new(true));
        let conn = Conn {
            stream: s.try_clone().ok()?,
            since: Instant::now(),
            negotiating: negotiating.clone(),
        };
        open.insert(id, conn);
        Some(Admitted { id, negotiating })
    }

    /// Forgets a connection whose thread is done.
    pub(crate) fn leave(&self, id: u64) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.remove(&id);
        self.gone.notify_all();
    }

    /// Shuts down the connections still negotiating after `limit`.
    pub(crate) fn reap(&self, limit: Duration) {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        for c in open.values() {
            if c.negotiating.load(Ordering::Relaxed) && c.since.elapsed() > limit {
                c.stream.shutdown();
            }
        }
    }

    /// Shuts every connection down and waits until their threads are done.
    pub(crate) fn close_all(&self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            for c in open.values() {
                c.stream.shutdown();
            }
            if open.is_empty() {
                return;
            }
            let (g, _) = self
                .gone
                .wait_timeout(open, Duration::from_millis(100))
                .unwrap_or_else(|p| p.into_inner());
            open = g;
        }
    }
}
