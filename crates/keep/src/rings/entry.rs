//! Ring entries as they sit in shared memory (see `arena.rs` for offsets).
//! Reads copy the fields out once with volatile loads, so a peer changing
//! an entry while we look at it can only give us other values, never make
//! us read the same field twice and see two.

/// A submission: one operation on one buffer of the data area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submission {
    /// Chosen by the submitter; echoed in the completion.
    pub tag: u64,
    /// Operation code (`crate::proto`).
    pub op: u32,
    /// Operation argument (first sector, session handle, count).
    pub arg: u64,
    /// Byte offset of the buffer in the data area.
    pub offset: u64,
    /// Input bytes at the start of the buffer.
    pub in_len: u32,
    /// Buffer length: the most the answer may use.
    pub cap: u32,
}

/// A completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The submission's tag.
    pub tag: u64,
    /// `crate::proto::STATUS_*`.
    pub status: u32,
    /// Answer bytes at the start of the buffer.
    pub out_len: u32,
}

/// # Safety
/// `p` must point at a live, 8-byte aligned submission entry.
pub(crate) unsafe fn read_sqe(p: *const u8) -> Submission {
    // SAFETY: per the caller; fields at their documented offsets.
    unsafe {
        Submission {
            tag: std::ptr::read_volatile(p as *const u64),
            op: std::ptr::read_volatile(p.add(8) as *const u32),
            arg: std::ptr::read_volatile(p.add(16) as *const u64),
            offset: std::ptr::read_volatile(p.add(24) as *const u64),
            in_len: std::ptr::read_volatile(p.add(32) as *const u32),
            cap: std::ptr::read_volatile(p.add(36) as *const u32),
        }
    }
}

/// # Safety
/// As [`read_sqe`], for writing.
pub(crate) unsafe fn write_sqe(p: *mut u8, s: &Submission) {
    // SAFETY: per the caller.
    unsafe {
        std::ptr::write_volatile(p as *mut u64, s.tag);
        std::ptr::write_volatile(p.add(8) as *mut u32, s.op);
        std::ptr::write_volatile(p.add(12) as *mut u32, 0);
        std::ptr::write_volatile(p.add(16) as *mut u64, s.arg);
        std::ptr::write_volatile(p.add(24) as *mut u64, s.offset);
        std::ptr::write_volatile(p.add(32) as *mut u32, s.in_len);
        std::ptr::write_volatile(p.add(36) as *mut u32, s.cap);
    }
}

/// # Safety
/// `p` must point at a live, 8-byte aligned completion entry.
pub(crate) unsafe fn read_cqe(p: *const u8) -> Completion {
    // SAFETY: per the caller.
    unsafe {
        Completion {
            tag: std::ptr::read_volatile(p as *const u64),
            status: std::ptr::read_volatile(p.add(8) as *const u32),
            out_len: std::ptr::read_volatile(p.add(12) as *const u32),
        }
    }
}

/// # Safety
/// As [`read_cqe`], for writing.
pub(crate) unsafe fn write_cqe(p: *mut u8, c: &Completion) {
    // SAFETY: per the caller.
    unsafe {
        std::ptr::write_volatile(p as *mut u64, c.tag);
        std::ptr::write_volatile(p.add(8) as *mut u32, c.status);
        std::ptr::write_volatile(p.add(12) as *mut u32, c.out_len);
    }
}
