//! [`Refusals`]: the server's lines about clients it turned away (a full
//! server, one address past its share, a failed TLS handshake), for the
//! daemon's log on standard error. At most one line a second, so that a
//! client opening thousands of connections cannot flood the log; the next
//! line says how many were left out.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a refusal is written at most.
const EVERY: Duration = Duration::from_secs(1);

/// Rate-limited log lines about refused clients.
#[derive(Default)]
pub(crate) struct Refusals {
    /// When the last line was written, and how many were left out since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Refusals {
    /// Writes `line()` unless a line was written less than a second ago
    /// (then only counts it); answers whether it was written.
    pub(crate) fn note(&self, line: impl FnOnce() -> String) -> bool {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.0.is_some_and(|t| now.duration_since(t) < EVERY) {
            s.1 += 1;
            return false;
        }
        let left_out = std::mem::take(&mut s.1);
        s.0 = Some(now);
        drop(s);
        if left_out > 0 {
            eprintln!(
                "cryptkeep nbd: {} ({left_out} more refused since the last such line)",
                line()
            );
        } else {
            eprintln!("cryptkeep nbd: {}", line());
        }
        true
    }
}

/// Who a connection came from, for these lines.
pub(crate) fn peer_name(ip: Option<std::net::IpAddr>) -> String {
    ip.map_or_else(|| "a local client".to_string(), |a| a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_at_most() {
        let r = Refusals::default();
        assert!(r.note(|| "first".into()));
        for _ in 0..1000 {
            assert!(!r.note(|| panic!("a refusal within the second was written")));
        }
        assert_eq!(r.state.lock().unwrap().1, 1000);
        // A second later the next line is written, and the count starts over.
        r.state.lock().unwrap().0 = Some(Instant::now() - EVERY);
        assert!(r.note(|| "again".into()));
        assert_eq!(r.state.lock().unwrap().1, 0);
    }
}
