//! The overlay's key holder over the keep's wire format: a file system
//! whose keys stay in an [`OverlayHandler`] (reached through the same `Keep`
//! trait and slot requests the process keep uses) writes what in-process
//! ciphers read and the reverse, runs longer than one slot are split,
//! tampering names its block, and malformed requests are refused with a
//! status, never a panic.

use std::sync::Arc;
use std::time::{Duration, Instant};

use cryptkeep_crypto::Backend;
use cryptkeep_keep::keep::{Keep, SlotAccess};
use cryptkeep_keep::ops::dispatch::Ops;
use cryptkeep_keep::ops::seal::SealKey;
use cryptkeep_keep::overlay_keys::KeepKeyHolder;
use cryptkeep_keep::proto::*;
use cryptkeep_keep::server::{OverlayHandler, RuntimeHandler};
use cryptkeep_keep::shm::Handler;
use cryptkeep_keep::Error;
use cryptkeep_overlay::{
    CipherDir, Config, DirIv, Error as OverlayError, FileHeader, HeldKeys, InitOptions, MasterKey,
    COPY_ALIGN, HEADER_LEN,
};

/// A keep in this process: requests go straight to the handler, through a
/// slot buffer like the shared one (so lengths and caps are exercised).
struct LocalKeep {
    handler: OverlayHandler,
    slot: usize,
    /// Slot requests made so far.
    requests: std::sync::atomic::AtomicUsize,
}

fn refused(op: u32, status: u32) -> Error {
    Error::Refused {
        op: op_name(op),
        status,
        detail: status_text(status).into(),
    }
}

struct LocalSlot<'a> {
    h: &'a OverlayHandler,
    buf: Vec<u8>,
}

impl SlotAccess for LocalSlot<'_> {
    fn buf(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    fn call_at(&mut self, op: u32, arg: u64, offset: usize, in_len: usize) -> Result<usize, Error> {
        self.call_cap(op, arg, offset, in_len, in_len)
    }
    fn call_cap(
        &mut self,
        op: u32,
        arg: u64,
        offset: usize,
        cap: usize,
        in_len: usize,
    ) -> Result<usize, Error> {
        let b = &mut self.buf[offset..offset + cap];
        self.h
            .handle(op, arg, b, in_len)
            .map_err(|s| refused(op, s))
    }
    fn start(&mut self, _: u32, _: u64, _: usize, _: usize) -> Result<(), Error> {
        Err(Error::BadRequest("not used".into()))
    }
    fn finish(&mut self) -> Result<usize, Error> {
        Err(Error::BadRequest("not used".into()))
    }
}

impl Keep for LocalKeep {
    fn call(&self, op: u32, arg: u64, buf: &mut [u8], in_len: usize) -> Result<usize, Error> {
        self.handler
            .handle(op, arg, buf, in_len)
            .map_err(|s| refused(op, s))
    }
    fn max_request(&self) -> usize {
        self.slot
    }
    fn is_alive(&self) -> bool {
        true
    }
    fn kind(&self) -> &'static str {
        "in-process test"
    }
    fn slot_len(&self) -> usize {
        self.slot
    }
    fn with_slot(
        &self,
        f: &mut dyn FnMut(&mut dyn SlotAccess) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f(&mut LocalSlot {
            h: &self.handler,
            buf: vec![0u8; self.slot],
        })
    }
}

/// A config and master key, the in-process cipher directory, and one whose
/// keys are in a local keep with `slot`-byte slots.
fn setup(opts: InitOptions, slot: usize) -> (CipherDir, CipherDir, Arc<LocalKeep>) {
    let mk = MasterKey::random().unwrap();
    let opts = InitOptions {
        scrypt_log_n: 10,
        ..opts
    };
    let cfg = Config::create(&opts, &mk, b"pw").unwrap();
    let root = std::path::Path::new("/nonexistent");
    let local = CipherDir::from_parts(root, cfg.clone(), &mk, Backend::default()).unwrap();
    let keys = HeldKeys::derive(&mk, &cfg, Backend::default()).unwrap();
    let keep = Arc::new(LocalKeep {
        handler: OverlayHandler::new(keys),
        slot,
        requests: Default::default(),
    });
    let holder = KeepKeyHolder::new(keep.clone(), cfg.content_alg()).unwrap();
    let held = CipherDir::with_key_holder(root, cfg, Arc::new(holder)).unwrap();
    (local, held, keep)
}

