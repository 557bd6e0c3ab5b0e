//! The keep of an authenticated volume (LUKS2 `--integrity`): holds the
//! volume key (encryption and, for the `authenc(hmac(…),xts(aes))` modes,
//! MAC key) and answers sector sealing and opening with it
//! ([`crate::proto::AUTH_VOLUME_OPS`]), nothing else.

use cryptkeep_crypto::sector_aead::{AuthSpec, SectorAead};
use cryptkeep_crypto::SecretBytes;
use cryptkeep_volume::{AuthCrypt, InlineAuthCrypt};

use super::Facts;
use crate::keep::Failure;
use crate::proto::*;
use crate::shm::Handler;

/// What the host's unlock step hands the keep of an authenticated volume:
/// the whole volume key (in a zeroizing buffer; the keep copies it into a
/// `memfd_secret` page and wipes this one) and the segment's mode.
pub struct AuthVolumeKey {
    /// The volume key: the encryption key, then the MAC key if the mode
    /// has a separate one (as LUKS2 stores it in the keyslot).
    pub key: SecretBytes,
    /// The authenticated mode (segment `encryption` and `integrity.type`).
    pub spec: AuthSpec,
    /// Bytes per sector (512 … 4096).
    pub sector_size: usize,
    /// The volume, for messages.
    pub place: String,
    /// Facts for READY and the log (`keyslot`, `unlocked`, ...).
    pub facts: Facts,
}

impl AuthVolumeKey {
    /// A random key of the mode's default size (benchmarks and tests: a
    /// keep that seals like an authenticated volume without one).
    pub fn random(spec: AuthSpec, sector_size: usize) -> Result<AuthVolumeKey, Failure> {
        let mut key = SecretBytes::new(spec.default_key_bytes());
        cryptkeep_crypto::rand::fill_random(key.as_mut_slice())
            .map_err(|e| super::keep_failure(e.to_string(), "check the system's RNG"))?;
        Ok(AuthVolumeKey {
            key,
            spec,
            sector_size,
            place: "keep".to_string(),
            facts: vec![("unlocked", "a random key".to_string())],
        })
    }
}

/// Builds the keep's sector AEAD from `key` (a slice of the keep's secret
/// page) for `spec`; a failure is a usage error when the mode or key size
/// is the volume's fault.
pub(super) fn build(
    spec: &AuthSpec,
    key: &[u8],
    sector_size: usize,
    place: &str,
) -> Result<AuthVolumeHandler, Failure> {
    let aead = SectorAead::new(spec, key, sector_size).map_err(|e| {
        use cryptkeep_crypto::Error as E;
        let usage = matches!(
            e,
            E::UnsupportedIntegrity { .. }
                | E::UnsupportedCipher(_)
                | E::InvalidKeySize { .. }
                | E::InvalidLength { .. }
        );
        Failure {
            code: if usage {
                super::EXIT_USAGE
            } else {
                super::EXIT_KEEP
            },
            what: e.to_string(),
            place: place.to_string(),
            hint: "use a supported authenticated mode: aes-xts-plain64 with hmac(sha256), \
                   hmac(sha1) or hmac(sha512), aegis128-random, chacha20-random with poly1305, \
                   aes-gcm-random, each with its default key size and a sector size of \
                   512 to 4096 bytes"
                .into(),
        }
    })?;
    Ok(AuthVolumeHandler::new(Box::new(InlineAuthCrypt::new(aead))))
}

/// The request handler of an authenticated volume's keep:
/// [`AUTH_VOLUME_OPS`] with the volume's sector AEAD. Every input comes
/// from a possibly compromised I/O process: the length must be a whole
/// number of `(sector, tuple)` pairs, the sector range must not overflow,
/// the answer must fit the buffer; a failure is a status for that request
/// only, nothing panics.
///
/// The slot is shared memory the I/O process can rewrite, and read, while
/// the keep works on it. That cannot make the keep read or write outside
/// the slot, and it gains the I/O process nothing: it can already seal
/// whatever it likes, the keep seals under IVs it keeps in its own memory,
/// and opens in its own memory, so the slot never holds plaintext whose
/// tag was not checked. Authentication protects the volume against
/// whoever writes the disk, not against the process that holds the
/// plaintext.
pub struct AuthVolumeHandler {
    sectors: Box<dyn AuthCrypt>,
}

