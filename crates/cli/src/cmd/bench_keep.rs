//! `cryptkeep bench keep`: the secGear report's tables (enclave
//! create/destroy, call cost, SHA-256 of 1 GB, AES-256-GCM of 23 bytes,
//! RSA-2048) for the process keep against the host, plus sector-crypto
//! throughput through the keep against inline (the TresorSGX report's question),
//! and the same for authenticated sectors (seal and open). Every
//! host/keep pair is measured in the same run, and printed with the
//! report's SGX figures beside ours. With `--csv FILE` every measurement
//! is also written as a row for `cryptkeep bench secgear`
//! (docs/design/bench.md): target `host` (no keep) or `keep`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use cryptkeep_crypto::sector_aead::{AuthSpec, SectorAead};
use cryptkeep_crypto::{new_sector_cipher, Backend, CipherSpec};
use cryptkeep_keep::auth_crypt::KeepAuthCrypt;
use cryptkeep_keep::calls::KeepCalls;
use cryptkeep_keep::keep::{Keep, ProcessKeep};
use cryptkeep_keep::ops;
use cryptkeep_keep::proto;
use cryptkeep_keep::spawn::SpawnConfig;
use cryptkeep_volume::{AuthCrypt, InlineCrypt, SectorCrypt};

use crate::exit::{from_crypto, CliError, CliResult, Code};

/// Options of `bench keep`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Keeps created and destroyed for the lifecycle figures.
    #[arg(long, default_value_t = 20)]
    pub lifecycles: usize,
    /// MiB hashed by SHA-256 on each side (the report: 1 GB).
    #[arg(long = "sha-mib", default_value_t = 1024)]
    pub sha_mib: usize,
    /// Seconds per sector-throughput run.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// Request size for sector throughput, KiB (FUSE's largest request).
    #[arg(long = "request-kib", default_value_t = 1024)]
    pub request_kib: usize,
    /// Threads for sector throughput, inline and through the keep alike
    /// (the FUSE block file dispatches on 4).
    #[arg(long, default_value_t = 4)]
    pub threads: usize,
    /// Also write every measurement to FILE as CSV rows
    /// `report,target,metric,rep,value,unit` (report `secgear`, target
    /// `host` or `keep`), the format of `cryptkeep bench`.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

/// The measurements of one run, as rows of `cryptkeep bench`'s data.csv.
#[derive(Default)]
struct Rows(String);

impl Rows {
    /// One row per value of `values` (reps from 1); values that are not
    /// positive and finite (a clock that did not move) are left out.
    fn add(&mut self, target: &str, metric: &str, unit: &str, values: &[f64]) {
        for (i, v) in values.iter().enumerate() {
            if v.is_finite() && *v > 0.0 {
                let _ = writeln!(self.0, "secgear,{target},{metric},{},{v},{unit}", i + 1);
            }
        }
    }

    /// Writes the rows, with their header, to `path`.
    fn write(&self, path: &std::path::Path) -> CliResult {
        let text = format!("report,target,metric,rep,value,unit\n{}", self.0);
        std::fs::write(path, text)
            .map_err(|e| CliError::io("writing the measurements", path.display().to_string(), &e))
    }
}

fn keep_err(e: impl std::fmt::Display) -> CliError {
    CliError::new(
        Code::Daemon,
        format!("keep: {e}"),
        "bench keep",
        "see the message",
    )
}

/// The authenticated mode `bench keep` measures (AES-256-GCM with random
/// IVs, 4096-byte sectors).
const AUTH_MODE: (&str, &str) = ("aes-gcm-random", "aead");

/// A runtime keep, or (`sector`) a volume keep with a random
/// aes-xts-plain64 512-bit key.
fn spawn_keep(sector: bool) -> CliResult<ProcessKeep> {
    spawn_with(if sector {
        &[
            "__keep",
            "scratch-volume",
            "--cipher",
            "aes-xts-plain64",
            "--key-size",
            "512",
        ]
    } else {
        &["__keep", "runtime"]
    })
}

/// A keep of an authenticated volume ([`AUTH_MODE`]) with a random key.
fn spawn_auth_keep() -> CliResult<ProcessKeep> {
    spawn_with(&[
        "__keep",
        "scratch-volume",
        "--cipher",
        AUTH_MODE.0,
        "--integrity",
        AUTH_MODE.1,
    ])
}