#[test]
fn keep_held_keys_agree_with_local_keys_and_split_long_runs() {
    for opts in [
        InitOptions::default(),
        InitOptions {
            xchacha: true,
            ..InitOptions::default()
        },
    ] {
        // Three full blocks per request: a 10-block run takes four.
        let (local, held, _) = setup(opts, 16 << 10);
        let id = FileHeader::random().unwrap().id;
        let plain: Vec<u8> = (0..10 * 4096 - 7).map(|i| (i * 13 % 251) as u8).collect();
        let cbs = held.content().cipher_bs();
        for (a, b) in [(&local, &held), (&held, &local)] {
            let ct = a.content().encrypt_blocks(3, &id, &plain).unwrap();
            assert_eq!(ct.len(), plain.len() + 10 * (cbs - 4096));
            assert_eq!(b.content().decrypt_blocks(3, &id, &ct).unwrap(), plain);
            let x = a.content().encrypt_unbound(b"xattr value").unwrap();
            assert_eq!(b.content().decrypt_unbound(&x).unwrap(), b"xattr value");
            let iv = DirIv([7u8; 16]);
            let long = vec![b'n'; 255];
            let n = a.names().encrypt_name(&long, &iv).unwrap();
            assert_eq!(b.names().decrypt_name(&n, &iv).unwrap(), long);
        }
        // Every block has its own nonce, drawn by the keep.
        let ct = held.content().encrypt_blocks(0, &id, &plain).unwrap();
        let nonces: std::collections::HashSet<&[u8]> =
            ct.chunks(cbs).map(|c| &c[..cbs - 4096 - 16]).collect();
        assert_eq!(nonces.len(), 10);
        // A flipped byte in block 7 (the third request) is named.
        let mut bad = ct.clone();
        bad[7 * cbs + 100] ^= 0x20;
        match held.content().decrypt_blocks(0, &id, &bad) {
            Err(OverlayError::Auth { block, .. }) => assert_eq!(block, Some(7)),
            other => panic!("tampered block 7 gave {other:?}"),
        }
        // Blocks moved to another position or file do not open.
        assert!(held.content().decrypt_blocks(1, &id, &ct).is_err());
        let other = FileHeader::random().unwrap().id;
        assert!(held.content().decrypt_blocks(0, &other, &ct).is_err());
    }
}

/// Ciphertext read straight into the keep's slot opens as the in-process
/// cipher opens it, in one request per piece; a run too large for a slot
/// is declined (the caller reads it as usual); a tampered block is named;
/// a read that comes up short (the file ended) opens what it read.
#[test]
fn ciphertext_read_into_the_slot_opens() {
    let (local, held, keep) = setup(InitOptions::default(), 64 << 10);
    let id = FileHeader::random().unwrap().id;
    let cbs = held.content().cipher_bs();
    let plain: Vec<u8> = (0..12 * 4096 - 5).map(|i| (i * 11 % 253) as u8).collect();
    let ct = local.content().encrypt_blocks(4, &id, &plain).unwrap();
    // Where block 4 lies in a cipher file: the slot's room for it is
    // placed to match (cryptkeep_overlay::copy_align).
    let coff = (HEADER_LEN + 4 * cbs) as u64;
    let reader = |src: Vec<u8>| {
        move |buf: &mut [u8], at: usize| -> Result<usize, OverlayError> {
            assert_eq!(
                buf.as_ptr() as usize % COPY_ALIGN,
                (coff as usize + at) % COPY_ALIGN,
                "read room placed for its file offset"
            );
            let n = buf.len().min(src.len().saturating_sub(at));
            buf[..n].copy_from_slice(&src[at..at + n]);
            Ok(n)
        }
    };
    let mut out = vec![0u8; 12 * 4096];
    let before = keep.requests.load(std::sync::atomic::Ordering::Relaxed);
    let r = held
        .content()
        .read_and_open(4, &id, ct.len(), coff, &reader(ct.clone()), &mut out)
        .expect("12 blocks fit a 64 KiB slot");
    assert_eq!(r.unwrap(), plain.len());
    assert_eq!(out[..plain.len()], plain[..]);
    assert_eq!(
        keep.requests.load(std::sync::atomic::Ordering::Relaxed),
        before + 1
    );
    // The in-process cipher has no slot: declined.
    assert!(local
        .content()
        .read_and_open(4, &id, ct.len(), coff, &reader(ct.clone()), &mut out)
        .is_none());
    // Larger than a slot: declined.
    let big: Vec<u8> = vec![7u8; 40 * 4096];
    let big_ct = local.content().encrypt_blocks(0, &id, &big).unwrap();
    let mut big_out = vec![0u8; big.len()];
    assert!(held
        .content()
        .read_and_open(
            0,
            &id,
            big_ct.len(),
            18,
            &reader(big_ct.clone()),
            &mut big_out
        )
        .is_none());
    // Tampered: the block is named.
    let mut bad = ct.clone();
    bad[9 * cbs + 50] ^= 1;
    match held
        .content()
        .read_and_open(4, &id, bad.len(), coff, &reader(bad), &mut out)
        .unwrap()
    {
        Err(OverlayError::Auth { block, .. }) => assert_eq!(block, Some(13)),
        other => panic!("tampered block 13 gave {other:?}"),
    }
    // Short: the file has 3 blocks where 12 were expected.
    let short = ct[..3 * cbs].to_vec();
    let r = held
        .content()
        .read_and_open(4, &id, ct.len(), coff, &reader(short), &mut out)
        .unwrap();
    assert_eq!(r.unwrap(), 3 * 4096);
    assert_eq!(out[..3 * 4096], plain[..3 * 4096]);
}

