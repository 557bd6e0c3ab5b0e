//! The keep's enclave-style operations (secGear's set, from the secGear report):
//! SHA-256, AES-256-GCM, sealing to the keep's key, RSA-2048. Pure
//! functions over AWS-LC (`aws-lc-sys`), usable on the host side as well,
//! so host/keep comparisons run the same code; [`dispatch::Ops`] answers
//! them from the rings. No I/O, no threads.

pub mod dispatch;
pub mod gcm;
pub mod overlay;
pub mod rsa;
pub mod seal;

use aws_lc_sys as sys;

/// Makes a worker's buffer `v` at least `len` bytes long. It only grows,
/// so a worker's requests after its first pay no zero-fill.
pub(crate) fn grow_buffer(v: &mut Vec<u8>, len: usize) {
    if v.len() < len {
        v.resize(len, 0);
    }
}

/// SHA-256 (FIPS 180-4) of `data`, with AWS-LC (SHA-NI where present).
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    // SAFETY: data is a valid slice; out has 32 bytes.
    unsafe { sys::SHA256(data.as_ptr(), data.len(), out.as_mut_ptr()) };
    out
}
