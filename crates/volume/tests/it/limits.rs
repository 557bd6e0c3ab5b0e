//! Read-only volumes, writes past the end, discard, geometry checks and the
//! errno mapping.

use crate::common::*;
use cryptkeep_volume::{Engine, Error, InlineCrypt};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

fn geo(sector_size: usize) -> Geo {
    Geo {
        sector_size,
        iv_tweak: 0,
        data_offset: 4096,
        data_size: 1 << 20,
        trailer: 0,
    }
}

#[test]
fn read_only_refuses_writes_and_discards() {
    let dir = TempDir::new("ro");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let g = geo(512);
    let rw = engine(&path, &key, g, false, 0);
    rw.write_at(b"hello, sectors", 1000).unwrap();
    drop(rw);
    let before = read_file(&path);
    let ro = open(&path, &key, g, true);
    assert!(ro.read_only());
    let e = ro.write_at(b"x", 0).unwrap_err();
    assert!(matches!(e, Error::ReadOnly), "{e}");
    assert_eq!(e.errno(), libc::EROFS);
    assert!(matches!(ro.discard(0, 65536), Err(Error::ReadOnly)));
    let mut b = [0u8; 14];
    ro.read_at(&mut b, 1000).unwrap();
    assert_eq!(&b, b"hello, sectors");
    assert!(
        read_file(&path) == before,
        "read-only engine changed the file"
    );
}

#[test]
fn writes_past_the_end_fail_and_write_nothing() {
    let dir = TempDir::new("end");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let g = geo(4096);
    let eng = engine(&path, &key, g, false, 0);
    let before = read_file(&path);
    for (off, len) in [
        (g.data_size - 10, 11u64),
        (g.data_size, 1),
        (g.data_size + 4096, 4096),
    ] {
        let e = eng.write_at(&vec![1u8; len as usize], off).unwrap_err();
        assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
        assert_eq!(e.errno(), libc::ENOSPC);
    }
    assert!(read_file(&path) == before);
    // Exactly up to the end is fine.
    assert_eq!(eng.write_at(&[7u8; 10], g.data_size - 10).unwrap(), 10);
    assert!(matches!(
        eng.discard(g.data_size - 512, 1024),
        Err(Error::OutOfRange { .. })
    ));
}

#[test]
fn discard_punches_whole_sectors_only() {
    let dir = TempDir::new("discard");
    let path = dir.join("vol.img");
    let key = random_key(64);
    let g = geo(4096);
    let eng = engine(&path, &key, g, false, 0);
    let mut plain = vec![0u8; g.data_size as usize];
    Rng(42).fill(&mut plain);
    eng.write_at(&plain, 0).unwrap();
    eng.flush().unwrap();
    let blocks_before = std::fs::metadata(&path).unwrap().blocks();
    // From the middle of sector 2 to the middle of sector 100: sectors 3..100
    // are punched, 2 and 100 keep their data.
    let (off, end) = (2 * 4096 + 100, 100 * 4096 + 5);
    eng.discard(off, end - off).unwrap();
    let raw = read_file(&path);
    let seg = &raw[g.data_offset as usize..];
    assert!(
        seg[3 * 4096..100 * 4096].iter().all(|&b| b == 0),
        "hole not punched"
    );
    assert!(
        seg[2 * 4096..3 * 4096].iter().any(|&b| b != 0),
        "partial head sector discarded"
    );
    assert!(
        seg[100 * 4096..101 * 4096].iter().any(|&b| b != 0),
        "partial tail sector discarded"
    );
    let blocks_after = std::fs::metadata(&path).unwrap().blocks();
    assert!(
        blocks_after + 97 * 8 <= blocks_before,
        "backing store still allocates the discarded sectors ({blocks_before} -> {blocks_after} blocks)"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        g.data_offset + g.data_size
    );
    let mut b = vec![0u8; 4096];
    eng.read_at(&mut b, 2 * 4096).unwrap();
    assert!(b[..] == plain[2 * 4096..3 * 4096]);
    eng.read_at(&mut b, 100 * 4096).unwrap();
    assert!(b[..] == plain[100 * 4096..101 * 4096]);
    // Less than one whole sector: nothing happens.
    eng.discard(5 * 4096 + 1, 4096).unwrap();
    // Writing into a discarded area works as usual.
    eng.write_at(&plain[50 * 4096..51 * 4096 + 7], 50 * 4096)
        .unwrap();
    let mut c = vec![0u8; 4096 + 7];
    eng.read_at(&mut c, 50 * 4096).unwrap();
    assert!(c[..] == plain[50 * 4096..51 * 4096 + 7]);
}

#[test]
fn bad_geometry_is_refused() {
    let dir = TempDir::new("geo");
    let path = dir.join("vol.img");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let key = random_key(64);
    let open = |ss: usize, off: u64, size: u64| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        Engine::new(
            f,
            off,
            size,
            Arc::new(InlineCrypt::new(cipher(&key), ss, 0)),
            false,
        )
    };
    assert!(open(4096, 0, 1 << 20).is_ok());
    for (ss, off, size) in [
        (4096, 0, (1 << 20) - 512),
        (4096, 4096, 1 << 20),
        (1000, 0, 512_000),
        (8192, 0, 1 << 20),
    ] {
        match open(ss, off, size) {
            Err(e @ Error::Geometry(_)) => assert_eq!(e.errno(), libc::EINVAL),
            other => panic!("sector {ss}, offset {off}, size {size}: {other:?}"),
        }
    }
}

#[test]
fn io_errors_keep_their_errno() {
    let e = Error::Io {
        what: "read",
        offset: 7,
        source: std::io::Error::from_raw_os_error(libc::ENOSPC),
    };
    assert_eq!(e.errno(), libc::ENOSPC);
    assert!(e.to_string().contains("byte 7"));
    assert_eq!(Error::Crypt("x".into()).errno(), libc::EIO);
    assert_eq!(Error::KeepGone.errno(), libc::EIO);
}
