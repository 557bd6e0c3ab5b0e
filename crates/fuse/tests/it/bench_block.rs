//! The block path's throughput: fio sequential 1 MiB writes and reads
//! (iodepth 64, libaio, direct, 2 jobs, 256 MiB) on a direct-I/O loop device
//! over (a) cryptkeep's FUSE block file and (b) a bindfs passthrough of a
//! plain file, both backed by one tmpfs, interleaved in the same run.
//! Ignored by default; run as root with
//! `cargo test --release -p cryptkeep-fuse --test it bench_block:: -- --ignored --nocapture`.
//! Knobs (environment): CK_BENCH_REPS (3); CK_BENCH_CONFIGS, a comma list
//! of cryptkeep configurations `threads:split[:max_background]` (split =
//! pool|none|scoped) measured side by side, e.g. `2:pool,4:pool,4:none`;
//! CK_BENCH_MAX_IO (bytes).

use crate::common::*;

use std::process::Command;
use std::sync::Arc;

use cryptkeep_fuse::{mount_block_file_with, BlockFileTuning};
use cryptkeep_volume::{ParallelConfig, Parallelism};

const DEV_SIZE: u64 = 320 << 20;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs the benchmark's fio command on `dev`; returns MiB/s.
fn fio(dev: &str, rw: &str) -> f64 {
    let out = Command::new("fio")
        .args([
            "--name=w",
            &format!("--filename={dev}"),
            &format!("--rw={rw}"),
            "--bs=1M",
            "--iodepth=64",
            "--ioengine=libaio",
            "--direct=1",
            "--numjobs=2",
            "--size=256M",
            "--group_reporting",
            "--minimal",
        ])
        .output()
        .expect("fio");
    assert!(
        out.status.success(),
        "fio: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let f: Vec<&str> = line.split(';').collect();
    // Terse format v3: read bandwidth (KiB/s) is field 7, write bandwidth field 48.
    let kib: f64 = f[if rw == "read" { 6 } else { 47 }]
        .parse()
        .expect("fio terse output");
    kib / 1024.0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One cryptkeep configuration to measure: `threads:split[:max_background]`.
#[derive(Clone, Copy, Debug)]
struct Cfg {
    tuning: BlockFileTuning,
    split: Parallelism,
}

fn parse_cfg(s: &str) -> Cfg {
    let mut it = s.split(':');
    let mut tuning = BlockFileTuning::default();
    if let Some(t) = it.next().and_then(|t| t.parse().ok()) {
        tuning = tuning.with_threads(t);
    }
    let split = match it.next() {
        Some("none") => Parallelism::None,
        Some("scoped") => Parallelism::Scoped,
        _ => Parallelism::Pool,
    };
    if let Some(b) = it.next().and_then(|b| b.parse().ok()) {
        tuning = tuning.with_max_background(b);
    }
    if let Some(m) = env("CK_BENCH_MAX_IO") {
        tuning = tuning.with_max_io(m);
    }
    Cfg { tuning, split }
}

#[test]
#[ignore = "benchmark; needs root, fio, bindfs"]
fn bench_fio_fuse_vs_bindfs() {
    need!(root, fuse, loop_dev);
    for t in ["fio", "bindfs", "losetup", "fusermount3"] {
        need!(tool t);
    }
    let reps: usize = env("CK_BENCH_REPS").unwrap_or(3);
    let default_cfg = format!("{}:pool", BlockFileTuning::default().threads);
    let cfgs: Vec<Cfg> = std::env::var("CK_BENCH_CONFIGS")
        .unwrap_or(default_cfg)
        .split(',')
        .map(parse_cfg)
        .collect();

    let dir = TempDir::new("bench");
    let tmpfs = dir.sub("tmpfs");
    let _tmpfs = Tmpfs::mount(&tmpfs, (cfgs.len() as u64 + 1) * (DEV_SIZE >> 20) + 256);

    // cryptkeep: FUSE block files over images on tmpfs, one per configuration.
    let mut fuses = Vec::new();
    let mut devs = Vec::new();
    let mut names = Vec::new();
    for (i, cfg) in cfgs.iter().enumerate() {
        let img = tmpfs.join(format!("ck{i}.img"));
        backing(&img, DEV_SIZE);
        let eng = engine(&img, &random_key(64), 4096, false);
        let eng = Arc::new(
            Arc::try_unwrap(eng)
                .unwrap_or_else(|_| unreachable!())
                .with_parallelism(ParallelConfig {
                    mode: cfg.split,
                    ..ParallelConfig::default()
                }),
        );
        let mnt = dir.sub(&format!("ck{i}"));
        let o = opts(false, false);
        fuses.push(FuseGuard(Some(
            mount_block_file_with(eng, &mnt, &o, cfg.tuning).expect("mount"),
        )));
        let dev = LoopDev::attach(&cryptkeep_fuse::block_file_path(&mnt, &o));
        assert!(dev.direct_io(), "loop device without direct I/O");
        devs.push(dev);
        names.push(format!(
            "cryptkeep ({} threads, {:?} split, max_bg {})",
            cfg.tuning.threads, cfg.split, cfg.tuning.max_background
        ));
    }

    // bindfs: plain passthrough of a file on the same tmpfs.
    let plain = tmpfs.join("plain");
    std::fs::create_dir(&plain).unwrap();
    backing(&plain.join("file"), DEV_SIZE);
    let bind_mnt = dir.sub("bind");
    run(
        "bindfs",
        &[plain.to_str().unwrap(), bind_mnt.to_str().unwrap()],
    );
    struct FuseUnmount(String);
    impl Drop for FuseUnmount {
        fn drop(&mut self) {
            let _ = Command::new("fusermount3").args(["-u", &self.0]).status();
        }
    }
    let _bind = FuseUnmount(bind_mnt.to_str().unwrap().to_string());
    let bind_dev = LoopDev::attach(&bind_mnt.join("file"));
    assert!(
        bind_dev.direct_io(),
        "bindfs loop device without direct I/O"
    );
    names.push("bindfs passthrough".into());

    let all: Vec<&LoopDev> = devs.iter().chain(std::iter::once(&bind_dev)).collect();
    let mut res = vec![[Vec::new(), Vec::new()]; all.len()];
    for _ in 0..reps {
        for (t, dev) in all.iter().enumerate() {
            res[t][0].push(fio(&dev.0, "write"));
            res[t][1].push(fio(&dev.0, "read"));
        }
    }
    println!("| target | fio seq write [MiB/s] | fio seq read [MiB/s] | write / bindfs | read / bindfs |");
    println!("|---|---|---|---|---|");
    let meds: Vec<[f64; 2]> = res
        .iter_mut()
        .map(|r| [median(&mut r[0]), median(&mut r[1])])
        .collect();
    let b = meds[meds.len() - 1];
    for (name, m) in names.iter().zip(&meds) {
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}x | {:.2}x |",
            m[0],
            m[1],
            m[0] / b[0],
            m[1] / b[1]
        );
    }
    println!("(medians of {reps} interleaved runs; all samples {res:.0?})");
    drop(bind_dev);
    drop(devs);
    drop(fuses);
}
