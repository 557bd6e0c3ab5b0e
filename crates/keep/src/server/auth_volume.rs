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
/// The slot is shared memory the I/O process can rewrite while the keep
/// works on it. That cannot make the keep read or write outside the slot,
/// and it gains the I/O process nothing: it can already seal whatever it
/// likes. Authentication protects the volume against whoever writes the
/// disk, not against the process that holds the plaintext.
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
        let failed = s.open(first, data, tuples).map_err(|_| STATUS_FAILED)?;
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
