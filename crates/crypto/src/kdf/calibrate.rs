//! KDF cost calibration, following cryptsetup (`lib/utils_pbkdf.c`,
//! `lib/crypto_backend/pbkdf_check.c`): measure on this machine, then scale
//! the cost to the requested unlock time.

use super::{argon2_into, pbkdf2_into, Pbkdf, PbkdfKind};
use crate::{Error, HashAlg};
use argon2::Algorithm;
use std::time::{Duration, Instant};

/// cryptsetup's floor for PBKDF2 iterations (`MIN_PBKDF2_ITERATIONS`).
pub const MIN_PBKDF2_ITERATIONS: u32 = 1000;
/// cryptsetup's floor for Argon2 passes (`MIN_PBKDF2_ITERATIONS` for argon2 is 4).
pub const MIN_ARGON2_TIME: u32 = 4;
/// Argon2's memory floor cryptsetup uses (KiB).
pub const MIN_ARGON2_MEMORY_KIB: u32 = 32;

/// The benchmark's fixed password and salt (cryptsetup uses fixed dummy data too).
const BENCH_PASSWORD: &[u8] = b"foobarfo";
const BENCH_SALT: &[u8] = b"0123456789abcdef0123456789abcdef";

/// Measures PBKDF2-HMAC-`hash` iterations per second for an `out_len`-byte
/// output: like cryptsetup, doubles the iteration count until one run takes
/// more than ~250 ms, then divides.
pub fn pbkdf2_iterations_per_second(hash: HashAlg, out_len: usize) -> Result<u64, Error> {
    let mut out = vec![0u8; out_len.max(1)];
    let mut iterations: u32 = 1 << 12;
    loop {
        let t = Instant::now();
        pbkdf2_into(hash, iterations, BENCH_PASSWORD, BENCH_SALT, &mut out)?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if ms > 250.0 || iterations >= 1 << 31 {
            return Ok(((iterations as f64) * 1000.0 / ms.max(0.001)) as u64);
        }
        iterations = match ms {
            m if m <= 16.0 => iterations.saturating_mul(16),
            m if m <= 62.0 => iterations.saturating_mul(4),
            _ => iterations.saturating_mul(2),
        };
    }
}

/// Chooses KDF costs so that one derivation takes about `iter_time_ms` here.
///
/// * PBKDF2: iterations/second × time, at least 1000 (cryptsetup's floor).
/// * Argon2: memory is `memory_kib` (the cap; at least 8 × `parallel`),
///   the time cost is raised to fill `iter_time_ms`, at least 4. If even 4
///   passes over the full memory take longer than the target, memory is
///   lowered instead (as cryptsetup does), never below 32 KiB. Memory above
///   64 MiB is not touched while calibrating: the cost is extrapolated from a
///   64 MiB run.
pub fn calibrate(
    kind: PbkdfKind,
    hash: HashAlg,
    iter_time_ms: u32,
    memory_kib: u32,
    parallel: u32,
    out_len: usize,
) -> Result<Pbkdf, Error> {
    let target = f64::from(iter_time_ms.max(1));
    match kind {
        PbkdfKind::Pbkdf2 => {
            let ips = pbkdf2_iterations_per_second(hash, out_len)?;
            let iters = (ips as f64 * target / 1000.0).min(f64::from(u32::MAX)) as u32;
            Ok(Pbkdf::Pbkdf2 {
                hash,
                iterations: iters.max(MIN_PBKDF2_ITERATIONS),
            })
        }
        PbkdfKind::Argon2i | PbkdfKind::Argon2id => {
            let alg = if kind == PbkdfKind::Argon2i {
                Algorithm::Argon2i
            } else {
                Algorithm::Argon2id
            };
            let parallel = parallel.max(1);
            let min_mem = MIN_ARGON2_MEMORY_KIB.max(8 * parallel);
            let mut memory = memory_kib.max(min_mem);
            let (time, memory) =
                argon2_costs(alg, target, &mut memory, min_mem, parallel, out_len)?;
            Ok(match kind {
                PbkdfKind::Argon2i => Pbkdf::Argon2i {
                    time,
                    memory_kib: memory,
                    parallel,
                },
                _ => Pbkdf::Argon2id {
                    time,
                    memory_kib: memory,
                    parallel,
                },
            })
        }
    }
}

