//! `cryptkeep benchmark`: a table like `cryptsetup benchmark` — PBKDF2
//! iterations per second, Argon2 cost for the requested time, then cipher
//! throughput in memory (no storage I/O) for each crypto backend.

use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use cryptkeep_crypto::kdf::{calibrate, pbkdf2_iterations_per_second, PbkdfKind};
use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec, HashAlg, Pbkdf};

use super::common::BackendArg;
use crate::exit::{from_crypto, CliError, CliResult};

/// Options of `benchmark`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Measure only this cipher spec (e.g. aes-xts-plain64); skips the KDFs.
    #[arg(short = 'c', long)]
    pub cipher: Option<String>,
    /// Key size in bits for --cipher (default 512 for XTS, 256 otherwise).
    #[arg(short = 's', long = "key-size", value_name = "BITS")]
    pub key_size: Option<u32>,
    /// Only this backend (default: both).
    #[arg(long = "crypto-backend", value_enum)]
    pub crypto_backend: Option<BackendArg>,
    /// Encryption sector size for the cipher runs.
    #[arg(long = "sector-size", default_value_t = 4096)]
    pub sector_size: usize,
    /// Time asked of each Argon2 calibration, in ms.
    #[arg(short = 'i', long = "iter-time", default_value_t = 1000)]
    pub iter_time: u32,
    /// Argon2 memory in KiB.
    #[arg(long = "pbkdf-memory", default_value_t = 1_048_576)]
    pub pbkdf_memory: u32,
    /// Time spent on each cipher direction, in ms.
    #[arg(long = "cipher-time", default_value_t = 300)]
    pub cipher_time: u64,
}

/// One cipher measurement in MiB/s: (encryption, decryption).
pub fn measure(
    spec: &CipherSpec,
    key_bytes: usize,
    backend: Backend,
    sector: usize,
    ms: u64,
) -> CliResult<(f64, f64)> {
    let mut key = zeroize::Zeroizing::new(vec![0u8; key_bytes]);
    cryptkeep_crypto::rand::fill_random(&mut key).map_err(|e| from_crypto(&e, "benchmark key"))?;
    let c =
        new_sector_cipher(spec, &key, backend).map_err(|e| from_crypto(&e, &spec.to_string()))?;
    let mut buf = vec![0x5au8; 1 << 20];
    let step = (sector / 512) as u64;
    let per_buf = (buf.len() / sector) as u64 * step;
    let mut run = |enc: bool| -> CliResult<f64> {
        let start = Instant::now();
        let mut bytes = 0u64;
        let mut iv = 0u64;
        while start.elapsed() < Duration::from_millis(ms) {
            if enc {
                c.encrypt(&mut buf, sector, iv, step)
            } else {
                c.decrypt(&mut buf, sector, iv, step)
            }
            .map_err(|e| from_crypto(&e, &spec.to_string()))?;
            iv += per_buf;
            bytes += buf.len() as u64;
        }
        Ok(bytes as f64 / start.elapsed().as_secs_f64() / (1u64 << 20) as f64)
    };
    let e = run(true)?;
    let d = run(false)?;
    Ok((e, d))
}

fn backends(a: &Args) -> Vec<Backend> {
    match a.crypto_backend {
        Some(b) => vec![b.backend()],
        None => vec![Backend::Accelerated, Backend::Portable],
    }
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Accelerated => "accelerated",
        _ => "portable",
    }
}

