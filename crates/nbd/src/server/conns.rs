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
//! One TCP client address (for IPv6, one /64 network: a host there picks
//! from billions of addresses) holds at most its own share of the slots
//! ([`super::Limits::max_per_address`]); past it, its next connection is
//! refused. Connections from one address, however many, cannot lock every
//! other address out. Loopback clients are local, like unix-socket ones,
//! and count only against the total.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::stream::Stream;

/// One live connection.
struct Conn {
    stream: Stream,
    /// The peer's address group (TCP only, not loopback; see [`group`]).
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
    /// why) if all are past their negotiation. A TCP peer whose address
    /// group holds `per_address` (at least 1, at most `max`) already is
    /// refused.
    pub(crate) fn admit(
        &self,
        s: &Stream,
        max: usize,
        per_address: usize,
    ) -> Result<Admitted, &'static str> {
        self.admit_as(s, s.peer_ip().and_then(group), max, per_address)
    }

    /// [`Conns::admit`] of a connection from address group `peer`.
    fn admit_as(
        &self,
        s: &Stream,
        peer: Option<std::net::IpAddr>,
        max: usize,
        per_address: usize,
    ) -> Result<Admitted, &'static str> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = peer {
            let ours = open
                .values()
                .filter(|c| !c.evicted && c.peer == Some(p))
                .count();
            if ours >= per_address.clamp(1, max.max(1)) {
                return Err("its address holds its whole share of the connections");
            }
        }
        let live = open.values().filter(|c| !c.evicted).count();
        if live >= max {
            if open.len() >= 2 * max {
                return Err("too many connections are still closing");
            }
            let oldest = open
                .values_mut()
                .filter(|c| !c.evicted && c.negotiating.load(Ordering::Relaxed))
                .min_by_key(|c| c.since)
                .ok_or("every connection is in use")?;
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

/// The group a TCP peer's connections count in: its IPv4 address, or its
/// IPv6 /64 network; `None` for loopback (local clients, not capped).
fn group(ip: std::net::IpAddr) -> Option<std::net::IpAddr> {
    use std::net::{IpAddr, Ipv6Addr};
    if ip.is_loopback() {
        return None;
    }
    Some(match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
    })
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

    fn unix() -> (Stream, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        (Stream::Unix(ours), theirs)
    }

    #[test]
    fn addresses_group_by_ipv4_address_and_ipv6_slash_64_and_loopback_is_not_capped() {
        let g = |a: &str| group(a.parse().unwrap()).map(|i| i.to_string());
        assert_eq!(g("192.0.2.7"), Some("192.0.2.7".into()));
        assert_eq!(g("2001:db8:1:2:aaaa::1"), Some("2001:db8:1:2::".into()));
        assert_eq!(g("2001:db8:1:2:bbbb::9"), g("2001:db8:1:2::5"));
        assert_ne!(g("2001:db8:1:3::1"), g("2001:db8:1:2::1"));
        assert_eq!(g("127.0.0.1"), None);
        assert_eq!(g("::1"), None);
    }

    #[test]
    fn one_address_holds_at_most_its_share_and_never_locks_others_out() {
        let a: std::net::IpAddr = "192.0.2.1".parse().unwrap();
        let b: std::net::IpAddr = "2001:db8::".parse().unwrap();
        let conns = Conns::default();
        // A opens two sessions (past their negotiation): its share.
        let mut held = Vec::new();
        for _ in 0..2 {
            let (s, peer) = unix();
            let adm = conns.admit_as(&s, Some(a), 4, 2).expect("within A's share");
            adm.negotiating.store(false, Ordering::Relaxed);
            held.push((adm, peer));
        }
        // A's third is refused, though 2 slots are free; nothing of A's ends.
        let (s, _p) = unix();
        let e = conns.admit_as(&s, Some(a), 4, 2).err();
        assert_eq!(
            e,
            Some("its address holds its whole share of the connections")
        );
        for (_, peer) in &held {
            peer.set_nonblocking(true).unwrap();
            assert!(
                (&*peer).read(&mut [0u8; 1]).is_err(),
                "A's session stays open"
            );
        }
        // B, and a local client, still get in; then the server is full.
        let (s, _b) = unix();
        conns.admit_as(&s, Some(b), 4, 2).expect("B is admitted");
        let (s, _l) = unix();
        conns
            .admit_as(&s, None, 4, 2)
            .expect("a local client is admitted");
        // A session of A ends: A gets in again.
        conns.leave(held.pop().unwrap().0.id);
        let (s, _p2) = unix();
        assert!(conns.admit_as(&s, Some(a), 4, 2).is_ok());
        // A share of 0 is read as 1, one larger than the cap as the cap.
        let fresh = Conns::default();
        let (s, _x) = unix();
        assert!(fresh.admit_as(&s, Some(a), 4, 0).is_ok());
        let (s, _y) = unix();
        assert!(fresh.admit_as(&s, Some(a), 4, 0).is_err());
    }
}