/// Largest memory (KiB) the [`estimate`] probe touches.
const ESTIMATE_PROBE_KIB: u32 = 8 * 1024;

/// How long one derivation with `p` for an `out_len`-byte output should
/// take on this machine, from a short probe (PBKDF2: iterations doubled
/// fourfold until a run takes 20 ms; Argon2: one pass over at most 8 MiB,
/// scaled linearly by memory and passes). Costs from a hostile header give
/// long durations, never an overflow ([`Duration::MAX`] at worst).
pub fn estimate(p: &Pbkdf, out_len: usize) -> Result<Duration, Error> {
    let scale = |probe: Duration, factor: f64| {
        Duration::try_from_secs_f64(probe.as_secs_f64() * factor).unwrap_or(Duration::MAX)
    };
    match *p {
        Pbkdf::Pbkdf2 { hash, iterations } => {
            let iterations = iterations.max(1);
            let mut out = vec![0u8; out_len.max(1)];
            let mut n: u32 = iterations.min(1 << 10);
            loop {
                let t = Instant::now();
                pbkdf2_into(hash, n, BENCH_PASSWORD, BENCH_SALT, &mut out)?;
                let took = t.elapsed();
                if took >= Duration::from_millis(20) || n >= iterations || n >= 1 << 26 {
                    return Ok(scale(took, f64::from(iterations) / f64::from(n)));
                }
                n = n.saturating_mul(4).min(iterations);
            }
        }
        Pbkdf::Argon2i {
            time,
            memory_kib,
            parallel,
        }
        | Pbkdf::Argon2id {
            time,
            memory_kib,
            parallel,
        } => {
            let alg = if matches!(p, Pbkdf::Argon2i { .. }) {
                Algorithm::Argon2i
            } else {
                Algorithm::Argon2id
            };
            let parallel = parallel.max(1);
            let floor = MIN_ARGON2_MEMORY_KIB.max(parallel.saturating_mul(8));
            let memory = memory_kib.max(floor);
            let probe = memory.min(ESTIMATE_PROBE_KIB).max(floor);
            let took = time_argon2(alg, 1, probe, parallel, out_len)?;
            Ok(scale(
                took,
                f64::from(memory) / f64::from(probe) * f64::from(time.max(1)),
            ))
        }
    }
}

fn time_argon2(
    alg: Algorithm,
    time: u32,
    memory: u32,
    parallel: u32,
    out_len: usize,
) -> Result<Duration, Error> {
    let mut out = vec![0u8; out_len.max(4)];
    let t = Instant::now();
    argon2_into(
        alg,
        time,
        memory,
        parallel,
        BENCH_PASSWORD,
        BENCH_SALT,
        &mut out,
    )?;
    Ok(t.elapsed())
}

/// Largest memory (KiB) the calibration probe touches; beyond it the cost is
/// extrapolated linearly, so calibrating a 1 GiB slot does not itself take
/// seconds.
const PROBE_MAX_KIB: u32 = 64 * 1024;

