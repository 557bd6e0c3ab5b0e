//! [`NameCache`]: the names a file system whose name key is with a key
//! holder (the keep) has already encrypted or decrypted, found either way,
//! so that a name looked up and then created, or listed and then removed,
//! costs one request to the holder rather than two, and a directory whose
//! names were all seen before (made through the mount, or listed once)
//! lists again with no request at all. EME is deterministic and a
//! permutation: a directory IV and a plaintext name always give the same
//! encrypted name and back, so a remembered pair is exactly what the
//! holder would answer.
//!
//! It holds plaintext names, which the process serving the file system
//! sees in every request anyway; never a key.

use std::collections::HashMap;
use std::sync::Mutex;

/// Pairs kept in each of the two generations at most.
const MAX_ENTRIES: usize = 1 << 18;

/// What a pair costs a generation, in bytes: its two names and the two
/// tables' share of it ([`pair_cost`]). A generation is full at this
/// many, which bounds the memory of the whole cache to a few tens of MiB
/// whatever the names: about 100 000 pairs of a source tree's short names
/// (the 83 731 entries of a Linux tree fit in one generation, so a walk
/// over it finds every name it made or listed before), or 18 000 of the
/// longest (255 bytes, 344 encrypted).
const MAX_BYTES: usize = 24 << 20;

/// The cost of one pair: each name is stored twice (as a key in one
/// table, as a value in the other), and each of the two table entries
/// holds a directory IV, two boxed-slice headers and the allocator's and
/// the table's overhead.
fn pair_cost(plain: &[u8], cipher: &str) -> usize {
    2 * (plain.len() + cipher.len() + 80)
}

/// (directory IV, plaintext name) → encrypted name (base64url, not hashed).
type ToCipher = HashMap<([u8; 16], Box<[u8]>), Box<str>>;

/// (directory IV, encrypted name) → plaintext name.
type ToPlain = HashMap<([u8; 16], Box<str>), Box<[u8]>>;

/// One generation: every pair in both maps.
#[derive(Default)]
struct Generation {
    to_cipher: ToCipher,
    to_plain: ToPlain,
    bytes: usize,
}

impl Generation {
    fn full(&self) -> bool {
        self.to_cipher.len() >= MAX_ENTRIES || self.bytes >= MAX_BYTES
    }

    fn insert(&mut self, iv: &[u8; 16], plain: &[u8], cipher: &str) {
        // Either name already paired (never with another name, as EME is a
        // permutation, but the accounting must not depend on it) is taken
        // out first, both ways.
        self.take_by_plain(iv, plain);
        self.take_by_cipher(iv, cipher);
        self.to_cipher
            .insert((*iv, Box::from(plain)), Box::from(cipher));
        self.to_plain
            .insert((*iv, Box::from(cipher)), Box::from(plain));
        self.bytes += pair_cost(plain, cipher);
    }

    /// Takes the pair out of both maps, found by its plaintext name.
    fn take_by_plain(&mut self, iv: &[u8; 16], plain: &[u8]) -> Option<Box<str>> {
        let cipher = self.to_cipher.remove(&(*iv, Box::from(plain)))?;
        self.to_plain.remove(&(*iv, cipher.clone()));
        self.bytes = self.bytes.saturating_sub(pair_cost(plain, &cipher));
        Some(cipher)
    }

    /// Takes the pair out of both maps, found by its encrypted name.
    fn take_by_cipher(&mut self, iv: &[u8; 16], cipher: &str) -> Option<Box<[u8]>> {
        let plain = self.to_plain.remove(&(*iv, Box::from(cipher)))?;
        self.to_cipher.remove(&(*iv, plain.clone()));
        self.bytes = self.bytes.saturating_sub(pair_cost(&plain, cipher));
        Some(plain)
    }
}

/// The newer generation, then the older one.
#[derive(Default)]
struct Generations(Generation, Generation);

impl Generations {
    /// Adds a pair to the newer generation; when that is full it becomes
    /// the older one, and the older one goes: what was remembered last is
    /// kept, so a walk that lists ahead of what it removes (`rm -r` of a
    /// tree larger than one generation) still finds every name it listed.
    fn insert(&mut self, iv: &[u8; 16], plain: &[u8], cipher: &str) {
        if self.0.full() {
            self.1 = std::mem::take(&mut self.0);
        }
        self.0.insert(iv, plain, cipher);
    }
}

/// Encrypted and plaintext names of valid pairs, by directory IV.
#[derive(Default)]
pub(crate) struct NameCache {
    maps: Mutex<Generations>,
}

impl NameCache {
    /// The encrypted name of `plain` in the directory with IV `iv`, if known.
    /// A pair found in the older generation moves to the newer one, so a
    /// name in constant use stays.
    pub(crate) fn get(&self, iv: &[u8; 16], plain: &[u8]) -> Option<String> {
        let mut g = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = g.0.to_cipher.get(&(*iv, Box::from(plain))) {
            return Some(c.to_string());
        }
        let c = g.1.take_by_plain(iv, plain)?;
        g.insert(iv, plain, &c);
        Some(c.into())
    }

