//! The keep's secret heap: once [`activate`]d, every heap allocation of
//! the process — Rust's (through [`SwitchAlloc`], the binary's global
//! allocator) and AWS-LC's (through `CRYPTO_set_mem_functions`) — comes
//! from one `memfd_secret(2)` region. Key schedules, cipher contexts, RSA
//! keys and every temporary built from them are then outside the kernel's
//! direct map and unreadable through `/proc/PID/mem`, `process_vm_readv`
//! and ptrace, even by root. Blocks are wiped when freed.
//!
//! Before activation (and in every process that never activates it, such as
//! the I/O daemon) allocations go to the system allocator, at the cost of
//! one atomic load per allocation. The keep also calls
//! [`wipe_ordinary_frees`] first thing, so that what it allocates there
//! before activation (the passphrase as it is read, the KDF's work areas,
//! parser buffers) is wiped when freed or moved, not left in the ordinary
//! heap for `/proc/PID/mem` to find.
//!
//! The allocator is deliberately simple: power-of-two size classes from 16
//! bytes with one free list each, carved from a bump pointer; memory is
//! never returned to the kernel. It serves a process that allocates little
//! after start-up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Size of the region reserved at activation (pages are only used when
/// touched).
pub const REGION_BYTES: usize = 256 << 20;
const MIN_CLASS: usize = 4; // 16 bytes
const CLASSES: usize = 29; // up to 2^28 = 256 MiB

static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Set by the first allocation through [`SwitchAlloc`]: whether it is the
/// global allocator (see [`installed`]).
static SEEN: AtomicBool = AtomicBool::new(false);
static WIPE_ORDINARY: AtomicBool = AtomicBool::new(false);
static BASE: AtomicUsize = AtomicUsize::new(0);
static END: AtomicUsize = AtomicUsize::new(0);
static HEAP: Mutex<Heap> = Mutex::new(Heap {
    bump: 0,
    free: [0; CLASSES],
});

struct Heap {
    bump: usize,
    free: [usize; CLASSES],
}

fn class_of(size: usize) -> Option<usize> {
    let size = size.max(1 << MIN_CLASS);
    let c = size.next_power_of_two().trailing_zeros() as usize;
    (c < CLASSES).then_some(c)
}

fn in_region(p: usize) -> bool {
    p >= BASE.load(Ordering::Relaxed) && p < END.load(Ordering::Relaxed)
}

fn secret_alloc(size: usize, align: usize) -> *mut u8 {
    let Some(c) = class_of(size.max(align)) else {
        return null_mut();
    };
    let block = 1usize << c;
    let mut h = HEAP.lock().unwrap_or_else(|p| p.into_inner());
    let head = h.free[c];
    if head != 0 {
        // SAFETY: free-list blocks are inside the region and hold the next
        // pointer in their first word (written by secret_free).
        h.free[c] = unsafe { *(head as *const usize) };
        // SAFETY: the block is ours now; clear the link word.
        unsafe { *(head as *mut usize) = 0 };
        return head as *mut u8;
    }
    // Blocks are aligned to their size (up to a page), so any alignment up
    // to the block size holds.
    let a = block.min(4096);
    let start = (h.bump + a - 1) & !(a - 1);
    let end = END.load(Ordering::Relaxed);
    if start.checked_add(block).is_none_or(|e| e > end) {
        return null_mut();
    }
    h.bump = start + block;
    start as *mut u8
}

/// Wipes and frees a block of `size` bytes (its class is derived again).
fn secret_free(p: *mut u8, size: usize, align: usize) {
    let Some(c) = class_of(size.max(align)) else {
        return;
    };
    // SAFETY: p is a live block of 2^c bytes from secret_alloc.
    unsafe { zeroize_block(p, 1 << c) };
    let mut h = HEAP.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: the block is at least 16 bytes; its first word becomes the link.
    unsafe { *(p as *mut usize) = h.free[c] };
    h.free[c] = p as usize;
}