/// Blocks sealed in the keep's slot and written from there, after a
/// prefix: what the in-process cipher opens, one write per piece (two for
/// a run large enough to be split), each at its offset; a run too large
/// for a slot is declined.
#[test]
fn blocks_sealed_in_the_slot_are_written_from_it() {
    let (local, held, _) = setup(InitOptions::default(), 512 << 10);
    let id = FileHeader::random().unwrap().id;
    let cbs = held.content().cipher_bs();
    for nblocks in [1usize, 5, 70] {
        let plain: Vec<u8> = (0..nblocks * 4096 - 9)
            .map(|i| (i * 7 % 241) as u8)
            .collect();
        let prefix = b"HEADER-BYTES";
        let file = std::sync::Mutex::new(Vec::<u8>::new());
        let writes = std::sync::atomic::AtomicUsize::new(0);
        // Block 2 of a cipher file, less the prefix: the bytes are
        // written from where they match it (cryptkeep_overlay::copy_align).
        let file_off = (HEADER_LEN + 2 * cbs - prefix.len()) as u64;
        let write = |bytes: &[u8], at: usize| -> Result<(), OverlayError> {
            assert_eq!(
                bytes.as_ptr() as usize % COPY_ALIGN,
                (file_off as usize + at) % COPY_ALIGN,
                "bytes placed for their file offset"
            );
            let mut f = file.lock().unwrap();
            if f.len() < at + bytes.len() {
                f.resize(at + bytes.len(), 0);
            }
            f[at..at + bytes.len()].copy_from_slice(bytes);
            writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        };
        held.content()
            .seal_and_write(2, &id, prefix, &plain, file_off, true, &write)
            .expect("fits the slot")
            .unwrap();
        let f = file.into_inner().unwrap();
        assert_eq!(&f[..prefix.len()], prefix);
        assert_eq!(f.len(), prefix.len() + plain.len() + nblocks * (cbs - 4096));
        let back = local
            .content()
            .decrypt_blocks(2, &id, &f[prefix.len()..])
            .unwrap();
        assert_eq!(back, plain, "{nblocks} blocks");
        let n = writes.into_inner();
        assert_eq!(n, if nblocks >= 64 { 2 } else { 1 }, "{nblocks} blocks");
        // The in-process cipher seals into a buffer of the caller's.
        assert!(local
            .content()
            .seal_and_write(2, &id, prefix, &plain, file_off, true, &|_, _| Ok(()))
            .is_none());
    }
    // Not split when the caller says a crash between two writes could tear
    // something: one write of the whole run.
    let plain = vec![3u8; 70 * 4096];
    let writes = std::sync::atomic::AtomicUsize::new(0);
    held.content()
        .seal_and_write(0, &id, &[], &plain, 18, false, &|_, _| {
            writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        })
        .expect("70 blocks fit a 512 KiB slot")
        .unwrap();
    assert_eq!(writes.into_inner(), 1);
    // Larger than a slot: declined.
    let (_, small, _) = setup(InitOptions::default(), 64 << 10);
    let big = vec![1u8; 40 * 4096];
    assert!(small
        .content()
        .seal_and_write(0, &id, &[], &big, 18, true, &|_, _| Ok(()))
        .is_none());
}

