//! Streaming reads (`CipherFile::with_streaming`): cipher files on a disk
//! read sequentially come from direct reads ahead of the reader, and read
//! back exactly what a plain read gives, across changes made through the
//! file and behind its back, with tampering still caught.

use crate::common::*;
use cryptkeep_overlay::{CipherDir, CipherFile, Error, HEADER_LEN, PLAIN_BS};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A scratch directory on the file system of the build directory (a disk
/// in most setups; on a tmpfs nothing is read directly and the tests only
/// check the contents).
fn on_disk(tag: &str) -> TempDir {
    let base = std::env::var_os("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let _ = std::fs::create_dir_all(&base);
    TempDir::new_in(&base, tag)
}

/// Whether `p` is on a file system in memory (no direct reads there).
fn in_memory(p: &Path) -> bool {
    let out = std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(p)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stdout);
    t.contains("tmpfs") || t.contains("ramfs")
}

/// A cipher file holding `data`, written through a `CipherFile`.
fn write_file(cd: &CipherDir, path: &Path, data: &[u8]) {
    std::fs::write(path, b"").unwrap();
    let mut f = CipherFile::open(path).unwrap();
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        f.write_at(cd.content(), piece, (i << 20) as u64).unwrap();
    }
}

/// Reads all of `f` in `step`-byte reads from `from` on.
fn read_from(cd: &CipherDir, f: &CipherFile, from: usize, step: usize, size: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = from;
    let mut buf = vec![0u8; step];
    while pos < size {
        let n = f.read_at(cd.content(), &mut buf, pos as u64).unwrap();
        assert!(n > 0, "short read at {pos}");
        out.extend_from_slice(&buf[..n]);
        pos += n;
    }
    out
}

#[test]
fn sequential_reads_stream_and_match() {
    let d = on_disk("stream");
    let cd = init_cheap(&d.join("cipher"));
    let disk = !in_memory(d.path());
    // Past several chunks, ending inside a block.
    let size = 13 * (1 << 20) + 4321;
    let data = bytes(7, size);
    let p = d.join("cipher/f");
    write_file(&cd, &p, &data);
    for step in [1 << 20, 128 << 10, 5000, 3 << 20] {
        let f = CipherFile::open(&p).unwrap().with_streaming();
        assert!(read_from(&cd, &f, 0, step, size) == data, "step {step}");
        if disk {
            assert!(f.streamed_reads() > 0, "step {step}: nothing streamed");
        }
        // Read again from the middle (a seek, then a new stream).
        let from = 5 * (1 << 20) + 3 * PLAIN_BS;
        assert!(
            read_from(&cd, &f, from, step, size) == data[from..],
            "step {step}"
        );
    }
}

#[test]
fn random_and_concurrent_reads_match() {
    let d = on_disk("stream-rand");
    let cd = init_cheap(&d.join("cipher"));
    let size = 9 * (1 << 20) + 17;
    let data = bytes(8, size);
    let p = d.join("cipher/f");
    write_file(&cd, &p, &data);
    let f = CipherFile::open(&p).unwrap().with_streaming();
    // Random reads: never wrong, whatever the stream makes of them.
    let r = bytes(9, 64 * 8);
    for i in 0..64 {
        let x = u64::from_le_bytes(r[i * 8..i * 8 + 8].try_into().unwrap()) as usize;
        let off = x % size;
        let len = 1 + x / size % (300 << 10);
        let mut buf = vec![0u8; len];
        let n = f.read_at(cd.content(), &mut buf, off as u64).unwrap();
        assert_eq!(n, len.min(size - off));
        assert!(buf[..n] == data[off..off + n], "read {len} at {off}");
    }
    // Four threads reading 1 MiB pieces in turn, slightly out of order.
    let piece = 1 << 20;
    let pieces = size.div_ceil(piece);
    let mut out = vec![0u8; pieces * piece];
    std::thread::scope(|s| {
        let mut lanes: Vec<Vec<(usize, &mut [u8])>> = (0..4).map(|_| Vec::new()).collect();
        for (k, part) in out.chunks_mut(piece).enumerate() {
            lanes[k % 4].push((k, part));
        }
        for lane in lanes {
            let (f, cd) = (&f, &cd);
            s.spawn(move || {
                for (k, part) in lane {
                    f.read_at(cd.content(), part, (k * piece) as u64).unwrap();
                }
            });
        }
    });
    assert!(out[..size] == data[..]);
}

