//! [`DataRunMemo`]: the last run of data `SEEK_HOLE` found in a backing
//! file, so the next allocation-map question inside it is answered
//! without asking the kernel again.
//!
//! `SEEK_HOLE` walks the file's page map up to the next hole, which in a
//! file written throughout is its end: a client that asks for the map of
//! each part in turn (nbdcopy asks per 128 MiB) made every answer cost a
//! walk to the end of the file. Only data is remembered: a write never
//! turns data into a hole, and [`crate::Engine::discard`] forgets the run
//! (a generation bumped after the punch keeps a walk that began before it
//! from remembering what it saw). A run remembered too long could only
//! call a hole data, which is always a correct answer.

use std::sync::Mutex;

#[derive(Debug, Default)]
struct DataRun {
    gen: u64,
    start: u64,
    end: u64,
}

/// The remembered data run of one engine (offsets in its data segment).
#[derive(Debug, Default)]
pub(crate) struct DataRunMemo(Mutex<DataRun>);

impl DataRunMemo {
    /// The end of the remembered run that holds `pos`, and the generation
    /// under which to remember a new one.
    pub(crate) fn at(&self, pos: u64) -> (Option<u64>, u64) {
        let r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let end = (r.start <= pos && pos < r.end).then_some(r.end);
        (end, r.gen)
    }

    /// Remembers `[start, end)` as data, unless the run was forgotten
    /// since generation `gen` was read.
    pub(crate) fn remember(&self, gen: u64, start: u64, end: u64) {
        let mut r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if r.gen == gen {
            (r.start, r.end) = (start, end);
        }
    }

    /// Forgets the run (a hole was punched, or may have been).
    pub(crate) fn forget(&self) {
        let mut r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        r.gen = r.gen.wrapping_add(1);
        (r.start, r.end) = (0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_until_forgotten_and_not_across_a_forget() {
        let m = DataRunMemo::default();
        let (none, g) = m.at(10);
        assert_eq!(none, None);
        m.remember(g, 10, 100);
        assert_eq!(m.at(10).0, Some(100));
        assert_eq!(m.at(99).0, Some(100));
        assert_eq!(m.at(100).0, None);
        assert_eq!(m.at(9).0, None);
        // A walk that began before a punch does not remember its answer.
        let (_, g) = m.at(500);
        m.forget();
        assert_eq!(m.at(50).0, None);
        m.remember(g, 500, 900);
        assert_eq!(m.at(600).0, None);
    }
}
