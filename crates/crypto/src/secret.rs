//! Heap buffers for key material: locked in RAM where possible, zeroized on drop.

use std::fmt;
use zeroize::Zeroize;

/// A fixed-length heap buffer for secrets (keys, passphrases, derived keys).
///
/// The bytes are wiped with `zeroize` when the value is dropped, and the pages
/// are `mlock(2)`ed on a best-effort basis so they are not swapped out (a
/// failing `mlock`, e.g. over `RLIMIT_MEMLOCK`, is ignored). `Debug` prints the
/// length only. Like cryptsetup's `crypt_safe_alloc`.
pub struct SecretBytes {
    buf: Vec<u8>,
    locked: bool,
}

impl SecretBytes {
    /// A zero-filled secret of `len` bytes.
    pub fn new(len: usize) -> SecretBytes {
        SecretBytes::from_vec(vec![0u8; len])
    }

    /// Takes ownership of `v` (no copy is made; earlier copies the caller may
    /// have made are the caller's to wipe).
    pub fn from_vec(v: Vec<u8>) -> SecretBytes {
        let locked = lock(&v);
        SecretBytes { buf: v, locked }
    }

    /// Copies `s` into a new secret.
    pub fn from_slice(s: &[u8]) -> SecretBytes {
        let mut out = SecretBytes::new(s.len());
        out.buf.copy_from_slice(s);
        out
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when the secret has no bytes.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

/// Best-effort `mlock` of the vector's allocation; returns whether it worked.
fn lock(v: &Vec<u8>) -> bool {
    if v.capacity() == 0 {
        return false;
    }
    // SAFETY: the pointer and capacity describe one live allocation owned by
    // `v`; mlock only changes the pages' residency and never reads or writes them.
    unsafe { libc::mlock(v.as_ptr().cast(), v.capacity()) == 0 }
}

impl Drop for SecretBytes {
    fn drop(&mut self) {
        // Wipe the whole capacity; the allocation stays until `buf` drops.
        self.buf.zeroize();
        if self.locked {
            // SAFETY: same allocation that was locked in `from_vec`; it is
            // still owned by `self.buf` (zeroize keeps the capacity).
            unsafe {
                libc::munlock(self.buf.as_ptr().cast(), self.buf.capacity());
            }
        }
    }
}

impl Clone for SecretBytes {
    fn clone(&self) -> SecretBytes {
        SecretBytes::from_slice(&self.buf)
    }
}

impl fmt::Debug for SecretBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretBytes({} bytes)", self.buf.len())
    }
}

impl PartialEq for SecretBytes {
    /// Constant-time in the contents (length is not secret).
    fn eq(&self, other: &SecretBytes) -> bool {
        ct_eq(&self.buf, &other.buf)
    }
}

impl Eq for SecretBytes {}

/// Compares two byte strings in time independent of their contents.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_contents() {
        let s = SecretBytes::from_slice(b"hunter2");
        assert_eq!(format!("{s:?}"), "SecretBytes(7 bytes)");
    }

    #[test]
    fn clone_and_eq() {
        let mut s = SecretBytes::new(4);
        s.as_mut_slice().copy_from_slice(&[1, 2, 3, 4]);
        let c = s.clone();
        assert_eq!(c.as_slice(), &[1, 2, 3, 4]);
        assert_eq!(s, c);
        assert!(!SecretBytes::new(0).as_slice().iter().any(|_| true));
        assert!(SecretBytes::new(0).is_empty());
        assert_ne!(s, SecretBytes::new(4));
    }
}