#[test]
fn a_listings_names_go_to_the_keep_together() {
    let (local, held, keep) = setup(InitOptions::default(), 16 << 10);
    let iv = DirIv([3u8; 16]);
    let plains: Vec<Vec<u8>> = (0..300)
        .map(|i| format!("{i:03}-{}", "x".repeat(i % 180)).into_bytes())
        .collect();
    let mut ciphers: Vec<String> = plains
        .iter()
        .map(|p| local.names().encrypt_name(p, &iv).unwrap())
        .collect();
    // Not base64url; and one from another directory (wrong tweak).
    ciphers[10] = "not*base64".into();
    ciphers[20] = local
        .names()
        .encrypt_name(b"elsewhere", &DirIv([4u8; 16]))
        .unwrap();
    let refs: Vec<&str> = ciphers.iter().map(String::as_str).collect();
    let before = keep.requests.load(std::sync::atomic::Ordering::Relaxed);
    let got = held.names().decrypt_names(&refs, &iv);
    let requests = keep.requests.load(std::sync::atomic::Ordering::Relaxed) - before;
    // About 27 KB of names in 16 KiB slots: two requests, not 299.
    assert_eq!(requests, 2, "{requests} requests");
    assert_eq!(got.len(), 300);
    for (i, g) in got.iter().enumerate() {
        match i {
            10 | 20 => assert!(
                matches!(g, Err(OverlayError::BadName { .. })),
                "name {i}: {g:?}"
            ),
            _ => assert_eq!(g.as_ref().unwrap(), &plains[i], "name {i}"),
        }
    }
    // The same answers as one name at a time, here and in-process.
    for (i, c) in refs.iter().enumerate() {
        let one = held.names().decrypt_name(c, &iv);
        assert_eq!(one.is_ok(), got[i].is_ok(), "name {i}");
        assert_eq!(
            local.names().decrypt_names(&refs, &iv)[i].is_ok(),
            got[i].is_ok()
        );
    }
}

#[test]
fn several_directories_names_go_to_the_keep_together() {
    let (local, held, keep) = setup(InitOptions::default(), 8 << 10);
    // 40 directories of 1 to 12 names each, a few of them long.
    let dirs: Vec<(DirIv, Vec<Vec<u8>>)> = (0..40u8)
        .map(|d| {
            let names = (0..1 + usize::from(d) % 12)
                .map(|i| format!("d{d}-{i}-{}", "y".repeat((i * 37 + usize::from(d)) % 200)))
                .map(String::into_bytes)
                .collect();
            (DirIv([d; 16]), names)
        })
        .collect();
    let ciphers: Vec<Vec<String>> = dirs
        .iter()
        .map(|(iv, names)| {
            names
                .iter()
                .map(|p| local.names().encrypt_name(p, iv).unwrap())
                .collect()
        })
        .collect();
    let mut items: Vec<(&str, &DirIv)> = Vec::new();
    for ((iv, _), cs) in dirs.iter().zip(&ciphers) {
        items.extend(cs.iter().map(|c| (c.as_str(), iv)));
    }
    // One name under the wrong directory's IV fails alone. Decrypted under
    // another IV a name is noise, which passes the padding and name checks
    // about once in 290 keys: take the first of a few such names that the
    // in-process keys refuse.
    let wrong = (0..64u8)
        .map(|k| {
            local
                .names()
                .encrypt_name(format!("moved-{k}").as_bytes(), &DirIv([99; 16]))
                .unwrap()
        })
        .find(|c| local.names().decrypt_name(c, &dirs[0].0).is_err())
        .expect("64 names that all decrypt under another IV");
    items.insert(5, (&wrong, &dirs[0].0));
    let before = keep.requests.load(std::sync::atomic::Ordering::Relaxed);
    let got = held.names().decrypt_names_of(&items);
    let requests = keep.requests.load(std::sync::atomic::Ordering::Relaxed) - before;
    let bytes: usize = items.iter().map(|(c, _)| c.len() * 3 / 4 + 20).sum();
    assert!(
        (2..=bytes / (8 << 10) + 2).contains(&requests),
        "{requests} requests for about {bytes} bytes of names (several slots, each packed)"
    );
    let mut want: Vec<Option<&Vec<u8>>> =
        dirs.iter().flat_map(|(_, n)| n.iter().map(Some)).collect();
    want.insert(5, None);
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        match w {
            Some(w) => assert_eq!(g.as_ref().unwrap(), w, "name {i}"),
            None => assert!(g.is_err(), "name {i} under another IV: {g:?}"),
        }
    }
    // What the in-process keys say, name by name.
    let inline = local.names().decrypt_names_of(&items);
    for (i, (a, b)) in inline.iter().zip(&got).enumerate() {
        assert_eq!(a.as_ref().ok(), b.as_ref().ok(), "name {i}");
    }
}

