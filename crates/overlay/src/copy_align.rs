//! Where to put a buffer that the kernel copies a file's bytes into or out
//! of (`pread`, `pwrite`), so the copy runs at full speed.
//!
//! The kernel copies between the page cache and user memory with
//! `rep movsb`. On AMD Zen that instruction runs four to nine times slower
//! when the destination lies 1 to 31 bytes past the source modulo 4096
//! (glibc's `memcpy` avoids it for that reason; the kernel does not).
//! Cipher files put that case in the hot path: AES-GCM blocks of 4096 + 32
//! bytes after an 18-byte header start 18 bytes into a page every 128
//! blocks, so a 1 MiB write from a page-aligned buffer hits it every time
//! (measured on an EPYC VM: 1.3–1.7 GiB/s at those distances instead of
//! 7–12 GiB/s for copies to and from a tmpfs file). A buffer whose address
//! matches the file offset modulo [`COPY_ALIGN`] never does.

/// The alignment at which buffer and file offset are made to agree.
pub const COPY_ALIGN: usize = 64;

/// The index into a buffer at address `buf_addr` where bytes for file
/// offset `file_off` should start: `buf_addr + index ≡ file_off` modulo
/// [`COPY_ALIGN`]; less than [`COPY_ALIGN`], so a buffer with that much
/// spare room always has it.
pub fn file_aligned_start(buf_addr: usize, file_off: u64) -> usize {
    (file_off as usize).wrapping_sub(buf_addr) % COPY_ALIGN
}

/// `len` bytes of `buf` (which has [`COPY_ALIGN`] bytes more than that)
/// placed for file offset `file_off`, as [`file_aligned_start`].
pub fn file_aligned(buf: &mut [u8], file_off: u64, len: usize) -> &mut [u8] {
    let s = file_aligned_start(buf.as_ptr() as usize, file_off);
    &mut buf[s..s + len]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_matches_the_file_offset() {
        let mut buf = vec![0u8; 4096 + COPY_ALIGN];
        for off in [0u64, 1, 18, 63, 64, 4114, 18 + 4128 * 127] {
            let s = file_aligned_start(buf.as_ptr() as usize, off);
            assert!(s < COPY_ALIGN);
            assert_eq!(
                (buf.as_ptr() as usize + s) % COPY_ALIGN,
                off as usize % COPY_ALIGN
            );
            let w = file_aligned(&mut buf, off, 4096);
            assert_eq!(w.len(), 4096);
            assert_eq!(w.as_ptr() as usize % COPY_ALIGN, off as usize % COPY_ALIGN);
        }
    }
}
