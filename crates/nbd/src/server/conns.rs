//! [`Conns`]: the live connections of a server — handles to shut them
//! down, their count (the connection cap), and how long each has been
//! negotiating (a client that drips its options a byte at a time is cut
//! off at the negotiation limit).
//!
//! When every slot is taken, a new connection ends the one that has been
//! negotiating longest (never one past its negotiation): connections that
//! sit idle before or during the TLS handshake cannot keep a client out
//! whose handshake takes milliseconds, unless they are opened faster than
//! that, one per slot. At most twice the cap exist while the ended ones
//! finish.
//!
//! One TCP client address holds at most its own share of the slots
//! ([`super::Limits::max_per_address`]): past it, its next connection ends
//! that address's longest negotiation or is refused. Sessions from one
//! address, however many, cannot lock every other address out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::stream::Stream;

/// One live connection.
struct Conn {
    stream: Stream,
    /// The peer's IP address (TCP only).
    peer: Option<std::net::IpAddr>,
    since: Instant,
    negotiating: Arc<AtomicBool>,
    /// Shut down to make room for a newer connection.
    evicted: bool,
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
    /// Registers a connection; when `max` are open, ends the one that has
    /// been negotiating longest to make room, or refuses (`Err`, saying
    /// why) if all are past their negotiation. A TCP peer with
    /// `per_address` open already is held to that number the same way,
    /// among its own.
    pub(crate) fn admit(
        &self,
        s: &Stream,
        max: usize,
        per_address: usize,
    ) -> Result<Admitted, &'static str> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.len() >= 2 * max {
            return Err("too many connections are still closing");
        }
        let peer = s.peer_ip();
        let mine = |c: &Conn| peer.is_some() && c.peer == peer;
        let ours = open.values().filter(|c| !c.evicted && mine(c)).count();
        let live = open.values().filter(|c| !c.evicted).count();
        // Full: for this address (room is made among its own), or for all.
        let full = if peer.is_some() && ours >= per_address {
            Some(true)
        } else if live >= max {
            Some(false)
        } else {
            None
        };
        if let Some(own_only) = full {
            let oldest = open
                .values_mut()
                .filter(|c| !c.evicted && c.negotiating.load(Ordering::Relaxed))
                .filter(|c| !own_only || mine(c))
                .min_by_key(|c| c.since)
                .ok_or(if own_only {
                    "its address holds its whole share of the connections"
                } else {
                    "every connection is in use"
                })?;
            oldest.stream.shutdown();
            oldest.evicted = true;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let negotiating = Arc::new(AtomicBool::new(true));
        let conn = Conn {
            stream: s
                .try_clone()
                .map_err(|_| "its socket could not be duplicated")?,
            peer,
            since: Instant::now(),
            negotiating: negotiating.clone(),
            evicted: false,
        };
        open.insert(id, conn);
        Ok(Admitted { id, negotiating })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_full_server_ends_the_longest_negotiation_not_a_session() {
        let conns = Conns::default();
        let mut peers = Vec::new();
        let mut admitted = Vec::new();
        for _ in 0..2 {
            let (ours, theirs) = UnixStream::pair().unwrap();
            admitted.push(conns.admit(&Stream::Unix(ours), 2, 2).unwrap());
            peers.push(theirs);
            std::thread::sleep(Duration::from_millis(5));
        }
        // The first is past its negotiation; the second still negotiates.
        admitted[0].negotiating.store(false, Ordering::Relaxed);
        let (ours, _theirs) = UnixStream::pair().unwrap();
        assert!(conns.admit(&Stream::Unix(ours), 2, 2).is_ok());
        // The second was ended (its peer reads end of file), the first not.
        let mut b = [0u8; 1];
        assert_eq!(peers[1].read(&mut b).unwrap(), 0);
        peers[0].set_nonblocking(true).unwrap();
        assert!(peers[0].read(&mut b).is_err(), "the session stays open");
        // Now every live connection is past negotiation or the newest:
        // the newest is ended next; with sessions only, refused.
        admitted.push(
            conns
                .admit(&Stream::Unix(UnixStream::pair().unwrap().0), 2, 2)
                .unwrap(),
        );
        for a in &admitted {
            a.negotiating.store(false, Ordering::Relaxed);
        }
        conns.leave(admitted[1].id);
        assert!(conns
            .admit(&Stream::Unix(UnixStream::pair().unwrap().0), 2, 2)
            .is_err());
    }

    /// A TCP connection to the dual-stack listener `l` through loopback
    /// address `to` (127.0.0.1 or ::1, which are then also the peer
    /// address the server sees): ours and the client's end.
    fn tcp_via(l: &std::net::TcpListener, to: &str) -> (Stream, std::net::TcpStream) {
        let ip: std::net::IpAddr = to.parse().unwrap();
        let client = std::net::TcpStream::connect((ip, l.local_addr().unwrap().port())).unwrap();
        let (ours, _) = l.accept().unwrap();
        (Stream::Tcp(ours), client)
    }

    #[test]
    fn one_address_holds_at_most_its_share_and_never_locks_others_out() {
        // A dual-stack listener: 127.0.0.1 and ::1 are two client addresses.
        let Ok(l) = std::net::TcpListener::bind("[::]:0") else {
            eprintln!("skipped: no IPv6 here");
            return;
        };
        if std::net::TcpStream::connect(("::1", l.local_addr().unwrap().port())).is_err() {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        }
        let _ = l.accept();
        let conns = Conns::default();
        // Address A (127.0.0.1) opens two sessions (past their negotiation): its share.
        let mut keep = Vec::new();
        for _ in 0..2 {
            let (s, peer) = tcp_via(&l, "127.0.0.1");
            let a = conns.admit(&s, 4, 2).expect("within A's share");
            a.negotiating.store(false, Ordering::Relaxed);
            keep.push((a, peer));
        }
        // A's third: refused (both of A's are sessions), though 2 slots are free.
        let (s, _peer) = tcp_via(&l, "127.0.0.1");
        let e = conns.admit(&s, 4, 2).err();
        assert_eq!(
            e,
            Some("its address holds its whole share of the connections"),
            "A went past its share"
        );
        // Address B (::1) still gets in.
        let (s, mut b_peer) = tcp_via(&l, "::1");
        conns.admit(&s, 4, 2).expect("B is admitted");
        // A session of A ends: A gets in again; its new connection, still
        // negotiating, is the one A's next connection ends.
        conns.leave(keep.pop().unwrap().0.id);
        let (s, mut a_peer) = tcp_via(&l, "127.0.0.1");
        assert!(conns.admit(&s, 4, 2).is_ok());
        let (s, _p) = tcp_via(&l, "127.0.0.1");
        assert!(conns.admit(&s, 4, 2).is_ok(), "A's negotiation makes room");
        let mut buf = [0u8; 1];
        assert_eq!(
            a_peer.read(&mut buf).unwrap(),
            0,
            "A's older negotiation was ended"
        );
        // B's connection was never touched.
        b_peer.set_nonblocking(true).unwrap();
        assert!(b_peer.read(&mut buf).is_err(), "B's connection stays open");
    }
}