/// An open request is answered in place, block by block: a hole in the
/// middle opens to zeros, the short last block to its length, and one
/// tampered block fails the request with nothing of the others left.
#[test]
fn an_open_request_is_answered_in_place_block_by_block() {
    let (local, _, keep) = setup(InitOptions::default(), 64 << 10);
    let h = &keep.handler;
    let id = FileHeader::random().unwrap().id;
    let cbs = local.content().cipher_bs();
    let plain: Vec<u8> = (0..5 * 4096 - 100).map(|i| (i % 199 + 1) as u8).collect();
    let mut ct = local.content().encrypt_blocks(9, &id, &plain).unwrap();
    ct[2 * cbs..3 * cbs].fill(0);
    let mut want = plain.clone();
    want[2 * 4096..3 * 4096].fill(0);
    let mut req = id.to_vec();
    req.push(1);
    req.resize(OVERLAY_HEADER_LEN, 0);
    req.extend_from_slice(&ct);
    let mut buf = vec![0u8; 64 << 10];
    buf[..req.len()].copy_from_slice(&req);
    assert_eq!(
        h.handle(OP_OVERLAY_OPEN, 9, &mut buf, req.len()),
        Ok(want.len())
    );
    assert_eq!(buf[..want.len()], want[..]);
    // Block 12 (the fourth) tampered: refused, and no plaintext stays.
    req[OVERLAY_HEADER_LEN + 3 * cbs + 40] ^= 4;
    buf[..req.len()].copy_from_slice(&req);
    assert_eq!(
        h.handle(OP_OVERLAY_OPEN, 9, &mut buf, req.len()),
        Err(STATUS_FAILED)
    );
    let room = local.content().open_room(ct.len());
    assert!(buf[..room].iter().all(|&b| b == 0), "plaintext left behind");
    // A hole at the last block number opens (no overflow past it).
    let hole_end = OVERLAY_HEADER_LEN + cbs;
    buf[..OVERLAY_HEADER_LEN].copy_from_slice(&req[..OVERLAY_HEADER_LEN]);
    buf[OVERLAY_HEADER_LEN..hole_end].fill(0);
    assert_eq!(
        h.handle(OP_OVERLAY_OPEN, u64::MAX, &mut buf, hole_end),
        Ok(4096)
    );
    // A last block shorter than its nonce and tag does not open.
    let cut = OVERLAY_HEADER_LEN + 4 * cbs + 10;
    req[OVERLAY_HEADER_LEN + 3 * cbs + 40] ^= 4;
    buf[..cut].copy_from_slice(&req[..cut]);
    assert_eq!(
        h.handle(OP_OVERLAY_OPEN, 9, &mut buf, cut),
        Err(STATUS_FAILED)
    );
}