/// Starts `cryptkeep ARGS` as a keep.
fn spawn_with(args: &[&str]) -> CliResult<ProcessKeep> {
    ProcessKeep::spawn(SpawnConfig {
        args: args.iter().map(Into::into).collect(),
        ..SpawnConfig::default()
    })
    .map(|(k, _)| k)
    .map_err(keep_err)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Rounds each timed mean in [`gcm`] and [`rsa`] is split into (the spread
/// between rounds is the figure's min–max in `cryptkeep bench`).
const ROUNDS: usize = 5;

/// Runs `bench keep`.
pub fn run(a: Args) -> CliResult {
    println!("# cryptkeep bench keep (the secGear report's tables; the TresorSGX report's throughput question)\n");
    let mut rows = Rows::default();
    lifecycle(&a, &mut rows)?;
    let keep = spawn_keep(false)?;
    calls(&keep, &mut rows)?;
    sha(&keep, a.sha_mib, &mut rows)?;
    gcm(&keep, &mut rows)?;
    rsa(&keep, &mut rows)?;
    keep.destroy().map_err(keep_err)?;
    let keep = Arc::new(spawn_keep(true)?);
    sectors(keep.clone(), &a, &mut rows)?;
    if let Ok(k) = Arc::try_unwrap(keep) {
        k.destroy().map_err(keep_err)?;
    }
    let keep = Arc::new(spawn_auth_keep()?);
    auth_sectors(keep.clone(), &a, &mut rows)?;
    if let Ok(k) = Arc::try_unwrap(keep) {
        k.destroy().map_err(keep_err)?;
    }
    if let Some(path) = &a.csv {
        rows.write(path)?;
    }
    Ok(())
}

fn lifecycle(a: &Args, rows: &mut Rows) -> CliResult {
    let (mut c, mut d) = (Vec::new(), Vec::new());
    for _ in 0..a.lifecycles.max(1) {
        let t = Instant::now();
        let k = spawn_keep(false)?;
        k.null_call().map_err(keep_err)?;
        c.push(us(t.elapsed()));
        let t = Instant::now();
        k.destroy().map_err(keep_err)?;
        d.push(us(t.elapsed()));
    }
    rows.add("keep", "create_us", "µs", &c);
    rows.add("keep", "destroy_us", "µs", &d);
    println!("## Create / destroy ({} keeps, median µs)\n", c.len());
    println!("| | create | destroy |\n|---|---:|---:|");
    println!(
        "| cryptkeep process keep (fork+exec, sandbox, arena, first call) | {:.0} | {:.0} |",
        median(c),
        median(d)
    );
    println!("| secGear SGX enclave (report, E3-1280 v6) | 19571 | 658 |\n");
    Ok(())
}

fn calls(k: &ProcessKeep, rows: &mut Rows) -> CliResult {
    // Spin path: back-to-back calls keep the worker spinning.
    for _ in 0..10_000 {
        k.null_call().map_err(keep_err)?;
    }
    let n = 200_000;
    let t = Instant::now();
    for _ in 0..n {
        k.null_call().map_err(keep_err)?;
    }
    let spin = t.elapsed().as_secs_f64() * 1e9 / n as f64;
    // Futex path: the worker has gone to sleep before each call.
    let mut f = Vec::new();
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(2));
        let t = Instant::now();
        k.null_call().map_err(keep_err)?;
        f.push(t.elapsed().as_secs_f64() * 1e9);
    }
    rows.add("keep", "null_call_spin_ns", "ns", &[spin]);
    rows.add("keep", "null_call_futex_ns", "ns", &f);
    println!("## Null call (round trip, ns)\n");
    println!("| path | ns |\n|---|---:|");
    println!("| spinning worker, back to back ({n} calls, mean) | {spin:.0} |");
    println!(
        "| sleeping worker, futex wake (200 calls, median) | {:.0} |",
        median(f)
    );
    println!("| TresorSGX Netlink round trip (the TresorSGX report) | ~14000 |\n");
    Ok(())
}

