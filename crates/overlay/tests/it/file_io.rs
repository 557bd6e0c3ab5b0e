//! Random-access I/O on cipher files against a plain in-memory model, with
//! gocryptfs reading what we wrote (and `-fsck` clean), and us reading what
//! gocryptfs wrote with the same operations.

use crate::common::*;
use cryptkeep_overlay::{CipherDir, CipherFile, InitOptions, PLAIN_BS};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// One operation of the random script.
#[derive(Debug, Clone)]
enum Op {
    Write(u64, Vec<u8>),
    Truncate(u64),
}

fn script(seed: u64, n: usize) -> Vec<Op> {
    let r = bytes(seed, n * 16);
    let num =
        |i: usize, k: usize| u64::from_le_bytes(r[i * 16 + k..i * 16 + k + 8].try_into().unwrap());
    let mut ops = Vec::new();
    for i in 0..n {
        let a = num(i, 0);
        let b = num(i, 8);
        let off = match a % 4 {
            0 => (b % 16) * PLAIN_BS as u64, // block-aligned
            1 => b % (40 * PLAIN_BS as u64), // anywhere
            2 => (b % 16) * PLAIN_BS as u64 + PLAIN_BS as u64 - 1, // one before a boundary
            _ => b % 300,                    // near the start
        };
        if a % 7 == 0 {
            ops.push(Op::Truncate(b % (30 * PLAIN_BS as u64)));
        } else if a % 23 == 1 {
            ops.push(Op::Truncate(0));
        } else {
            let len = [
                1usize,
                100,
                PLAIN_BS - 1,
                PLAIN_BS,
                PLAIN_BS + 1,
                3 * PLAIN_BS + 17,
            ][(b % 6) as usize];
            ops.push(Op::Write(off, bytes(a, len)));
        }
    }
    ops
}

fn apply_model(model: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write(off, d) => {
            let end = *off as usize + d.len();
            if model.len() < end {
                model.resize(end, 0);
            }
            model[*off as usize..end].copy_from_slice(d);
        }
        Op::Truncate(s) => model.resize(*s as usize, 0),
    }
}

fn read_all_ours(cd: &CipherDir, path: &Path) -> Vec<u8> {
    let f = CipherFile::open(path).unwrap();
    let size = f.plain_size(cd.content()).unwrap() as usize;
    let mut out = vec![0u8; size];
    // Odd-sized reads across block boundaries.
    let mut pos = 0;
    while pos < size {
        let n = f
            .read_at(
                cd.content(),
                &mut out[pos..(pos + 5000).min(size)],
                pos as u64,
            )
            .unwrap();
        assert!(n > 0);
        pos += n;
    }
    assert!(read_aligned_concurrently(cd, path) == out);
    out
}

/// The whole file read as a kernel reads it (block-aligned chunks of
/// 8 blocks, into buffers longer than what is left at the end), by four
/// threads at once on one freshly opened `CipherFile` (shared header).
fn read_aligned_concurrently(cd: &CipherDir, path: &Path) -> Vec<u8> {
    let f = CipherFile::open(path).unwrap();
    let size = f.plain_size(cd.content()).unwrap() as usize;
    let chunk = 8 * PLAIN_BS;
    let mut out = vec![0u8; size.div_ceil(chunk) * chunk];
    std::thread::scope(|s| {
        let parts: Vec<(usize, &mut [u8])> = out.chunks_mut(chunk).enumerate().collect();
        let mut lanes: Vec<Vec<(usize, &mut [u8])>> = (0..4).map(|_| Vec::new()).collect();
        for (k, p) in parts {
            lanes[k % 4].push((k, p));
        }
        for lane in lanes {
            let f = &f;
            s.spawn(move || {
                for (k, p) in lane {
                    let off = (k * chunk) as u64;
                    let n = f.read_at(cd.content(), p, off).unwrap();
                    assert_eq!(n, (size - k * chunk).min(chunk));
                }
            });
        }
    });
    out.truncate(size);
    out
}

#[test]
fn our_writes_read_back_by_gocryptfs() {
    need!(fuse, gocryptfs);
    let t = TempDir::new("fileio-ours");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    let opts = InitOptions {
        scrypt_log_n: 10,
        ..InitOptions::default()
    };
    let (cd, _) = CipherDir::init(&cipher, PASSWORD.as_bytes(), &opts).unwrap();
    let path = cd.encrypt_path(Path::new("f")).unwrap();
    fs::File::create(&path).unwrap();
    let mut f = CipherFile::open(&path).unwrap();
    let mut model = Vec::new();
    for (i, op) in script(11, 300).iter().enumerate() {
        match op {
            Op::Write(off, d) => f.write_at(cd.content(), d, *off).unwrap(),
            Op::Truncate(s) => f.truncate(cd.content(), *s).unwrap(),
        }
        apply_model(&mut model, op);
        assert_eq!(
            f.plain_size(cd.content()).unwrap(),
            model.len() as u64,
            "op {i}: {op:?}"
        );
        if i % 25 == 0 {
            assert!(read_all_ours(&cd, &path) == model, "op {i}");
        }
    }
    drop(f);
    assert!(read_all_ours(&cd, &path) == model);
    {
        let m = Mount::new(&cipher, &t.join("mnt"), &pf, &["-ro"]);
        assert!(
            fs::read(m.path().join("f")).unwrap() == model,
            "gocryptfs reads something else"
        );
    }
    let out = std::process::Command::new("gocryptfs")
        .args(["-fsck", "-q", "-passfile"])
        .arg(&pf)
        .arg(&cipher)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fsck: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn gocryptfs_writes_read_back_by_us() {
    need!(fuse, gocryptfs);
    let t = TempDir::new("fileio-theirs");
    let pf = passfile(&t);
    let cipher = t.join("cipher");
    gocryptfs_init(&cipher, &pf, &[]);
    let mut model = Vec::new();
    let mut snapshots = Vec::new();
    {
        let m = Mount::new(&cipher, &t.join("mnt"), &pf, &[]);
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(m.path().join("f"))
            .unwrap();
        for op in script(12, 200) {
            match &op {
                Op::Write(off, d) => f.write_all_at(d, *off).unwrap(),
                Op::Truncate(s) => f.set_len(*s).unwrap(),
            }
            apply_model(&mut model, &op);
        }
        f.sync_all().unwrap();
        snapshots.push(model.clone());
    }
    let cd = CipherDir::open(&cipher, PASSWORD.as_bytes()).unwrap();
    let path = cd.encrypt_path(Path::new("f")).unwrap();
    assert!(read_all_ours(&cd, &path) == snapshots[0]);
}
