//! The keyslot KDF options of format and keyslot add/change, with
//! cryptsetup 2.6's defaults: LUKS2 argon2id, 2000 ms, 1048576 KiB (capped
//! at half the RAM), min(4, CPUs) threads; LUKS1 PBKDF2 (its only KDF).

use clap::{Args as ClapArgs, ValueEnum};
use cryptkeep_crypto::kdf::{calibrate, PbkdfKind};
use cryptkeep_crypto::{HashAlg, Pbkdf};
use cryptkeep_luks::LuksVersion;

use crate::exit::{from_crypto, CliError, CliResult};
use crate::passphrase::stderr_is_tty;

/// `--pbkdf`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PbkdfArg {
    /// PBKDF2 (RFC 8018) with --hash.
    Pbkdf2,
    /// Argon2i (RFC 9106).
    Argon2i,
    /// Argon2id (RFC 9106), LUKS2's default.
    Argon2id,
}

/// KDF options for a new keyslot.
#[derive(ClapArgs, Debug, Clone, Default)]
pub struct PbkdfArgs {
    /// Keyslot KDF: pbkdf2, argon2i, argon2id (default argon2id; LUKS1: pbkdf2).
    #[arg(long, value_enum)]
    pub pbkdf: Option<PbkdfArg>,
    /// Time the KDF should take, in ms (default 2000).
    #[arg(short = 'i', long = "iter-time", value_name = "MS")]
    pub iter_time: Option<u32>,
    /// Argon2 memory in KiB (default 1048576, at most half the RAM).
    #[arg(long = "pbkdf-memory", value_name = "KIB")]
    pub pbkdf_memory: Option<u32>,
    /// Argon2 threads (default min(4, CPUs)).
    #[arg(long = "pbkdf-parallel", value_name = "N")]
    pub pbkdf_parallel: Option<u32>,
    /// Fixed cost instead of calibrating: PBKDF2 iterations or Argon2 passes.
    #[arg(long = "pbkdf-force-iterations", value_name = "N")]
    pub force_iterations: Option<u32>,
}

/// Half of the RAM in KiB.
fn half_ram_kib() -> u64 {
    // SAFETY: sysinfo is plain data filled by the call.
    let mut si: libc::sysinfo = unsafe { std::mem::zeroed() };
    // SAFETY: si is a valid, writable sysinfo.
    if unsafe { libc::sysinfo(&mut si) } != 0 {
        return 1 << 20;
    }
    (si.totalram as u64).saturating_mul(si.mem_unit as u64) / 2 / 1024
}

/// Default Argon2 threads: min(4, CPUs).
fn default_parallel() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get().min(4) as u32)
        .unwrap_or(1)
}

impl PbkdfArgs {
    /// The KDF for a new keyslot of a `version` volume; calibrates unless
    /// `--pbkdf-force-iterations` is given. `out_len` = volume key bytes.
    pub fn make(&self, version: LuksVersion, hash: HashAlg, out_len: usize) -> CliResult<Pbkdf> {
        let kind = match (version, self.pbkdf) {
            (LuksVersion::V1, None | Some(PbkdfArg::Pbkdf2)) => PbkdfArg::Pbkdf2,
            (LuksVersion::V1, Some(_)) => {
                return Err(CliError::usage(
                    "LUKS1 supports only PBKDF2 keyslots",
                    "--pbkdf",
                    "use --pbkdf pbkdf2, or --type luks2 for argon2",
                ))
            }
            (_, None) => PbkdfArg::Argon2id,
            (_, Some(k)) => k,
        };
        let memory = self.pbkdf_memory.unwrap_or(1_048_576);
        let memory = (memory as u64).min(half_ram_kib()).max(8) as u32;
        let parallel = self.pbkdf_parallel.unwrap_or_else(default_parallel).max(1);
        if kind != PbkdfArg::Pbkdf2 {
            // cryptsetup's limits, checked before calibrating with them.
            let probe = Pbkdf::Argon2id {
                time: 1,
                memory_kib: memory,
                parallel,
            };
            cryptkeep_luks::luks2::validate::check_new_kdf(&probe).map_err(|e| {
                CliError::usage(
                    e.to_string(),
                    "--pbkdf-memory/--pbkdf-parallel",
                    "use at most 4194304 KiB and 4 threads, as cryptsetup does",
                )
            })?;
        }
        if let Some(n) = self.force_iterations {
            let min = if kind == PbkdfArg::Pbkdf2 { 1000 } else { 1 };
            if n < min {
                return Err(CliError::usage(
                    format!("--pbkdf-force-iterations {n} is below the minimum of {min}"),
                    "--pbkdf-force-iterations",
                    "cryptsetup accepts at least 1000 PBKDF2 iterations",
                ));
            }
            return Ok(match kind {
                PbkdfArg::Pbkdf2 => Pbkdf::Pbkdf2 {
                    hash,
                    iterations: n,
                },
                PbkdfArg::Argon2i => Pbkdf::Argon2i {
                    time: n,
                    memory_kib: memory,
                    parallel,
                },
                PbkdfArg::Argon2id => Pbkdf::Argon2id {
                    time: n,
                    memory_kib: memory,
                    parallel,
                },
            });
        }
        let iter_time = self.iter_time.unwrap_or(2000).max(1);
        let k = match kind {
            PbkdfArg::Pbkdf2 => PbkdfKind::Pbkdf2,
            PbkdfArg::Argon2i => PbkdfKind::Argon2i,
            PbkdfArg::Argon2id => PbkdfKind::Argon2id,
        };
        if stderr_is_tty() {
            eprintln!(
                "cryptkeep: calibrating {} for {iter_time} ms...",
                format!("{kind:?}").to_lowercase()
            );
        }
        calibrate(k, hash, iter_time, memory, parallel, out_len)
            .map_err(|e| from_crypto(&e, "KDF calibration"))
    }
}