fn sha(k: &ProcessKeep, mib: usize, rows: &mut Rows) -> CliResult {
    let mib = mib.max(1);
    let mut data = vec![0u8; mib << 20];
    cryptkeep_crypto::rand::fill_random(&mut data).map_err(|e| from_crypto(&e, "bench"))?;
    let t = Instant::now();
    let host = ops::sha256(&data);
    let th = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let kept = k.sha256(&data).map_err(keep_err)?;
    let tk = t.elapsed().as_secs_f64();
    if host != kept {
        return Err(CliError::new(
            Code::Unexpected,
            "SHA-256 in the keep differs from the host's",
            "bench keep",
            "please report this bug",
        ));
    }
    let mb = data.len() as f64 / 1e6;
    rows.add("host", "sha256_mbps", "MB/s", &[mb / th]);
    rows.add("keep", "sha256_mbps", "MB/s", &[mb / tk]);
    println!("## SHA-256 of {mib} MiB of random data (digests equal)\n");
    println!("| | host | keep | keep/host |\n|---|---:|---:|---:|");
    println!("| seconds | {th:.3} | {tk:.3} | |");
    println!(
        "| MB/s | {:.0} | {:.0} | {:.1} % |",
        mb / th,
        mb / tk,
        100.0 * th / tk
    );
    println!("| secGear SGX (report) MB/s | 174 | 73 | 41.9 % |\n");
    Ok(())
}

/// Mean µs of `f` over `n` runs.
fn time_us(n: usize, mut f: impl FnMut() -> CliResult) -> CliResult<f64> {
    let t = Instant::now();
    for _ in 0..n {
        f()?;
    }
    Ok(us(t.elapsed()) / n as f64)
}

/// Mean µs of `inner` run `n` times inside the keep (no crossing).
fn inside_us(k: &ProcessKeep, inner: u32, input: &[u8], cap: usize, n: u64) -> CliResult<f64> {
    let mut buf = vec![0u8; (4 + cap.max(input.len())).max(16)];
    buf[..4].copy_from_slice(&inner.to_le_bytes());
    buf[4..4 + input.len()].copy_from_slice(input);
    let got = k
        .call(proto::OP_REPEAT, n, &mut buf, 4 + input.len())
        .map_err(keep_err)?;
    if got != 16 {
        return Err(keep_err("short answer to a timed repeat"));
    }
    let ns = u64::from_le_bytes(buf[..8].try_into().unwrap_or_default());
    let done = u64::from_le_bytes(buf[8..16].try_into().unwrap_or_default()).max(1);
    Ok(ns as f64 / 1e3 / done as f64)
}

/// `f` run [`ROUNDS`] times: one figure per round.
fn rounds(mut f: impl FnMut() -> CliResult<f64>) -> CliResult<Vec<f64>> {
    (0..ROUNDS).map(|_| f()).collect()
}

fn gcm(k: &ProcessKeep, rows: &mut Rows) -> CliResult {
    let msg = b"Hello, cryptkeep keep!!"; // 23 bytes, as in the report
    let gcm = ops::gcm::Gcm::new(&[7u8; 32]);
    let n = 20_000 / ROUNDS;
    let ct = gcm.encrypt(msg, &[]).map_err(keep_err)?;
    let he = rounds(|| {
        time_us(n, || {
            std::hint::black_box(gcm.encrypt(msg, &[]).map_err(keep_err)?);
            Ok(())
        })
    })?;
    let hd = rounds(|| {
        time_us(n, || {
            std::hint::black_box(gcm.decrypt(&ct, &[]).map_err(keep_err)?);
            Ok(())
        })
    })?;
    let kct = k.gcm_encrypt(msg).map_err(keep_err)?;
    let ie = rounds(|| inside_us(k, proto::OP_GCM_ENCRYPT, msg, 64, n as u64))?;
    let id = rounds(|| inside_us(k, proto::OP_GCM_DECRYPT, &kct, 64, n as u64))?;
    let ce = rounds(|| time_us(n, || k.gcm_encrypt(msg).map(|_| ()).map_err(keep_err)))?;
    let cd = rounds(|| time_us(n, || k.gcm_decrypt(&kct).map(|_| ()).map_err(keep_err)))?;
    rows.add("host", "gcm_encrypt_us", "µs", &he);
    rows.add("host", "gcm_decrypt_us", "µs", &hd);
    rows.add("keep", "gcm_encrypt_us", "µs", &ie);
    rows.add("keep", "gcm_decrypt_us", "µs", &id);
    rows.add("keep", "gcm_encrypt_call_us", "µs", &ce);
    rows.add("keep", "gcm_decrypt_call_us", "µs", &cd);
    let [he, hd, ie, id, ce, cd] = [he, hd, ie, id, ce, cd].map(|v| mean(&v));
    println!("## AES-256-GCM of 23 bytes (µs per message)\n");
    println!("| | encrypt | decrypt |\n|---|---:|---:|");
    println!("| host | {he:.2} | {hd:.2} |");
    println!(
        "| inside the keep (timed there, no crossing; the report's measure) | {ie:.2} | {id:.2} |"
    );
    println!(
        "| keep/host, inside | {:.0} % | {:.0} % |",
        100.0 * he / ie,
        100.0 * hd / id
    );
    println!("| through the keep, with the call | {ce:.2} | {cd:.2} |");
    println!("| secGear SGX (report): host / enclave | 1.6 / 2.5 (64 %) | 0.6 / 1.9 (32 %) |\n");
    Ok(())
}

