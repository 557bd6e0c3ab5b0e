//! Engine throughput for 128 KiB – 1 MiB requests with each way of
//! splitting the crypto over the cores (none, persistent pool, scoped
//! threads), with one and with several concurrent callers. Ignored by
//! default; run with
//! `cargo test --release -p cryptkeep-volume --test it bench_engine:: -- --ignored --nocapture`.

use crate::common::*;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cryptkeep_volume::{Engine, ParallelConfig, Parallelism};

const SIZE: u64 = 64 << 20;

fn mib_per_s(eng: &Engine, req: usize, callers: usize, write: bool) -> f64 {
    let per_caller = SIZE as usize / callers;
    let run_for = Duration::from_millis(250);
    let start = Instant::now();
    let total: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..callers)
            .map(|c| {
                s.spawn(move || {
                    let mut buf = vec![0x5au8; req];
                    let mut done = 0usize;
                    let base = c * per_caller;
                    let mut off = 0usize;
                    while start.elapsed() < run_for {
                        let pos = (base + off) as u64;
                        if write {
                            eng.write_at(&buf, pos).unwrap();
                        } else {
                            eng.read_at(&mut buf, pos).unwrap();
                        }
                        done += req;
                        off = (off + req) % (per_caller - req + 1) / req * req;
                    }
                    done
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    total as f64 / start.elapsed().as_secs_f64() / (1 << 20) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[test]
#[ignore = "benchmark"]
fn bench_split_strategies() {
    let dir_base = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir_base.join(format!("ck-bench-engine-{}", std::process::id()));
    let key = random_key(64);
    let g = Geo {
        sector_size: 4096,
        iv_tweak: 0,
        data_offset: 0,
        data_size: SIZE,
        trailer: 0,
    };
    let base = engine(&path, &key, g, false, 0);
    drop(base);
    let modes = [Parallelism::None, Parallelism::Pool, Parallelism::Scoped];
    let engines: Vec<Arc<Engine>> = modes
        .iter()
        .map(|&mode| {
            Arc::new(
                open(&path, &key, g, false).with_parallelism(ParallelConfig {
                    mode,
                    ..ParallelConfig::default()
                }),
            )
        })
        .collect();
    println!("| request | callers | split | write MiB/s | read MiB/s |");
    println!("|---|---|---|---|---|");
    for req in [128 << 10, 256 << 10, 512 << 10, 1 << 20] {
        for callers in [1, 2, 4] {
            // Modes interleaved, 3 rounds, medians: the box may be busy.
            let mut w = vec![Vec::new(); modes.len()];
            let mut r = vec![Vec::new(); modes.len()];
            for _ in 0..3 {
                for (m, eng) in engines.iter().enumerate() {
                    w[m].push(mib_per_s(eng, req, callers, true));
                    r[m].push(mib_per_s(eng, req, callers, false));
                }
            }
            for (m, mode) in modes.iter().enumerate() {
                println!(
                    "| {} KiB | {callers} | {mode:?} | {:.0} | {:.0} |",
                    req >> 10,
                    median(&mut w[m]),
                    median(&mut r[m])
                );
            }
        }
    }
    let _ = std::fs::remove_file(&path);
}