impl AuthVolumeHandler {
    /// A handler serving `sectors` (an in-process [`AuthCrypt`] that holds
    /// the key).
    pub fn new(sectors: Box<dyn AuthCrypt>) -> AuthVolumeHandler {
        AuthVolumeHandler { sectors }
    }

    /// The sector count of a request of `in_len` bytes starting at sector
    /// `first`, or `STATUS_BAD_DESCRIPTOR`.
    fn count(&self, first: u64, in_len: usize, cap: usize) -> Result<usize, u32> {
        let (ss, ts) = (self.sectors.sector_size(), self.sectors.tuple_size());
        let pair = ss.checked_add(ts).filter(|&p| p > 0 && ss > 0);
        let Some(pair) = pair else {
            return Err(STATUS_FAILED);
        };
        if in_len > cap || !in_len.is_multiple_of(pair) {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        let n = in_len / pair;
        // The last sector's number, in 512-byte units as the IV generators
        // count, must exist.
        let units = (ss / 512).max(1) as u64;
        let end = first
            .checked_add(n as u64)
            .and_then(|e| e.checked_mul(units));
        if end.is_none() {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        Ok(n)
    }
}

impl Handler for AuthVolumeHandler {
    fn handle(&self, op: u32, first: u64, buf: &mut [u8], in_len: usize) -> Result<usize, u32> {
        let seal = match op {
            OP_SEAL_SECTORS => true,
            OP_OPEN_SECTORS => false,
            OP_NULL => return Ok(0),
            _ => return Err(STATUS_UNSUPPORTED),
        };
        let n = self.count(first, in_len, buf.len())?;
        let s = &*self.sectors;
        let (ss, ts) = (s.sector_size(), s.tuple_size());
        let out = if seal {
            in_len
        } else {
            // Cannot overflow: in_len = n · (ss + ts) ≤ buf.len().
            in_len + open_bitmap_len(n)
        };
        if out > buf.len() {
            return Err(STATUS_BAD_DESCRIPTOR);
        }
        if n == 0 {
            return Ok(0);
        }
        let (data, rest) = buf.split_at_mut(n * ss);
        let (tuples, rest) = rest.split_at_mut(n * ts);
        if seal {
            s.seal(first, data, tuples).map_err(|_| STATUS_FAILED)?;
            return Ok(out);
        }
        let failed = open_privately(s, first, data, tuples)?;
        let bitmap = &mut rest[..open_bitmap_len(n)];
        bitmap.fill(0);
        for i in failed {
            if i >= n {
                return Err(STATUS_FAILED);
            }
            bitmap[i / 8] |= 1 << (i % 8);
            // The mode zeroes a failed sector; so does the keep, whatever
            // the mode did.
            data[i * ss..(i + 1) * ss].fill(0);
        }
        Ok(out)
    }
}

/// Sectors opened per copy out of the slot: 64 KiB of data (one sector at
/// least), which stays in the cache between the copy and the open.
const OPEN_CHUNK_BYTES: usize = 64 << 10;

thread_local! {
    /// Each worker's copy of the sectors and tuples it opens, reused from
    /// one request to the next. It holds ciphertext, and plaintext the I/O
    /// process is sent: nothing it does not have; the secret heap wipes it
    /// when the worker ends.
    static OPEN_COPY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Opens the sectors in `data` against `tuples` (both in the shared slot)
/// in the keep's own memory, a chunk at a time: the chunk's sectors and
/// tuples are copied out of the slot, opened there, and only then copied
/// back, the sectors that failed as zeros. So the I/O side never sees
/// plaintext whose tag was not checked (releasing it would let a daemon
/// recover an AEGIS state and forge sectors), and what is checked is what
/// is decrypted, whatever the daemon writes into the slot meanwhile.
/// Returns the indices of the sectors that failed.
fn open_privately(
    s: &dyn AuthCrypt,
    first: u64,
    data: &mut [u8],
    tuples: &[u8],
) -> Result<Vec<usize>, u32> {
    let (ss, ts) = (s.sector_size(), s.tuple_size());
    let n = data.len() / ss;
    let per_chunk = (OPEN_CHUNK_BYTES / ss).max(1);
    OPEN_COPY.with(|copy| {
        let mut copy = copy.borrow_mut();
        crate::ops::grow_buffer(&mut copy, per_chunk.min(n) * (ss + ts));
        let mut failed = Vec::new();
        let mut start = 0;
        while start < n {
            let k = per_chunk.min(n - start);
            let (d, t) = copy.split_at_mut(k * ss);
            let (d, t) = (&mut d[..], &mut t[..k * ts]);
            d.copy_from_slice(&data[start * ss..(start + k) * ss]);
            t.copy_from_slice(&tuples[start * ts..(start + k) * ts]);
            let bad = s
                .open(first + start as u64, d, t)
                .map_err(|_| STATUS_FAILED)?;
            for &i in &bad {
                if i >= k {
                    return Err(STATUS_FAILED);
                }
                d[i * ss..(i + 1) * ss].fill(0);
            }
            data[start * ss..(start + k) * ss].copy_from_slice(d);
            failed.extend(bad.into_iter().map(|i| start + i));
            start += k;
        }
        Ok(failed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cryptkeep_testkit::SharedMap;
    use std::time::{Duration, Instant};

    /// A sector whose tag fails comes back as zeros, and a peer reading the
    /// slot all along never sees its plaintext, though its ciphertext is
    /// intact (only the tag was changed) and would decrypt to it: the keep
    /// opens in its own memory and copies only checked sectors back.
    #[test]
    fn a_failed_sectors_plaintext_never_reaches_the_slot() {
        // (AES-256-GCM runs on this crate's own engine, which decrypts
        // before it compares the tag; AES-128-GCM on RustCrypto's.)
        let modes = [
            ("aegis128-random", "aead", 16),
            ("aes-gcm-random", "aead", 32),
            ("aes-gcm-random", "aead", 16),
            ("chacha20-random", "poly1305", 32),
            ("aes-xts-plain64", "hmac(sha256)", 96),
        ];
        for (encryption, integrity, key_len) in modes {
            let spec = AuthSpec::parse(encryption, integrity).unwrap();
            let key = vec![7u8; key_len];
            let h = build(&spec, &key, 512, "test").unwrap();
            let (ss, ts, n) = (512, spec.tuple_bytes(), 8);
            let plain: Vec<u8> = (0..n * ss).map(|i| (i % 251) as u8 ^ 0x33).collect();
            let in_len = n * (ss + ts);
            let answer = in_len + open_bitmap_len(n);
            let mut sealed = vec![0u8; answer];
            sealed[..n * ss].copy_from_slice(&plain);
            assert_eq!(
                h.handle(OP_SEAL_SECTORS, 0, &mut sealed, in_len),
                Ok(in_len)
            );
            sealed[n * ss + 3 * ts] ^= 1;
            let mut map = SharedMap::new(answer);
            let peer = map.watch(3 * ss, plain[3 * ss..3 * ss + 16].to_vec());
            // At least 2000 opens, and until the peer has read the slot
            // many times while they ran (a loaded machine may give it no
            // CPU for a while).
            let (before, deadline) = (peer.reads(), Instant::now() + Duration::from_secs(60));
            let ran = |p: &cryptkeep_testkit::Watcher| p.reads() >= before + 1000;
            let mut round = 0;
            while round < 2000 || (!ran(&peer) && Instant::now() < deadline) {
                round += 1;
                // SAFETY: the peer only reads; what it sees is the test.
                let buf = unsafe { map.mine() };
                buf.copy_from_slice(&sealed);
                assert_eq!(h.handle(OP_OPEN_SECTORS, 0, buf, in_len), Ok(answer));
                assert_eq!(buf[in_len], 1 << 3, "{spec:?}: the failure bitmap");
                assert!(buf[3 * ss..4 * ss].iter().all(|&b| b == 0));
                assert_eq!(buf[..3 * ss], plain[..3 * ss]);
                assert_eq!(buf[4 * ss..n * ss], plain[4 * ss..]);
            }
            assert!(ran(&peer), "{spec:?}: the peer barely ran during the opens");
            assert_eq!(
                peer.seen(),
                0,
                "{spec:?}: the slot showed the plaintext of a sector that failed"
            );
        }
    }
}