/// # Safety
/// `p` must be valid for writes of `n` bytes.
unsafe fn zeroize_block(p: *mut u8, n: usize) {
    // SAFETY: within the block, per the caller. The block escapes to a free
    // list or to free() right after; a compiler may drop stores to memory
    // that is freed next, so the pointer is handed to black_box, which it
    // must assume reads the zeros, and the fence keeps them in order.
    unsafe { std::ptr::write_bytes(p, 0, n) };
    std::hint::black_box(p);
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// The global allocator of a program that runs keeps (the `cryptkeep`
/// binary, or any host of [`crate::server`]): the system allocator until
/// [`activate`], the secret region after it. Frees go wherever the block
/// came from. Install it with [`install_secret_heap!`](crate::install_secret_heap).
pub struct SwitchAlloc;

/// Installs [`SwitchAlloc`] as the program's global allocator: the one
/// line a program that runs a keep (`server::run_volume`, `run_overlay`,
/// `run_runtime`) adds at its top level.
///
/// Why the host must do it: Rust has one global allocator per program,
/// chosen when the program is linked; a library cannot choose it, and a
/// keep's key schedules, cipher contexts and every buffer derived from a
/// key are ordinary Rust allocations. With this allocator they land in
/// `memfd_secret` memory once the keep has unlocked, and what was freed
/// before (the passphrase, the KDF's work areas) is wiped. Until the keep
/// activates the secret heap, it is the system allocator plus one load per
/// allocation, so the rest of the program is not affected.
///
/// The servers check at start that it is installed and refuse to run
/// without it (unless [`crate::server::ServerConfig::rust_heap`] says
/// otherwise), with an error that names this macro.
///
/// ```
/// cryptkeep_keep::install_secret_heap!();
/// # fn main() { assert!(cryptkeep_keep::secret_heap::installed()); }
/// ```
#[macro_export]
macro_rules! install_secret_heap {
    () => {
        #[global_allocator]
        static CRYPTKEEP_SECRET_HEAP: $crate::secret_heap::SwitchAlloc =
            $crate::secret_heap::SwitchAlloc;
    };
}

/// Whether [`SwitchAlloc`] is this program's global allocator (it has
/// served an allocation; this function makes one to be sure).
pub fn installed() -> bool {
    drop(std::hint::black_box(Box::new(0u64)));
    SEEN.load(Ordering::Relaxed)
}

// SAFETY: both halves return blocks valid for the layout (the secret half
// aligns blocks to their power-of-two size); dealloc routes each pointer to
// the allocator that made it by address.
unsafe impl GlobalAlloc for SwitchAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Written once; every later allocation only reads a shared line.
        if !SEEN.load(Ordering::Relaxed) {
            SEEN.store(true, Ordering::Relaxed);
        }
        if ACTIVE.load(Ordering::Relaxed) {
            return secret_alloc(layout.size(), layout.align());
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if in_region(ptr as usize) {
            secret_free(ptr, layout.size(), layout.align());
        } else {
            if WIPE_ORDINARY.load(Ordering::Relaxed) {
                // SAFETY: the caller's block, valid for its layout's size.
                unsafe { zeroize_block(ptr, layout.size()) };
            }
            // SAFETY: the block came from System with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A block that may move is copied here and the old one freed (and
        // wiped) through dealloc, unless nothing is to be wiped.
        if !in_region(ptr as usize)
            && !ACTIVE.load(Ordering::Relaxed)
            && !WIPE_ORDINARY.load(Ordering::Relaxed)
        {
            // SAFETY: forwarded with the caller's arguments.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: a new layout of the same alignment; the caller guarantees
        // new_size is valid for it.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as GlobalAlloc::alloc.
        let q = unsafe { self.alloc(new_layout) };
        if !q.is_null() {
            // SAFETY: both blocks are valid for the smaller size; they differ.
            unsafe { std::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size)) };
            // SAFETY: ptr was allocated with layout.
            unsafe { self.dealloc(ptr, layout) };
        }
        q
    }
}

// AWS-LC's allocation hooks. They carry no size on free, so each block has
// a 16-byte prefix holding its size, like AWS-LC's own malloc wrapper.
const PREFIX: usize = 16;