/// A block sealed under another block number (its ciphertext intact, so
/// decrypting it gives its plaintext; only the associated data differs)
/// fails the open, and a peer reading the slot all along never sees that
/// plaintext, for every content cipher: the VAES AES-GCM (where the CPU
/// runs it) checks the tag before it decrypts into the slot, the others
/// open in the keep's own memory and copy only blocks that authenticated.
#[test]
fn a_failed_blocks_plaintext_never_reaches_the_slot() {
    let ciphers = [
        InitOptions::default(),
        InitOptions {
            xchacha: true,
            ..InitOptions::default()
        },
        InitOptions {
            aessiv: true,
            ..InitOptions::default()
        },
    ];
    for opts in ciphers {
        let (local, _, keep) = setup(opts, 64 << 10);
        let (h, c) = (&keep.handler, local.content());
        let id = FileHeader::random().unwrap().id;
        let plain: Vec<u8> = (0..6 * 4096).map(|i| (i % 251) as u8 ^ 0x33).collect();
        let block = |n: usize, as_n: u64| {
            c.encrypt_blocks(as_n, &id, &plain[n * 4096..(n + 1) * 4096])
                .unwrap()
        };
        let mut req = id.to_vec();
        req.push(1);
        req.resize(OVERLAY_HEADER_LEN, 0);
        for n in 0..6 {
            req.extend_from_slice(&block(n, if n == 3 { 99 } else { n as u64 }));
        }
        let mut map = cryptkeep_testkit::SharedMap::new(64 << 10);
        let peer = map.watch(3 * 4096, plain[3 * 4096..3 * 4096 + 16].to_vec());
        let (before, deadline) = (peer.reads(), Instant::now() + Duration::from_secs(60));
        let ran = |p: &cryptkeep_testkit::Watcher| p.reads() >= before + 1000;
        let mut round = 0;
        while round < 500 || (!ran(&peer) && Instant::now() < deadline) {
            round += 1;
            // SAFETY: the peer only reads; what it sees is the test.
            let buf = unsafe { map.mine() };
            buf[..req.len()].copy_from_slice(&req);
            assert_eq!(
                h.handle(OP_OVERLAY_OPEN, 0, buf, req.len()),
                Err(STATUS_FAILED),
                "{:?}",
                c.alg()
            );
        }
        assert!(ran(&peer), "the peer barely ran during the opens");
        assert_eq!(
            peer.seen(),
            0,
            "{:?}: a failed block's plaintext reached the slot",
            c.alg()
        );
    }
}

#[test]
fn tweak_switches_in_a_name_batch_are_checked() {
    let (_, _, keep) = setup(InitOptions::default(), 16 << 10);
    let h = &keep.handler;
    let (a, b) = (DirIv([1; 16]), DirIv([2; 16]));
    // Raw EME blocks, encrypted by the single-name operation.
    let raw = |plain: &[u8], iv: &DirIv| {
        let mut b1 = [&iv.0[..], plain].concat();
        let l = b1.len();
        assert_eq!(h.handle(OP_NAME_ENCRYPT, 0, &mut b1, l), Ok(plain.len()));
        b1.truncate(plain.len());
        b1
    };
    let (pa, pb) = ([7u8; 16], [8u8; 32]);
    let (na, nb) = (raw(&pa, &a), raw(&pb, &b));
    let rec = |n: &[u8]| [&(n.len() as u16).to_le_bytes()[..], n].concat();
    let switch = |iv: &DirIv| [&[0u8, 0][..], &iv.0[..]].concat();
    // a's name, a switch to b, b's name: both come out as their plaintext.
    let good = [&a.0[..], &rec(&na), &switch(&b), &rec(&nb)].concat();
    let mut buf = vec![0u8; 4096];
    buf[..good.len()].copy_from_slice(&good);
    assert_eq!(
        h.handle(OP_NAMES_DECRYPT, 0, &mut buf, good.len()),
        Ok(na.len() + nb.len())
    );
    assert_eq!(buf[..na.len()], pa);
    assert_eq!(buf[na.len()..na.len() + nb.len()], pb);
    for (bad, why) in [
        (
            [&a.0[..], &switch(&b), &rec(&nb)].concat(),
            "a switch before any name",
        ),
        (
            [&a.0[..], &rec(&na), &switch(&b)].concat(),
            "a switch at the end",
        ),
        (
            [&a.0[..], &rec(&na), &switch(&b), &switch(&a), &rec(&na)].concat(),
            "two switches in a row",
        ),
        (
            [&a.0[..], &rec(&na), &[0, 0, 7, 7, 7][..]].concat(),
            "a tweak cut short",
        ),
        ([&a.0[..], &rec(&na), &[0][..]].concat(), "half a length"),
    ] {
        buf[..bad.len()].copy_from_slice(&bad);
        for op in [OP_NAMES_ENCRYPT, OP_NAMES_DECRYPT] {
            assert_eq!(
                h.handle(op, 0, &mut buf, bad.len()),
                Err(STATUS_BAD_DESCRIPTOR),
                "{why}"
            );
        }
    }
}

