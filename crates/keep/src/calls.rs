//! Typed calls on any [`Keep`]: the library API other programs use to have
//! a keep hash, seal, encrypt and sign for them (secGear's operations). Each
//! call borrows a buffer, sends one request (or a stream of them for
//! SHA-256 of large inputs) and checks the answer's length.

use crate::keep::{Keep, SlotAccess};
use crate::proto::*;
use crate::Error;

/// AES-GCM nonce and tag overhead of sealed blobs and GCM messages.
const GCM_OVERHEAD: usize = 12 + 16;
/// Sealed-blob overhead: magic, nonce and tag.
const SEAL_OVERHEAD: usize = 4 + GCM_OVERHEAD;

/// Typed operations for every [`Keep`].
pub trait KeepCalls: Keep {
    /// A round trip that does nothing (the cost of a call).
    fn null_call(&self) -> Result<(), Error> {
        self.call(OP_NULL, 0, &mut [], 0).map(|_| ())
    }

    /// The keep's greeting ([`OP_HELLO`]; a runtime keep answers
    /// [`HELLO_GREETING`]): one call that brings a string back.
    fn hello(&self) -> Result<Vec<u8>, Error> {
        self.transform(OP_HELLO, &[], HELLO_GREETING.len())
    }

    /// SHA-256 of `data` computed inside the keep, streamed in requests of
    /// [`Keep::max_request`] bytes. Where the keep lends shared slots, two
    /// are used in turn: the next chunk is copied in while the keep hashes
    /// the current one.
    fn sha256(&self, data: &[u8]) -> Result<[u8; 32], Error> {
        let mut h = [0u8; 8];
        expect_len(
            self.call(OP_SHA256_BEGIN, 0, &mut h, 0)?,
            8,
            OP_SHA256_BEGIN,
        )?;
        let handle = u64::from_le_bytes(h);
        let slot = self.slot_len();
        if slot > 0 {
            sha_pipelined(self, handle, data, slot)?;
        } else {
            let step = self.max_request().max(1);
            let mut buf = vec![0u8; step.min(data.len()).max(32)];
            for part in data.chunks(step) {
                buf[..part.len()].copy_from_slice(part);
                self.call(OP_SHA256_UPDATE, handle, &mut buf[..part.len()], part.len())?;
            }
        }
        let mut out = [0u8; 32];
        let n = self.call(OP_SHA256_FINISH, handle, &mut out, 0)?;
        expect_len(n, 32, OP_SHA256_FINISH)?;
        Ok(out)
    }

    /// Seals `data` to the keep's sealing key (docs/format/sealed-blob.md).
    fn seal(&self, data: &[u8]) -> Result<Vec<u8>, Error> {
        self.transform(OP_SEAL, data, data.len() + SEAL_OVERHEAD)
    }

    /// Opens a blob made by [`KeepCalls::seal`] in a keep with the same
    /// sealing key.
    fn unseal(&self, blob: &[u8]) -> Result<Vec<u8>, Error> {
        self.transform(OP_UNSEAL, blob, blob.len())
    }

    /// AES-256-GCM encryption with the keep's message key: `nonce ‖ ct ‖ tag`.
    fn gcm_encrypt(&self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.transform(OP_GCM_ENCRYPT, msg, msg.len() + GCM_OVERHEAD)
    }

    /// Decrypts what [`KeepCalls::gcm_encrypt`] made.
    fn gcm_decrypt(&self, ct: &[u8]) -> Result<Vec<u8>, Error> {
        self.transform(OP_GCM_DECRYPT, ct, ct.len())
    }

    /// Generates the keep's RSA-2048 key pair; returns the public key
    /// (SubjectPublicKeyInfo DER). The private key never leaves the keep.
    fn rsa_generate(&self) -> Result<Vec<u8>, Error> {
        self.transform(OP_RSA_GENERATE, &[], 1024)
    }

    /// RSA-OAEP(SHA-256) encryption with the keep's public key.
    fn rsa_encrypt(&self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.transform(OP_RSA_ENCRYPT, msg, 256.max(msg.len()))
    }

    /// RSA-OAEP(SHA-256) decryption with the keep's private key.
    fn rsa_decrypt(&self, ct: &[u8]) -> Result<Vec<u8>, Error> {
        self.transform(OP_RSA_DECRYPT, ct, 256.max(ct.len()))
    }

    /// RSA-PSS(SHA-256) signature of `msg` with the keep's private key.
    fn rsa_sign(&self, msg: &[u8]) -> Result<Vec<u8>, Error> {
        self.transform(OP_RSA_SIGN, msg, 256.max(msg.len()))
    }

    /// One in-place request with an output capacity of `cap` bytes.
    fn transform(&self, op: u32, input: &[u8], cap: usize) -> Result<Vec<u8>, Error> {
        let cap = cap.max(input.len());
        if cap > self.max_request() {
            return Err(Error::BadRequest(format!(
                "{} of {} bytes is larger than one request ({} bytes)",
                op_name(op),
                input.len(),
                self.max_request()
            )));
        }
        let mut buf = vec![0u8; cap];
        buf[..input.len()].copy_from_slice(input);
        let n = self.call(op, 0, &mut buf, input.len())?;
        buf.truncate(n);
        Ok(buf)
    }
}

impl<K: Keep + ?Sized> KeepCalls for K {}

/// Streams `data` into SHA-256 session `handle` through one shared slot cut
/// in two halves: while the keep hashes one half, the next chunk waits
/// queued in the other, so the keep never idles between chunks; the caller
/// refills a half as soon as the keep is done with it. One queue, one
/// worker: updates are hashed in order.
fn sha_pipelined<K: Keep + ?Sized>(
    k: &K,
    handle: u64,
    data: &[u8],
    slot: usize,
) -> Result<(), Error> {
    let half = slot / 2;
    if half == 0 || data.is_empty() {
        return Ok(());
    }
    let mut chunks = data.chunks(half);
    k.with_slot(&mut |s: &mut dyn SlotAccess| {
        let mut which = 0usize;
        let mut in_flight = 0usize;
        // Fill both halves, then refill each as it is released.
        loop {
            while in_flight < 2 {
                let Some(c) = chunks.next() else { break };
                let off = which * half;
                s.buf()[off..off + c.len()].copy_from_slice(c);
                s.start(OP_SHA256_UPDATE, handle, off, c.len())?;
                which ^= 1;
                in_flight += 1;
            }
            if in_flight == 0 {
                return Ok(());
            }
            s.finish()?;
            in_flight -= 1;
        }
    })
}

fn expect_len(got: usize, want: usize, op: u32) -> Result<(), Error> {
    if got == want {
        Ok(())
    } else {
        Err(Error::BadRequest(format!(
            "the keep answered {got} bytes to {}, expected {want}",
            op_name(op)
        )))
    }
}