fn rsa(k: &ProcessKeep, rows: &mut Rows) -> CliResult {
    let msg = b"Hello, cryptkeep keep!!";
    let gens = 10;
    // One figure per key: the time varies a lot from key to key.
    let per_key = |f: &mut dyn FnMut() -> CliResult<f64>| -> CliResult<Vec<f64>> {
        (0..gens).map(|_| f()).collect()
    };
    let hg = per_key(&mut || {
        time_us(1, || {
            std::hint::black_box(ops::rsa::RsaKeyPair::generate_2048().map_err(keep_err)?);
            Ok(())
        })
    })?;
    let host = ops::rsa::RsaKeyPair::generate_2048().map_err(keep_err)?;
    let hpub = host.public_key_der();
    let n = 200 / ROUNDS;
    let hct = ops::rsa::encrypt_oaep_sha256(&hpub, msg).map_err(keep_err)?;
    let he = rounds(|| {
        time_us(n, || {
            std::hint::black_box(host.encrypt_oaep_sha256(msg).map_err(keep_err)?);
            Ok(())
        })
    })?;
    let hd = rounds(|| {
        time_us(n, || {
            std::hint::black_box(host.decrypt_oaep_sha256(&hct).map_err(keep_err)?);
            Ok(())
        })
    })?;
    let kg = per_key(&mut || time_us(1, || k.rsa_generate().map(|_| ()).map_err(keep_err)))?;
    let ig = per_key(&mut || inside_us(k, proto::OP_RSA_GENERATE, &[], 1024, 1))?;
    // After the last key generation, so the ciphertext is for the key in use.
    let kct = k.rsa_encrypt(msg).map_err(keep_err)?;
    let ie = rounds(|| inside_us(k, proto::OP_RSA_ENCRYPT, msg, 512, n as u64))?;
    let id = rounds(|| inside_us(k, proto::OP_RSA_DECRYPT, &kct, 512, n as u64))?;
    let ke = rounds(|| time_us(n, || k.rsa_encrypt(msg).map(|_| ()).map_err(keep_err)))?;
    let kd = rounds(|| time_us(n, || k.rsa_decrypt(&kct).map(|_| ()).map_err(keep_err)))?;
    rows.add("host", "rsa_keygen_us", "µs", &hg);
    rows.add("host", "rsa_encrypt_us", "µs", &he);
    rows.add("host", "rsa_decrypt_us", "µs", &hd);
    rows.add("keep", "rsa_keygen_us", "µs", &ig);
    rows.add("keep", "rsa_encrypt_us", "µs", &ie);
    rows.add("keep", "rsa_decrypt_us", "µs", &id);
    rows.add("keep", "rsa_keygen_call_us", "µs", &kg);
    rows.add("keep", "rsa_encrypt_call_us", "µs", &ke);
    rows.add("keep", "rsa_decrypt_call_us", "µs", &kd);
    let [hg, he, hd, kg, ig, ie, id, ke, kd] =
        [hg, he, hd, kg, ig, ie, id, ke, kd].map(|v| mean(&v));
    println!("## RSA-2048 (µs; OAEP-SHA-256, 23-byte message)\n");
    println!("| | key generation | encrypt | decrypt |\n|---|---:|---:|---:|");
    println!("| host | {hg:.0} | {he:.1} | {hd:.1} |");
    println!("| inside the keep (timed there) | {ig:.0} | {ie:.1} | {id:.1} |");
    println!(
        "| keep/host, inside | {:.0} % | {:.0} % | {:.0} % |",
        100.0 * hg / ig,
        100.0 * he / ie,
        100.0 * hd / id
    );
    println!("| through the keep, with the call | {kg:.0} | {ke:.1} | {kd:.1} |");
    println!("| secGear SGX (report): host / enclave | 164945 / 326562 (51 %) | 2203 / 4935 (44 %) | 1533 / 3927 (39 %) |\n");
    println!(
        "Key generation time varies a lot from key to key (prime search); {gens} keys each side.\n"
    );
    Ok(())
}