/// Runs `benchmark`.
pub fn run(a: Args) -> CliResult {
    if a.sector_size < 512 || a.sector_size > 4096 || !a.sector_size.is_power_of_two() {
        return Err(CliError::usage(
            "invalid --sector-size",
            a.sector_size.to_string(),
            "use 512, 1024, 2048 or 4096",
        ));
    }
    println!(
        "# Tests are approximate using memory only (no storage IO); {}-byte sectors, one thread.",
        a.sector_size
    );
    let list: Vec<(String, &str, u32)> = match &a.cipher {
        Some(c) => {
            let bits = a
                .key_size
                .unwrap_or(if c.contains("-xts-") { 512 } else { 256 });
            vec![(c.clone(), "", bits)]
        }
        None => {
            for h in ["sha1", "sha256", "sha512"] {
                let hash = HashAlg::parse(h).map_err(|e| from_crypto(&e, h))?;
                let n = pbkdf2_iterations_per_second(hash, 32)
                    .map_err(|e| from_crypto(&e, "PBKDF2"))?;
                println!("PBKDF2-{h:<10} {n:>8} iterations per second for 256-bit key");
            }
            let par = std::thread::available_parallelism()
                .map(|n| n.get().min(4) as u32)
                .unwrap_or(1);
            for (name, kind) in [
                ("argon2i", PbkdfKind::Argon2i),
                ("argon2id", PbkdfKind::Argon2id),
            ] {
                let k = calibrate(
                    kind,
                    HashAlg::parse("sha256").map_err(|e| from_crypto(&e, "sha256"))?,
                    a.iter_time,
                    a.pbkdf_memory,
                    par,
                    32,
                )
                .map_err(|e| from_crypto(&e, name))?;
                let (t, m, p) = match k {
                    Pbkdf::Argon2i {
                        time,
                        memory_kib,
                        parallel,
                    }
                    | Pbkdf::Argon2id {
                        time,
                        memory_kib,
                        parallel,
                    } => (time, memory_kib, parallel),
                    _ => (0, 0, 0),
                };
                println!(
                    "{name:<9} {t:>4} iterations, {m:>7} memory, {p:>1} parallel threads (CPUs) for 256-bit key (requested {} ms time)",
                    a.iter_time
                );
            }
            vec![
                ("aes-cbc-plain64".into(), "aes-cbc", 128),
                ("aes-cbc-plain64".into(), "aes-cbc", 256),
                ("aes-xts-plain64".into(), "aes-xts", 256),
                ("aes-xts-plain64".into(), "aes-xts", 512),
            ]
        }
    };
    println!("#     Algorithm |       Key |     Backend |      Encryption |      Decryption");
    for (spec_s, label, bits) in &list {
        let spec = CipherSpec::parse(spec_s).map_err(|e| from_crypto(&e, spec_s))?;
        let label = if label.is_empty() {
            spec_s.as_str()
        } else {
            label
        };
        for b in backends(&a) {
            let (e, d) = measure(&spec, (*bits / 8) as usize, b, a.sector_size, a.cipher_time)?;
            println!(
                "{label:>15} {:>10}b {:>13} {e:>12.1} MiB/s {d:>12.1} MiB/s",
                bits,
                backend_name(b)
            );
        }
    }
    if a.cipher.is_none() {
        aead_rows(&a)?;
    }
    Ok(())
}

/// The AEADs of `cryptkeep fs` on 4096-byte blocks (gocryptfs's block,
/// 16-byte nonce, 24 bytes of associated data), on every implementation
/// this CPU runs, so that each row compares with the others in one run.
fn aead_rows(a: &Args) -> CliResult {
    use cryptkeep_crypto::aead::{AeadAlg, AeadImpl};
    use cryptkeep_crypto::bench::aead_throughput;
    println!("#     Algorithm |     Block |        Code |            Seal |            Open");
    for alg in [
        AeadAlg::Aes256Gcm,
        AeadAlg::Aes256Siv,
        AeadAlg::XChaCha20Poly1305,
    ] {
        for imp in AeadImpl::ALL {
            let (s, o) = match aead_throughput(alg, imp, 4096, a.cipher_time) {
                Ok(r) => r,
                // Not an implementation of this algorithm, or not on this CPU.
                Err(cryptkeep_crypto::Error::Backend(_)) => continue,
                Err(e) => return Err(from_crypto(&e, alg.name())),
            };
            println!(
                "{:>15} {:>10}b {:>11} {s:>12.1} MiB/s {o:>12.1} MiB/s",
                alg.name(),
                4096,
                imp.name()
            );
        }
    }
    Ok(())
}