/// Scales Argon2's time cost (then memory) to the target milliseconds.
fn argon2_costs(
    alg: Algorithm,
    target_ms: f64,
    memory: &mut u32,
    min_mem: u32,
    parallel: u32,
    out_len: usize,
) -> Result<(u32, u32), Error> {
    // Measure at the floor time cost, with the full memory or a probe of it.
    let probe = (*memory).min(PROBE_MAX_KIB).max(min_mem);
    let probe_ms =
        time_argon2(alg, MIN_ARGON2_TIME, probe, parallel, out_len)?.as_secs_f64() * 1000.0;
    let ms = (probe_ms * f64::from(*memory) / f64::from(probe)).max(0.001);
    if ms > target_ms {
        // Too slow even at the floor: shrink memory proportionally.
        let scaled = (f64::from(*memory) * target_ms / ms) as u32;
        *memory = scaled.max(min_mem);
        return Ok((MIN_ARGON2_TIME, *memory));
    }
    let per_pass = ms / f64::from(MIN_ARGON2_TIME);
    let time = (target_ms / per_pass).min(f64::from(u32::MAX)) as u32;
    Ok((time.max(MIN_ARGON2_TIME), *memory))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_scale_with_the_cost_and_never_overflow() {
        let small = estimate(
            &Pbkdf::Pbkdf2 {
                hash: HashAlg::Sha256,
                iterations: 1000,
            },
            32,
        )
        .unwrap();
        assert!(small < Duration::from_secs(1), "{small:?}");
        let huge = estimate(
            &Pbkdf::Pbkdf2 {
                hash: HashAlg::Sha256,
                iterations: u32::MAX,
            },
            64,
        )
        .unwrap();
        assert!(huge > Duration::from_secs(60), "{huge:?}");
        let argon = estimate(
            &Pbkdf::Argon2id {
                time: u32::MAX,
                memory_kib: 1 << 20,
                parallel: 4,
            },
            64,
        )
        .unwrap();
        assert!(argon > Duration::from_secs(86_400), "{argon:?}");
    }

    #[test]
    fn pbkdf2_floor_and_scale() {
        let p = calibrate(PbkdfKind::Pbkdf2, HashAlg::Sha256, 1, 0, 1, 32).unwrap();
        match p {
            Pbkdf::Pbkdf2 { hash, iterations } => {
                assert_eq!(hash, HashAlg::Sha256);
                assert!(iterations >= MIN_PBKDF2_ITERATIONS);
            }
            _ => panic!("wrong kind {p:?}"),
        }
    }

    #[test]
    fn pbkdf2_calibration_hits_the_target_roughly() {
        let p = calibrate(PbkdfKind::Pbkdf2, HashAlg::Sha256, 200, 0, 1, 32).unwrap();
        let t = Instant::now();
        super::super::derive(&p, b"pw", &[0u8; 32], 32).unwrap();
        let ms = t.elapsed().as_millis();
        // Loose: the machine may be busy; an order of magnitude off is a bug.
        assert!(
            (20..=2000).contains(&ms),
            "{p:?} took {ms} ms for a 200 ms target"
        );
    }

    #[test]
    fn argon2_memory_is_the_cap_and_time_at_least_4() {
        let p = calibrate(PbkdfKind::Argon2id, HashAlg::Sha256, 50, 1024, 2, 32).unwrap();
        let Pbkdf::Argon2id {
            time,
            memory_kib,
            parallel,
        } = p
        else {
            panic!("wrong kind {p:?}")
        };
        assert_eq!(parallel, 2);
        assert!((32..=1024).contains(&memory_kib), "{memory_kib}");
        assert!(time >= MIN_ARGON2_TIME);
        // Derivation with the chosen costs takes roughly the target (loose bound).
        let t = Instant::now();
        super::super::derive(&p, b"x", &[1u8; 32], 32).unwrap();
        assert!(t.elapsed() < Duration::from_millis(2000));
    }

    #[test]
    fn argon2_too_slow_lowers_memory() {
        let p = calibrate(PbkdfKind::Argon2i, HashAlg::Sha256, 1, 65536, 1, 32).unwrap();
        let Pbkdf::Argon2i {
            time, memory_kib, ..
        } = p
        else {
            panic!("wrong kind {p:?}")
        };
        assert_eq!(time, MIN_ARGON2_TIME);
        assert!(memory_kib < 65536, "{memory_kib}");
    }
}
