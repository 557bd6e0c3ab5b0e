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

/// Pairs kept before the cache starts over. Only valid names go in (at
/// most 255 bytes, their encrypted form at most 344): under 40 MiB at
/// worst, a few MiB for a real tree's names.
const MAX_ENTRIES: usize = 1 << 16;

/// (directory IV, plaintext name): what a pair is found by.
type Key = ([u8; 16], Box<[u8]>);

/// (directory IV, plaintext name) → encrypted name (base64url, not hashed).
#[derive(Default)]
pub(crate) struct NameCache {
    map: Mutex<HashMap<Key, Box<str>>>,
}

impl NameCache {
    /// The encrypted name of `plain` in the directory with IV `iv`, if known.
    pub(crate) fn get(&self, iv: &[u8; 16], plain: &[u8]) -> Option<String> {
        let map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&(*iv, Box::from(plain))).map(|s| s.to_string())
    }

    /// Remembers that `plain` encrypts to `cipher` under `iv`. When full,
    /// the cache is emptied first: simple, and a tree walk refills it.
    pub(crate) fn put(&self, iv: &[u8; 16], plain: &[u8], cipher: &str) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert((*iv, Box::from(plain)), Box::from(cipher));
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
    fn starts_over_when_full() {
        let c = NameCache::default();
        for i in 0..MAX_ENTRIES as u32 + 1 {
            c.put(&[0; 16], &i.to_le_bytes(), "n");
        }
        let n = c.map.lock().unwrap().len();
        assert!((1..=MAX_ENTRIES).contains(&n), "{n} entries");
    }
}