#[test]
fn malformed_overlay_requests_are_refused() {
    let (_, _, keep) = setup(InitOptions::default(), 64 << 10);
    let h = &keep.handler;
    let mut buf = vec![0u8; 64 << 10];
    // Header only, no data.
    assert_eq!(
        h.handle(OP_OVERLAY_SEAL, 0, &mut buf, OVERLAY_HEADER_LEN),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    // A bound flag other than 0 or 1, and non-zero reserved bytes.
    buf[16] = 2;
    assert_eq!(
        h.handle(OP_OVERLAY_SEAL, 0, &mut buf, 100),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    buf[16] = 0;
    buf[20] = 1;
    assert_eq!(
        h.handle(OP_OVERLAY_OPEN, 0, &mut buf, 100),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    buf[20] = 0;
    // Input longer than the buffer; output that would not fit.
    assert_eq!(
        h.handle(OP_OVERLAY_SEAL, 0, &mut buf[..200], 300),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    // Two blocks seal into 64 bytes more than header and plaintext.
    assert_eq!(
        h.handle(OP_OVERLAY_SEAL, 0, &mut buf[..8224], 8224),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    assert_eq!(
        h.handle(OP_OVERLAY_SEAL, 0, &mut buf[..8256], 8224),
        Ok(8256)
    );
    // Garbage does not open.
    buf[..OVERLAY_HEADER_LEN].fill(0);
    buf[OVERLAY_HEADER_LEN..OVERLAY_HEADER_LEN + 200].fill(0xab);
    assert_eq!(
        h.handle(OP_OVERLAY_OPEN, 0, &mut buf, OVERLAY_HEADER_LEN + 200),
        Err(STATUS_FAILED)
    );
    // Names: whole blocks after the tweak, at most EME's 128 blocks.
    assert_eq!(
        h.handle(OP_NAME_ENCRYPT, 0, &mut buf, 16 + 15),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    assert_eq!(
        h.handle(OP_NAME_ENCRYPT, 0, &mut buf, 16),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    assert_eq!(
        h.handle(OP_NAME_DECRYPT, 0, &mut buf, 16 + 129 * 16),
        Err(STATUS_FAILED)
    );
    assert_eq!(h.handle(OP_NAME_ENCRYPT, 0, &mut buf, 16 + 32), Ok(32));
    // Name batches: tweak, then (u16 length, bytes) per name.
    let batch = |lens: &[u16], data_len: usize| {
        let mut b = vec![0u8; 16];
        for &l in lens {
            b.extend_from_slice(&l.to_le_bytes());
            b.extend(std::iter::repeat_n(0x5a, usize::from(l)));
        }
        b.truncate(b.len() - (lens.iter().map(|&l| usize::from(l)).sum::<usize>() - data_len));
        b
    };
    for (lens, data, want) in [
        (&[][..], 0, Err(STATUS_BAD_DESCRIPTOR)),        // no name
        (&[15][..], 15, Err(STATUS_BAD_DESCRIPTOR)),     // not whole blocks
        (&[0][..], 0, Err(STATUS_BAD_DESCRIPTOR)),       // empty name
        (&[2064][..], 2064, Err(STATUS_BAD_DESCRIPTOR)), // 129 blocks
        (&[32, 48][..], 70, Err(STATUS_BAD_DESCRIPTOR)), // second cut short
        (&[32, 48][..], 80, Ok(80)),
    ] {
        let b = batch(lens, data);
        buf[..b.len()].copy_from_slice(&b);
        for op in [OP_NAMES_ENCRYPT, OP_NAMES_DECRYPT] {
            buf[..b.len()].copy_from_slice(&b);
            assert_eq!(h.handle(op, 0, &mut buf, b.len()), want, "{lens:?} {data}");
        }
    }
    // A lone length byte after the tweak.
    assert_eq!(
        h.handle(OP_NAMES_DECRYPT, 0, &mut buf, 17),
        Err(STATUS_BAD_DESCRIPTOR)
    );
    // A runtime keep does not serve these operations.
    let plain = RuntimeHandler::new(Ops::new(SealKey::random()));
    assert_eq!(
        plain.handle(OP_NAME_ENCRYPT, 0, &mut buf, 48),
        Err(STATUS_UNSUPPORTED)
    );
}