/// MiB/s of `threads` threads each running `f` on its own buffer.
fn throughput(
    threads: usize,
    secs: f64,
    req: usize,
    f: &(dyn Fn(u64, &mut [u8]) -> CliResult + Sync),
) -> CliResult<f64> {
    let deadline = Duration::from_secs_f64(secs);
    let total: CliResult<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || -> CliResult<u64> {
                    let mut buf = vec![0x5au8; req];
                    let t = Instant::now();
                    let mut bytes = 0u64;
                    let mut sector = (i as u64) << 32;
                    while t.elapsed() < deadline {
                        f(sector, &mut buf)?;
                        bytes += req as u64;
                        sector += (req / 4096) as u64;
                    }
                    Ok(bytes)
                })
            })
            .collect();
        let mut sum = 0;
        for h in hs {
            sum += h
                .join()
                .map_err(|_| keep_err("a bench thread panicked"))??;
        }
        Ok(sum)
    });
    Ok(total? as f64 / (1 << 20) as f64 / secs)
}

fn sectors(keep: Arc<ProcessKeep>, a: &Args, out: &mut Rows) -> CliResult {
    let spec = CipherSpec::parse("aes-xts-plain64").map_err(|e| from_crypto(&e, "bench"))?;
    let mut key = zeroize::Zeroizing::new(vec![0u8; 64]);
    cryptkeep_crypto::rand::fill_random(&mut key).map_err(|e| from_crypto(&e, "bench"))?;
    let cipher = new_sector_cipher(&spec, &key, Backend::Accelerated)
        .map_err(|e| from_crypto(&e, "bench"))?;
    let inline = InlineCrypt::new(cipher, 4096, 0);
    let through = cryptkeep_keep::crypt::KeepCrypt::new(keep.clone() as Arc<dyn Keep>, 4096);
    let req = a.request_kib.max(4) << 10;
    let vol = |e: cryptkeep_volume::Error| keep_err(e);
    let mut rows = Vec::new();
    for round in 0..3 {
        let i = throughput(a.threads, a.seconds, req, &|s, b| {
            inline.encrypt(s, b).map_err(vol)
        })?;
        let k = throughput(a.threads, a.seconds, req, &|s, b| {
            through.encrypt(s, b).map_err(vol)
        })?;
        let z = throughput(a.threads, a.seconds, req, &|s, b| {
            keep.client().with_slot(|slot| {
                let n = b.len().min(slot.buf().len());
                slot.call(proto::OP_ENCRYPT_SECTORS, s, n)
                    .map(|_| ())
                    .map_err(keep_err)
            })
        })?;
        rows.push((round, i, k, z));
    }
    out.add(
        "host",
        "xts_mibps",
        "MiB/s",
        &rows.iter().map(|r| r.1).collect::<Vec<_>>(),
    );
    out.add(
        "keep",
        "xts_mibps",
        "MiB/s",
        &rows.iter().map(|r| r.2).collect::<Vec<_>>(),
    );
    out.add(
        "keep",
        "xts_zero_copy_mibps",
        "MiB/s",
        &rows.iter().map(|r| r.3).collect::<Vec<_>>(),
    );
    println!("## Sector crypto, aes-xts-plain64 512-bit, 4096-byte sectors, {} KiB requests, {} threads (MiB/s)\n", a.request_kib, a.threads);
    println!("| round | inline | keep (copy in/out) | keep (zero-copy slot) | copy/inline | zero-copy/inline |\n|---|---:|---:|---:|---:|---:|");
    for (r, i, k, z) in &rows {
        println!(
            "| {} | {i:.0} | {k:.0} | {z:.0} | {:.1} % | {:.1} % |",
            r + 1,
            100.0 * k / i,
            100.0 * z / i
        );
    }
    println!("\nThe TresorSGX report: 1 % of plain throughput.\n");
    Ok(())
}

