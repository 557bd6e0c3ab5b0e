//! [`NameCache`]: the encrypted names a file system whose name key is with
//! a key holder (the keep) has already seen, so that a name looked up and
//! then created, or listed and then removed, costs one request to the
//! holder rather than two. EME is deterministic: a directory IV and a
//! plaintext name always give the same encrypted name, so a remembered
//! pair is exactly what the holder would answer.
//!
//! It holds plaintext names, which the process serving the file system
//! sees in every request anyway; never a key.

use std::collections::HashMap;
use std::sync::Mutex;

/// Pairs kept in each of the two generations. Only valid names go in (at
/// most 255 bytes, their encrypted form at most 344): about 100 MiB at
/// worst with the tables' own overhead, a few MiB for a real tree's names.
const MAX_ENTRIES: usize = 1 << 16;

/// (directory IV, plaintext name): what a pair is found by.
type Key = ([u8; 16], Box<[u8]>);

type Map = HashMap<Key, Box<str>>;

/// (directory IV, plaintext name) → encrypted name (base64url, not hashed).
#[derive(Default)]
pub(crate) struct NameCache {
    /// The newer generation, then the older one.
    maps: Mutex<(Map, Map)>,
}

impl NameCache {
    /// The encrypted name of `plain` in the directory with IV `iv`, if known.
    /// A pair found in the older generation moves to the newer one, so a
    /// name in constant use stays.
    pub(crate) fn get(&self, iv: &[u8; 16], plain: &[u8]) -> Option<String> {
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        let k = (*iv, Box::from(plain));
        if let Some(c) = maps.0.get(&k) {
            return Some(c.to_string());
        }
        let c = maps.1.remove(&k)?;
        let found = c.to_string();
        if maps.0.len() >= MAX_ENTRIES {
            maps.1 = std::mem::take(&mut maps.0);
        }
        maps.0.insert(k, c);
        Some(found)
    }

    /// Remembers that `plain` encrypts to `cipher` under `iv`. When the
    /// newer generation is full it becomes the older one, and the older
    /// one goes: what was remembered last is kept, so a walk that lists
    /// ahead of what it removes (`rm -r` of a tree larger than one
    /// generation) still finds every name it listed.
    pub(crate) fn put(&self, iv: &[u8; 16], plain: &[u8], cipher: &str) {
        let mut maps = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        if maps.0.len() >= MAX_ENTRIES {
            maps.1 = std::mem::take(&mut maps.0);
        }
        maps.0.insert((*iv, Box::from(plain)), Box::from(cipher));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_directory() {
        let c = NameCache::default();
        c.put(&[1; 16], b"a", "X");
        assert_eq!(c.get(&[1; 16], b"a").as_deref(), Some("X"));
        assert_eq!(c.get(&[2; 16], b"a"), None);
        assert_eq!(c.get(&[1; 16], b"b"), None);
    }

    #[test]
    fn keeps_the_last_generation_when_full() {
        let c = NameCache::default();
        let n = MAX_ENTRIES as u32 * 2 + 10;
        for i in 0..n {
            c.put(&[0; 16], &i.to_le_bytes(), "n");
        }
        let (new, old) = {
            let m = c.maps.lock().unwrap();
            (m.0.len(), m.1.len())
        };
        assert_eq!((new, old), (10, MAX_ENTRIES), "bounded");
        // The last MAX_ENTRIES + 10 pairs are all there, older ones not.
        let first_kept = n - MAX_ENTRIES as u32 - 10;
        assert!(c.get(&[0; 16], &first_kept.to_le_bytes()).is_some());
        assert!(c.get(&[0; 16], &(n - 1).to_le_bytes()).is_some());
        assert!(c.get(&[0; 16], &(first_kept - 1).to_le_bytes()).is_none());
        // One found in the older generation moves up and outlives it.
        c.put(&[0; 16], b"in use", "u");
        for i in 0..2 * MAX_ENTRIES as u32 {
            c.put(&[1; 16], &i.to_le_bytes(), "n");
            if i % 1000 == 0 {
                assert_eq!(c.get(&[0; 16], b"in use").as_deref(), Some("u"), "{i}");
            }
        }
    }
}
