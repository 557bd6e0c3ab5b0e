//! In-process cipher throughput, measured like `cryptsetup benchmark`:
//! one thread, a buffer encrypted and decrypted sector by sector, no I/O.

use crate::rand::fill_random;
use crate::{new_sector_cipher, Backend, CipherSpec, Error};
use std::time::Instant;

/// Largest buffer handed to the cipher per call (cryptsetup uses 1 MiB).
const CHUNK: usize = 1 << 20;

/// Returns (encrypt MiB/s, decrypt MiB/s) for `spec` with a random
/// `key_bytes` key on `backend`, processing `total_bytes` (rounded up to
/// whole sectors, at least one) in buffers of up to 1 MiB. Single-threaded.
/// Also checks that decryption restores the plaintext.
pub fn cipher_throughput(
    spec: &CipherSpec,
    key_bytes: usize,
    backend: Backend,
    sector_size: usize,
    total_bytes: usize,
) -> Result<(f64, f64), Error> {
    let mut key = crate::SecretBytes::new(key_bytes);
    fill_random(key.as_mut_slice())?;
    let cipher = new_sector_cipher(spec, key.as_slice(), backend)?;
    crate::sector::check_layout(0, sector_size)?;
    let chunk = (CHUNK / sector_size).max(1) * sector_size;
    let chunk = chunk.min(total_bytes.div_ceil(sector_size).max(1) * sector_size);
    let rounds = total_bytes.div_ceil(chunk).max(1);
    let mut buf = vec![0u8; chunk];
    fill_random(&mut buf)?;
    let original = buf.clone();
    let step = (sector_size / 512).max(1) as u64;
    let sectors = (chunk / sector_size) as u64;

    // Warm-up (page faults, context pool, CPU frequency).
    cipher.encrypt(&mut buf, sector_size, 0, step)?;
    cipher.decrypt(&mut buf, sector_size, 0, step)?;

    let t = Instant::now();
    for r in 0..rounds as u64 {
        cipher.encrypt(&mut buf, sector_size, r * sectors * step, step)?;
    }
    let enc = t.elapsed().as_secs_f64();
    let t = Instant::now();
    for r in (0..rounds as u64).rev() {
        cipher.decrypt(&mut buf, sector_size, r * sectors * step, step)?;
    }
    let dec = t.elapsed().as_secs_f64();
    if buf != original {
        return Err(Error::Backend(format!(
            "{spec} on {backend}: decryption did not restore the plaintext"
        )));
    }
    let mib = (rounds * chunk) as f64 / (1024.0 * 1024.0);
    Ok((mib / enc.max(1e-9), mib / dec.max(1e-9)))
}

/// Returns (seal MiB/s, open MiB/s) of `alg` on exactly `imp`, with a
/// random key, sealing and opening `msg_len`-byte messages with a 16-byte
/// nonce (24 for XChaCha20-Poly1305) and gocryptfs's 24 bytes of
/// associated data, for about `ms` milliseconds each. Single-threaded;
/// checks that every message opens to what was sealed.
pub fn aead_throughput(
    alg: crate::aead::AeadAlg,
    imp: crate::aead::AeadImpl,
    msg_len: usize,
    ms: u64,
) -> Result<(f64, f64), Error> {
    use crate::aead::{new_aead_with, TAG_LEN};
    let mut key = crate::SecretBytes::new(alg.key_len());
    fill_random(key.as_mut_slice())?;
    let aead = new_aead_with(alg, key.as_slice(), imp)?;
    let nonce_len = if alg.nonce_len_ok(16) { 16 } else { 24 };
    let mut nonce = vec![0u8; nonce_len];
    let mut ad = [0u8; 24];
    fill_random(&mut nonce)?;
    fill_random(&mut ad)?;
    let mut plain = vec![0u8; msg_len];
    fill_random(&mut plain)?;
    let mut sealed = vec![0u8; msg_len + TAG_LEN];
    let mut opened = vec![0u8; msg_len];
    let budget = std::time::Duration::from_millis(ms);
    let mut rate = |seal: bool| -> Result<f64, Error> {
        let t = Instant::now();
        let mut n = 0u64;
        while n < 16 || t.elapsed() < budget {
            if seal {
                aead.seal(&nonce, &ad, &plain, &mut sealed)?;
            } else {
                aead.open(&nonce, &ad, &sealed, &mut opened)
                    .map_err(|e| Error::Backend(format!("{alg} on {}: {e}", imp.name())))?;
            }
            n += 1;
        }
        Ok(n as f64 * msg_len as f64 / (1024.0 * 1024.0) / t.elapsed().as_secs_f64())
    };
    let s = rate(true)?;
    let o = rate(false)?;
    if opened != plain {
        return Err(Error::Backend(format!(
            "{alg} on {}: opening did not restore the plaintext",
            imp.name()
        )));
    }
    Ok((s, o))
}

/// Returns (seal MiB/s, open MiB/s) of the authenticated sector mode
/// `spec` with a random key of its default size: `total_bytes` (rounded up
/// to whole sectors) sealed and then opened in batches of up to 1 MiB of
/// `sector_size`-byte sectors, tuples included. Single-threaded; checks
/// that opening restores the plaintext and every tag verifies.
pub fn sector_aead_throughput(
    spec: &crate::sector_aead::AuthSpec,
    sector_size: usize,
    total_bytes: usize,
) -> Result<(f64, f64), Error> {
    use crate::sector_aead::SectorAead;
    let mut key = crate::SecretBytes::new(spec.default_key_bytes());
    fill_random(key.as_mut_slice())?;
    let aead = SectorAead::new(spec, key.as_slice(), sector_size)?;
    let chunk = (CHUNK / sector_size).max(1) * sector_size;
    let chunk = chunk.min(total_bytes.div_ceil(sector_size).max(1) * sector_size);
    let rounds = total_bytes.div_ceil(chunk).max(1);
    let sectors = chunk / sector_size;
    let mut buf = vec![0u8; chunk];
    fill_random(&mut buf)?;
    let original = buf.clone();
    let mut tuples = vec![0u8; sectors * spec.tuple_bytes()];

    // Warm-up (page faults, CPU frequency).
    aead.seal(0, &mut buf, &mut tuples)?;
    aead.open(0, &mut buf, &tuples)?;

    // Each batch keeps its tuples so that opening can check them all.
    let mut all = vec![0u8; rounds * tuples.len()];
    let t = Instant::now();
    for (r, tup) in all.chunks_exact_mut(tuples.len()).enumerate() {
        aead.seal((r * sectors) as u64, &mut buf, tup)?;
    }
    let seal = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut failed = 0;
    for (r, tup) in all.chunks_exact(tuples.len()).enumerate().rev() {
        failed += aead.open((r * sectors) as u64, &mut buf, tup)?.len();
    }
    let open = t.elapsed().as_secs_f64();
    if failed > 0 || buf != original {
        return Err(Error::Backend(format!(
            "{spec}: opening did not restore the plaintext"
        )));
    }
    let mib = (rounds * chunk) as f64 / (1024.0 * 1024.0);
    Ok((mib / seal.max(1e-9), mib / open.max(1e-9)))
}
