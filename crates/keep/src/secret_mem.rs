//! Secret memory for keys: `memfd_secret(2)` pages, which the kernel
//! removes from its direct map, so `/proc/PID/mem`, `process_vm_readv` and
//! ptrace cannot read them, even for root; never swapped, never in a core
//! dump. Where the kernel lacks it (or with `CRYPTKEEP_NO_MEMFD_SECRET=1`,
//! for tests), anonymous memory that is mlocked, excluded from core dumps
//! (`MADV_DONTDUMP`) and not inherited by children (`MADV_DONTFORK`).
//! Contents are wiped on drop.

use std::fmt;

use crate::Error;

/// Environment variable that forces the fallback (for tests).
pub const NO_MEMFD_SECRET_ENV: &str = "CRYPTKEEP_NO_MEMFD_SECRET";

/// Which kind of memory a [`SecretMem`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretKind {
    /// `memfd_secret(2)` pages.
    MemfdSecret,
    /// mlock + MADV_DONTDUMP + MADV_DONTFORK anonymous pages.
    LockedFallback,
}

/// A page-aligned secret buffer.
pub struct SecretMem {
    ptr: *mut u8,
    len: usize,
    map_len: usize,
    kind: SecretKind,
}

// SAFETY: SecretMem owns its mapping exclusively; &/&mut access follows
// Rust's rules through as_slice/as_mut_slice.
unsafe impl Send for SecretMem {}
// SAFETY: as above.
unsafe impl Sync for SecretMem {}

fn page() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn memfd_secret_map(len: usize) -> Result<*mut u8, Error> {
    // SAFETY: memfd_secret takes only flags.
    let fd = unsafe { libc::syscall(libc::SYS_memfd_secret, libc::O_CLOEXEC) } as i32;
    if fd < 0 {
        return Err(Error::last_os("memfd_secret"));
    }
    // SAFETY: sizing and mapping the descriptor just created, then closing it.
    unsafe {
        if libc::ftruncate(fd, len as libc::off_t) != 0 {
            let e = Error::last_os("ftruncate of secret memory");
            libc::close(fd);
            return Err(e);
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        let e = Error::last_os("mmap of secret memory");
        libc::close(fd);
        if p == libc::MAP_FAILED {
            return Err(e);
        }
        libc::madvise(p, len, libc::MADV_DONTFORK);
        Ok(p as *mut u8)
    }
}

fn fallback_map(len: usize) -> Result<*mut u8, Error> {
    // SAFETY: an anonymous private mapping; then advice and locking on it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(Error::last_os("mmap of locked memory"));
        }
        libc::madvise(p, len, libc::MADV_DONTDUMP);
        libc::madvise(p, len, libc::MADV_DONTFORK);
        if libc::mlock(p, len) != 0 {
            let e = Error::last_os("mlock");
            libc::munmap(p, len);
            return Err(e);
        }
        Ok(p as *mut u8)
    }
}

impl SecretMem {
    /// `len` zeroed bytes of secret memory (memfd_secret, else the fallback).
    pub fn new(len: usize) -> Result<SecretMem, Error> {
        let map_len = len.max(1).div_ceil(page()) * page();
        let forced = std::env::var_os(NO_MEMFD_SECRET_ENV).is_some_and(|v| v == "1");
        let (ptr, kind) = match (!forced).then(|| memfd_secret_map(map_len)) {
            Some(Ok(p)) => (p, SecretKind::MemfdSecret),
            _ => (fallback_map(map_len)?, SecretKind::LockedFallback),
        };
        Ok(SecretMem {
            ptr,
            len,
            map_len,
            kind,
        })
    }

    /// A secret holding a copy of `s`.
    pub fn from_slice(s: &[u8]) -> Result<SecretMem, Error> {
        let mut m = SecretMem::new(s.len())?;
        m.as_mut_slice().copy_from_slice(s);
        Ok(m)
    }

    /// Which kind of memory this is.
    pub fn kind(&self) -> SecretKind {
        self.kind
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length secret.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SecretMem {
    fn drop(&mut self) {
        // SAFETY: wiping and unmapping our own mapping.
        unsafe {
            for i in 0..self.map_len {
                std::ptr::write_volatile(self.ptr.add(i), 0);
            }
            libc::munmap(self.ptr as *mut libc::c_void, self.map_len);
        }
    }
}

impl fmt::Debug for SecretMem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretMem({} bytes, {:?})", self.len, self.kind)
    }
}