    /// The plaintext name that `cipher` decrypts to in the directory with
    /// IV `iv`, if known; moves the pair up as [`NameCache::get`] does.
    pub(crate) fn plain_of(&self, iv: &[u8; 16], cipher: &str) -> Option<Vec<u8>> {
        let mut g = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = g.0.to_plain.get(&(*iv, Box::from(cipher))) {
            return Some(p.to_vec());
        }
        let p = g.1.take_by_cipher(iv, cipher)?;
        g.insert(iv, &p, cipher);
        Some(p.into())
    }

    /// Remembers that `plain` encrypts to `cipher` under `iv` (and back).
    pub(crate) fn put(&self, iv: &[u8; 16], plain: &[u8], cipher: &str) {
        let mut g = self.maps.lock().unwrap_or_else(|p| p.into_inner());
        g.insert(iv, plain, cipher);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_directory_both_ways() {
        let c = NameCache::default();
        c.put(&[1; 16], b"a", "X");
        assert_eq!(c.get(&[1; 16], b"a").as_deref(), Some("X"));
        assert_eq!(c.plain_of(&[1; 16], "X").as_deref(), Some(&b"a"[..]));
        assert_eq!(c.get(&[2; 16], b"a"), None);
        assert_eq!(c.plain_of(&[2; 16], "X"), None);
        assert_eq!(c.get(&[1; 16], b"b"), None);
        assert_eq!(c.plain_of(&[1; 16], "Y"), None);
    }

    fn sizes(c: &NameCache) -> (usize, usize, usize, usize) {
        let g = c.maps.lock().unwrap();
        (
            g.0.to_cipher.len(),
            g.0.to_plain.len(),
            g.1.to_cipher.len(),
            g.1.to_plain.len(),
        )
    }

    #[test]
    fn keeps_the_last_generation_when_full() {
        let c = NameCache::default();
        // Names of one length: every pair costs the same.
        let cipher = |i: u32| format!("c{i:07}");
        let plain = |i: u32| i.to_le_bytes();
        let cap = MAX_BYTES
            .div_ceil(pair_cost(&plain(0), &cipher(0)))
            .min(MAX_ENTRIES) as u32;
        let n = cap * 2 + 10;
        for i in 0..n {
            c.put(&[0; 16], &plain(i), &cipher(i));
        }
        let cap = cap as usize;
        assert_eq!(sizes(&c), (10, 10, cap, cap), "bounded");
        // The last cap + 10 pairs are all there, both ways; older ones not.
        let first_kept = n - cap as u32 - 10;
        assert!(c.get(&[0; 16], &plain(first_kept)).is_some());
        assert!(c.plain_of(&[0; 16], &cipher(first_kept + 1)).is_some());
        assert!(c.get(&[0; 16], &plain(n - 1)).is_some());
        assert!(c.get(&[0; 16], &plain(first_kept - 1)).is_none());
        assert!(c.plain_of(&[0; 16], &cipher(first_kept - 1)).is_none());
        // One found in the older generation moves up (both ways) and
        // outlives it, whichever way it is asked for.
        c.put(&[0; 16], b"in use", "u");
        for i in 0..2 * cap as u32 {
            c.put(&[1; 16], &plain(i), &cipher(i));
            if i % 1000 == 0 {
                assert_eq!(c.get(&[0; 16], b"in use").as_deref(), Some("u"), "{i}");
            }
            if i % 1000 == 500 {
                assert_eq!(c.plain_of(&[0; 16], "u").as_deref(), Some(&b"in use"[..]));
            }
        }
    }

    #[test]
    fn a_pair_put_again_or_replaced_is_counted_once() {
        let c = NameCache::default();
        c.put(&[0; 16], b"a", "X");
        c.put(&[0; 16], b"a", "X");
        c.put(&[0; 16], b"a", "Y");
        c.put(&[0; 16], b"b", "Y");
        let g = c.maps.lock().unwrap();
        assert_eq!(g.0.to_cipher.len(), 1);
        assert_eq!(g.0.to_plain.len(), 1);
        assert_eq!(g.0.bytes, pair_cost(b"b", "Y"));
    }

    #[test]
    fn long_names_fill_a_generation_by_bytes() {
        let c = NameCache::default();
        let plain = [b'p'; 255];
        let per_pair = pair_cost(&plain, &"c".repeat(344));
        // The pair that finds the first generation full starts the second.
        let n = MAX_BYTES / per_pair + 2;
        for i in 0..n {
            let cipher = format!("{i:0>344}");
            c.put(
                &[0; 16],
                &[&plain[..250], &(i as u32).to_le_bytes()[..], b"x"].concat(),
                &cipher,
            );
        }
        let (new, _, old, _) = sizes(&c);
        assert!(old < MAX_ENTRIES && old > 0, "{old}");
        assert_eq!(new + old, n);
        let g = c.maps.lock().unwrap();
        assert!(g.0.bytes < MAX_BYTES + per_pair && g.1.bytes < MAX_BYTES + per_pair);
        assert_eq!(g.1.bytes, old * per_pair);
    }
}