extern "C" fn lc_malloc(
    size: usize,
    _file: *const libc::c_char,
    _line: libc::c_int,
) -> *mut libc::c_void {
    let Some(total) = size.checked_add(PREFIX) else {
        return null_mut();
    };
    let p = if ACTIVE.load(Ordering::Relaxed) {
        secret_alloc(total, 16)
    } else {
        // SAFETY: malloc with a non-zero size.
        unsafe { libc::malloc(total) as *mut u8 }
    };
    if p.is_null() {
        return null_mut();
    }
    // SAFETY: p has room for the prefix; malloc and secret_alloc align to 16.
    unsafe {
        *(p as *mut usize) = size;
        p.add(PREFIX) as *mut libc::c_void
    }
}

extern "C" fn lc_free(ptr: *mut libc::c_void, _file: *const libc::c_char, _line: libc::c_int) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: ptr came from lc_malloc, so the prefix precedes it.
    let (p, size) = unsafe {
        let p = (ptr as *mut u8).sub(PREFIX);
        (p, *(p as *const usize))
    };
    if in_region(p as usize) {
        secret_free(p, size + PREFIX, 16);
    } else {
        // SAFETY: p came from libc::malloc with size + PREFIX bytes.
        unsafe {
            zeroize_block(p, size + PREFIX);
            libc::free(p as *mut libc::c_void);
        }
    }
}

extern "C" fn lc_realloc(
    ptr: *mut libc::c_void,
    size: usize,
    file: *const libc::c_char,
    line: libc::c_int,
) -> *mut libc::c_void {
    let q = lc_malloc(size, file, line);
    if !ptr.is_null() && !q.is_null() {
        // SAFETY: ptr came from lc_malloc, so its size prefix is readable;
        // both blocks are valid for the smaller size.
        unsafe {
            let old = *((ptr as *const u8).sub(PREFIX) as *const usize);
            std::ptr::copy_nonoverlapping(ptr as *const u8, q as *mut u8, old.min(size));
        }
        lc_free(ptr, file, line);
    }
    q
}

/// Routes AWS-LC's allocations through this module. Must run before AWS-LC
/// allocates anything in this process (first thing in the keep's main);
/// returns false if AWS-LC refused (functions already set).
pub fn install_aws_lc_hooks() -> bool {
    // SAFETY: the three functions match AWS-LC's signatures and are
    // thread-safe; AWS-LC calls them for every OPENSSL_malloc/realloc/free.
    unsafe {
        aws_lc_sys::CRYPTO_set_mem_functions(Some(lc_malloc), Some(lc_realloc), Some(lc_free)) == 1
    }
}

/// Reserves the `memfd_secret` region and sends every later allocation
/// there. Blocks allocated before stay where they are (and are freed there).
/// Fails (and changes nothing) where the kernel has no `memfd_secret`.
pub fn activate() -> Result<(), crate::Error> {
    if ACTIVE.load(Ordering::Acquire) {
        return Ok(());
    }
    // SAFETY: memfd_secret(0) has no pointer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_secret, libc::O_CLOEXEC) } as i32;
    if fd < 0 {
        return Err(crate::Error::last_os("memfd_secret"));
    }
    // SAFETY: fd is the descriptor just created.
    let ok = unsafe { libc::ftruncate(fd, REGION_BYTES as libc::off_t) } == 0;
    let p = if ok {
        // SAFETY: mapping the whole (sized) memfd; the kernel picks the address.
        unsafe {
            libc::mmap(
                null_mut(),
                REGION_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        }
    } else {
        libc::MAP_FAILED
    };
    let err = crate::Error::last_os("mapping the secret heap");
    // SAFETY: closing our descriptor; the mapping keeps the memory.
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(err);
    }
    let base = p as usize;
    BASE.store(base, Ordering::Relaxed);
    END.store(base + REGION_BYTES, Ordering::Relaxed);
    HEAP.lock().unwrap_or_else(|p| p.into_inner()).bump = base;
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// From now on, blocks of the system allocator are wiped when freed, and
/// a reallocation copies into a new block and wipes the old one instead of
/// letting the system allocator move it unwiped (AWS-LC's blocks are wiped
/// on free anyway). For the keep, before it reads a passphrase: copies of
/// key material made before [`activate`] then never outlive their buffers.
pub fn wipe_ordinary_frees() {
    WIPE_ORDINARY.store(true, Ordering::Relaxed);
}

/// Whether [`activate`] has run in this process.
pub fn is_active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}