#[test]
fn changes_are_seen() {
    let d = on_disk("stream-change");
    let cd = init_cheap(&d.join("cipher"));
    let size = 10 * (1 << 20);
    let mut data = bytes(10, size);
    let p = d.join("cipher/f");
    write_file(&cd, &p, &data);
    let mut f = CipherFile::open(&p).unwrap().with_streaming();
    let step = 1 << 20;
    let mut buf = vec![0u8; step];
    // Start a stream (chunks are read ahead now).
    for k in 0..2 {
        f.read_at(cd.content(), &mut buf, (k * step) as u64)
            .unwrap();
        assert!(buf[..] == data[k * step..(k + 1) * step]);
    }
    // A write through the file, ahead of the reader.
    let new = bytes(11, 3 * PLAIN_BS + 5);
    let at = 3 * step + 100;
    f.write_at(cd.content(), &new, at as u64).unwrap();
    data[at..at + new.len()].copy_from_slice(&new);
    for k in 2..5 {
        f.read_at(cd.content(), &mut buf, (k * step) as u64)
            .unwrap();
        assert!(buf[..] == data[k * step..(k + 1) * step], "piece {k}");
    }
    // A change behind its back: another file (gocryptfs, a restore) put a
    // block of the same file there, of the same length.
    let other = CipherFile::open(&p).unwrap();
    let newer = bytes(12, PLAIN_BS);
    let block = (6 * step / PLAIN_BS) as u64 + 2;
    let mut o = other;
    o.write_at(cd.content(), &newer, block * PLAIN_BS as u64)
        .unwrap();
    let at = block as usize * PLAIN_BS;
    data[at..at + PLAIN_BS].copy_from_slice(&newer);
    for k in 5..10 {
        f.read_at(cd.content(), &mut buf, (k * step) as u64)
            .unwrap();
        assert!(buf[..] == data[k * step..(k + 1) * step], "piece {k}");
    }
    // Grown behind its back: the new end is read too.
    let tail = bytes(13, 5000);
    o.write_at(cd.content(), &tail, size as u64).unwrap();
    data.extend_from_slice(&tail);
    let all = read_from(&cd, &f, 0, step, data.len());
    assert!(all == data);
}

#[test]
fn tampering_is_caught_when_streaming() {
    let d = on_disk("stream-tamper");
    let cd = init_cheap(&d.join("cipher"));
    let size = 6 * (1 << 20);
    let data = bytes(14, size);
    let p = d.join("cipher/f");
    write_file(&cd, &p, &data);
    // Flip a bit of block 700 (in the second chunk).
    let raw = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    let cbs = cd.content().cipher_bs();
    let pos = (HEADER_LEN + 700 * cbs + 200) as u64;
    let orig = std::fs::read(&p).unwrap()[pos as usize];
    raw.write_all_at(&[orig ^ 0x10], pos).unwrap();
    let f = CipherFile::open(&p).unwrap().with_streaming();
    let step = 1 << 20;
    let mut buf = vec![0u8; step];
    let mut failed = None;
    for k in 0..6 {
        match f.read_at(cd.content(), &mut buf, (k * step) as u64) {
            Ok(_) => assert!(buf[..] == data[k * step..(k + 1) * step], "piece {k}"),
            Err(Error::Auth { block, .. }) => {
                failed = Some((k, block));
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(failed, Some((2, Some(700))));
}
