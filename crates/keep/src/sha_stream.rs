//! Streaming SHA-256 sessions inside the keep (FIPS 180-4, AWS-LC's
//! implementation): a buffer larger than one request is hashed as
//! begin / update... / finish, each session named by a handle. The number
//! of open sessions is bounded so a hostile peer cannot exhaust the keep's
//! memory.

use std::collections::HashMap;
use std::sync::Mutex;

use aws_lc_sys as sys;

/// Most sessions open at once.
pub const MAX_SESSIONS: usize = 64;

struct Ctx(sys::SHA256_CTX);

// SAFETY: SHA256_CTX is plain data (no pointers); it moves between threads
// under the session table's mutex.
unsafe impl Send for Ctx {}

/// The table of open sessions.
#[derive(Default)]
pub struct ShaSessions {
    inner: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next: u64,
    open: HashMap<u64, Box<Ctx>>,
}

impl ShaSessions {
    /// Opens a session; `None` when [`MAX_SESSIONS`] are open.
    pub fn begin(&self) -> Option<u64> {
        let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if t.open.len() >= MAX_SESSIONS {
            return None;
        }
        // SAFETY: SHA256_CTX is plain data; SHA256_Init initialises it.
        let mut ctx = Box::new(Ctx(unsafe { std::mem::zeroed() }));
        // SAFETY: ctx.0 is a valid, writable SHA256_CTX.
        unsafe { sys::SHA256_Init(&mut ctx.0) };
        t.next += 1;
        let h = t.next;
        t.open.insert(h, ctx);
        Some(h)
    }

    /// Hashes `data` into session `h`; false if there is no such session.
    pub fn update(&self, h: u64, data: &[u8]) -> bool {
        // Take the context out so hashing runs without the table lock.
        let ctx = {
            let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            t.open.remove(&h)
        };
        let Some(mut ctx) = ctx else { return false };
        // SAFETY: ctx.0 was initialised by SHA256_Init; data is a valid slice.
        unsafe { sys::SHA256_Update(&mut ctx.0, data.as_ptr().cast(), data.len()) };
        let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        t.open.insert(h, ctx);
        true
    }

    /// Ends session `h` and returns its digest.
    pub fn finish(&self, h: u64) -> Option<[u8; 32]> {
        let mut ctx = {
            let mut t = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            t.open.remove(&h)?
        };
        let mut out = [0u8; 32];
        // SAFETY: out has 32 bytes; ctx.0 was initialised by SHA256_Init.
        unsafe { sys::SHA256_Final(out.as_mut_ptr(), &mut ctx.0) };
        Some(out)
    }
}