/// Authenticated sectors ([`AUTH_MODE`]): seal and open inline against
/// through the keep (data and tuples copied in and out of the slot).
fn auth_sectors(keep: Arc<ProcessKeep>, a: &Args, out: &mut Rows) -> CliResult {
    let crypto = |e: cryptkeep_crypto::Error| from_crypto(&e, "bench");
    let spec = AuthSpec::parse(AUTH_MODE.0, AUTH_MODE.1).map_err(crypto)?;
    let mut key = zeroize::Zeroizing::new(vec![0u8; spec.default_key_bytes()]);
    cryptkeep_crypto::rand::fill_random(&mut key).map_err(crypto)?;
    let inline = SectorAead::new(&spec, &key, 4096).map_err(crypto)?;
    let ts = spec.tuple_bytes();
    let through = KeepAuthCrypt::new(keep as Arc<dyn Keep>, 4096, ts).map_err(keep_err)?;
    let req = a.request_kib.max(4) << 10;
    let tuples = |b: &[u8]| vec![0u8; b.len() / 4096 * ts];
    let mut rows = Vec::new();
    for round in 0..3 {
        let si = throughput(a.threads, a.seconds, req, &|s, b| {
            inline.seal(s, b, &mut tuples(b)).map_err(crypto)
        })?;
        let sk = throughput(a.threads, a.seconds, req, &|s, b| {
            through.seal(s, b, &mut tuples(b)).map_err(keep_err)
        })?;
        // Opening what was just sealed, at the same place each time.
        let mut bi = vec![0x5au8; req];
        let mut ti = tuples(&bi);
        inline.seal(0, &mut bi, &mut ti).map_err(crypto)?;
        let oi = throughput(a.threads, a.seconds, req, &|_, b| {
            b.copy_from_slice(&bi);
            inline.open(0, b, &ti).map(|_| ()).map_err(crypto)
        })?;
        let ok = throughput(a.threads, a.seconds, req, &|_, b| {
            b.copy_from_slice(&bi);
            through.open(0, b, &ti).map(|_| ()).map_err(keep_err)
        })?;
        rows.push((round, si, sk, oi, ok));
    }
    let col = |f: fn(&(usize, f64, f64, f64, f64)) -> f64| rows.iter().map(f).collect::<Vec<_>>();
    out.add("host", "gcm_seal_mibps", "MiB/s", &col(|r| r.1));
    out.add("keep", "gcm_seal_mibps", "MiB/s", &col(|r| r.2));
    out.add("host", "gcm_open_mibps", "MiB/s", &col(|r| r.3));
    out.add("keep", "gcm_open_mibps", "MiB/s", &col(|r| r.4));
    println!(
        "## Authenticated sectors, {} + {}, 4096-byte sectors, {} KiB requests, {} threads (MiB/s)\n",
        AUTH_MODE.0, AUTH_MODE.1, a.request_kib, a.threads
    );
    println!("| round | seal inline | seal keep | keep/inline | open inline | open keep | keep/inline |\n|---|---:|---:|---:|---:|---:|---:|");
    for (r, si, sk, oi, ok) in &rows {
        println!(
            "| {} | {si:.0} | {sk:.0} | {:.1} % | {oi:.0} | {ok:.0} | {:.1} % |",
            r + 1,
            100.0 * sk / si,
            100.0 * ok / oi
        );
    }
    println!();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_number_reps_from_one_and_leave_out_what_is_not_positive() {
        let mut r = Rows::default();
        r.add("keep", "create_us", "µs", &[12.5, 0.0, f64::NAN, 3.0]);
        r.add("host", "sha256_mbps", "MB/s", &[-1.0, 174.0]);
        assert_eq!(
            r.0,
            "secgear,keep,create_us,1,12.5,µs\n\
             secgear,keep,create_us,4,3,µs\n\
             secgear,host,sha256_mbps,2,174,MB/s\n"
        );
        let dir = std::env::temp_dir().join(format!("bench-keep-rows-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("data.csv");
        r.write(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("report,target,metric,rep,value,unit\nsecgear,keep,"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
