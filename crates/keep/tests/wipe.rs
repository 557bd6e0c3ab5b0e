//! What key work leaves outside secret memory is wiped: the stack wipe
//! reaches a copy left a mebibyte deep (further than any fixed-size wipe
//! would) and spares the caller's live frame; with the keep's allocator,
//! freed and outgrown ordinary heap blocks are zeroed. Each check first
//! shows that the copy is there without the wipe, so it can fail. Memory is
//! read back through `/proc/self/mem`, as an attacker would read the keep.

use std::os::unix::fs::FileExt;

use cryptkeep_keep::secret_heap::{self, SwitchAlloc};
use cryptkeep_keep::wipe;

// A binary of its own (not a module of tests/it): the keep's allocator is
// this process's global allocator, and the wipe checks read this process's
// memory, which other tests running beside them would change.
#[global_allocator]
static ALLOC: SwitchAlloc = SwitchAlloc;

/// How deep below the test's frame the stack copy is left.
const DEPTH: usize = 1 << 20;

fn random(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    cryptkeep_crypto::rand::fill_random(&mut v).unwrap();
    v
}

/// This process's memory as a file: reading it makes no Rust reference to
/// memory that is free or dead.
fn self_mem() -> std::fs::File {
    std::fs::File::open("/proc/self/mem").unwrap()
}

/// Fills `buf` from `addr` of this process. The buffer is allocated by
/// the caller beforehand, so it cannot be the very block being looked at.
fn peek(mem: &std::fs::File, addr: usize, buf: &mut [u8]) {
    mem.read_exact_at(buf, addr as u64).unwrap();
}

/// Whether any 16-byte run of `needle` is in `hay`.
fn holds(hay: &[u8], needle: &[u8]) -> bool {
    needle.windows(16).any(|w| hay.windows(16).any(|h| h == w))
}

/// Copies `secret` (on the heap) into a frame `DEPTH` bytes deep, then
/// returns: the copy stays in a dead frame.
#[inline(never)]
fn leave_copy_deep(secret: &[u8]) {
    let mut area = [0u8; DEPTH];
    area[..secret.len()].copy_from_slice(secret);
    std::hint::black_box(&mut area);
}

/// The calling thread's stack below the caller: from the start of the
/// mapping that holds it up to this frame.
#[inline(never)]
fn dead_stack() -> Vec<u8> {
    let here = std::hint::black_box(0u8);
    let sp = std::ptr::addr_of!(here) as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let start = maps
        .lines()
        .find_map(|l| {
            let (a, rest) = l.split_once('-')?;
            let b = rest.split_whitespace().next()?;
            let (a, b) = (
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            );
            (a <= sp && sp < b).then_some(a)
        })
        .expect("the mapping of this thread's stack");
    let mut b = vec![0u8; sp - start];
    peek(&self_mem(), start, &mut b);
    b
}

#[test]
fn the_stack_wipe_reaches_the_deepest_frame_and_spares_live_ones() {
    let t = std::thread::Builder::new()
        .stack_size(4 * DEPTH)
        .spawn(|| {
            let secret = random(32);
            let live_want = random(64);
            let mut live = [0u8; 64];
            live.copy_from_slice(&live_want);
            std::hint::black_box(&mut live);

            leave_copy_deep(&secret);
            assert!(
                holds(&dead_stack(), &secret),
                "control: the copy is in a dead frame before the wipe"
            );
            leave_copy_deep(&secret);
            wipe::wipe_stack();
            assert!(
                !holds(&dead_stack(), &secret),
                "the stack wipe left the copy {DEPTH} bytes deep"
            );
            assert_eq!(
                std::hint::black_box(&live)[..],
                live_want[..],
                "the wipe changed the caller's live frame"
            );
        })
        .unwrap();
    t.join().unwrap();
}

/// Frees a 256-byte block holding `secret` twice over and reads the block
/// back (the allocator may reuse its first bytes for its own links).
fn freed_block(secret: &[u8]) -> Vec<u8> {
    let (mem, mut back) = (self_mem(), vec![0u8; 4096]);
    let mut v = vec![0u8; 256];
    v[..secret.len()].copy_from_slice(secret);
    v[128..128 + secret.len()].copy_from_slice(secret);
    let addr = v.as_ptr() as usize;
    drop(std::hint::black_box(v));
    peek(&mem, addr, &mut back[..256]);
    back.truncate(256);
    back
}

#[test]
fn freed_and_outgrown_ordinary_blocks_are_wiped() {
    let secret = random(64);
    assert!(
        holds(&freed_block(&secret), &secret),
        "control: a freed block keeps its bytes without the wipe"
    );
    secret_heap::wipe_ordinary_frees();
    assert!(
        !holds(&freed_block(&secret), &secret),
        "a freed block kept its bytes"
    );
    // A vector that outgrows its block several times, as a passphrase
    // does while it is read: no old block keeps a copy.
    let (mem, mut back) = (self_mem(), vec![0u8; 4096]);
    let mut v: Vec<u8> = Vec::with_capacity(16);
    let mut old = Vec::with_capacity(64);
    for chunk in secret.chunks(16).cycle().take(40) {
        if v.len() + chunk.len() > v.capacity() {
            old.push((v.as_ptr() as usize, v.capacity()));
        }
        v.extend_from_slice(chunk);
    }
    assert!(old.len() >= 3, "the vector grew {} times", old.len());
    for (addr, cap) in old.into_iter().filter(|&(_, cap)| cap >= 32) {
        if addr != v.as_ptr() as usize {
            peek(&mem, addr, &mut back[..cap]);
            assert!(
                !holds(&back[..cap], &secret),
                "an outgrown block at {addr:#x} kept its bytes"
            );
        }
    }
    std::hint::black_box(&v);
}
