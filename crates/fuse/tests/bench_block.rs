//! The block path's throughput: fio sequential 1 MiB writes and reads
//! (iodepth 64, libaio, direct, 2 jobs, 256 MiB) on a direct-I/O loop device
//! over (a) cryptkeep's FUSE block file and (b) a bindfs passthrough of a
//! plain file, both backed by one tmpfs, interleaved in the same run.
//! Ignored by default; run as root with
//! `cargo test --release -p cryptkeep-fuse --test bench_block -- --ignored --nocapture`.
//! Tuning knobs (environment): CK_BENCH_REPS (3), CK_BENCH_THREADS,
//! CK_BENCH_MAX_IO (bytes), CK_BENCH_MAX_BG, CK_BENCH_SPLIT (none|pool|scoped).

mod common;
use common::*;

use std::process::Command;
use std::sync::Arc;

use cryptkeep_fuse::{mount_block_file_with, BlockFileTuning};
use cryptkeep_volume::{ParallelConfig, Parallelism};

const DEV_SIZE: u64 = 320 << 20;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Runs the brief's fio command on `dev`; returns MiB/s.
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

struct Unmount(String);
impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[test]
#[ignore = "benchmark; needs root, fio, bindfs"]
fn bench_fio_fuse_vs_bindfs() {
    require_root();
    for t in ["fio", "bindfs", "losetup", "fusermount3"] {
        require_tool(t);
    }
    let reps: usize = env("CK_BENCH_REPS").unwrap_or(3);
    let mut tuning = BlockFileTuning::default();
    if let Some(t) = env("CK_BENCH_THREADS") {
        tuning = tuning.with_threads(t);
    }
    if let Some(m) = env("CK_BENCH_MAX_IO") {
        tuning = tuning.with_max_io(m);
    }
    if let Some(b) = env("CK_BENCH_MAX_BG") {
        tuning = tuning.with_max_background(b);
    }
    let split = match std::env::var("CK_BENCH_SPLIT").as_deref() {
        Ok("none") => Parallelism::None,
        Ok("scoped") => Parallelism::Scoped,
        _ => Parallelism::Pool,
    };

    let dir = TempDir::new("bench");
    let tmpfs = dir.sub("tmpfs");
    run(
        "mount",
        &[
            "-t",
            "tmpfs",
            "-o",
            "size=1G",
            "tmpfs",
            tmpfs.to_str().unwrap(),
        ],
    );
    let _tmpfs = Unmount(tmpfs.to_str().unwrap().to_string());

    // cryptkeep: FUSE block file over an image on tmpfs.
    let img = tmpfs.join("ck.img");
    backing(&img, DEV_SIZE);
    let eng = engine(&img, &random_key(), 4096, false);
    let eng = Arc::new(
        Arc::try_unwrap(eng)
            .unwrap_or_else(|_| unreachable!())
            .with_parallelism(ParallelConfig {
                mode: split,
                ..ParallelConfig::default()
            }),
    );
    let ck_mnt = dir.sub("ck");
    let o = opts(false, false);
    let _fuse = FuseGuard(Some(
        mount_block_file_with(eng.clone(), &ck_mnt, &o, tuning).expect("mount"),
    ));
    let ck_dev = LoopDev::attach(&cryptkeep_fuse::block_file_path(&ck_mnt, &o));

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
    println!(
        "loop dio: cryptkeep {} bindfs {}; tuning {tuning:?}; split {split:?}",
        ck_dev.direct_io(),
        bind_dev.direct_io()
    );

    let mut res: [[Vec<f64>; 2]; 2] = Default::default();
    for _ in 0..reps {
        for (t, dev) in [&ck_dev, &bind_dev].iter().enumerate() {
            res[t][0].push(fio(&dev.0, "write"));
            res[t][1].push(fio(&dev.0, "read"));
        }
    }
    let names = ["cryptkeep", "bindfs"];
    println!("| target | fio seq write [MiB/s] | fio seq read [MiB/s] |");
    println!("|---|---|---|");
    let mut med = [[0.0; 2]; 2];
    for t in 0..2 {
        med[t] = [median(&mut res[t][0]), median(&mut res[t][1])];
        println!("| {} | {:.0} | {:.0} |", names[t], med[t][0], med[t][1]);
    }
    println!(
        "| cryptkeep / bindfs | {:.2}x | {:.2}x |",
        med[0][0] / med[1][0],
        med[0][1] / med[1][1]
    );
    println!("(medians of {reps} interleaved runs, all samples: {res:?})");
    drop(bind_dev);
    drop(ck_dev);
}
