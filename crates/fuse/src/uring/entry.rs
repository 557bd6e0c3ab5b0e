//! One FUSE ring entry (`Documentation/filesystems/fuse-io-uring.rst`):
//! its header and payload buffers, the REGISTER and COMMIT_AND_FETCH
//! commands that hand it to the kernel, and the answer header.

use super::abi::{Fields, InHeader, IN_HEADER_LEN, OUT_HEADER_LEN, READ};
use super::ring::{OP_URING_CMD, SQE_LEN};

/// `FUSE_IO_URING_CMD_REGISTER`.
pub(crate) const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
pub(crate) const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `sizeof(struct fuse_uring_req_header)`: in_out, op_in, ent_in_out.
const HEADER_LEN: usize = 128 + 128 + 32;
pub(crate) const OP_IN: usize = 128;
pub(crate) const ENT_IN_OUT: usize = 256;

/// One ring entry's buffers. They are written by the kernel while the
/// entry is registered, so they are raw allocations freed only when the
/// kernel has given the entry back (or never, if the thread fails).
///
/// The queue thread and its read helper each hold a copy of every entry
/// of their queue; an entry is touched only by the thread whose ring
/// holds its last command (the kernel answers a command on the ring that
/// sent it), or by the thread it was handed to.
#[derive(Clone, Copy)]
pub(crate) struct Entry {
    header: *mut u8,
    payload: *mut u8,
    pub(crate) payload_len: usize,
    iov: *mut [libc::iovec; 2],
}

// SAFETY: the pointers are heap allocations that live until `free`; which
// thread may touch them is the ownership rule above.
unsafe impl Send for Entry {}

impl Entry {
    /// An entry whose payload is the `payload_len` bytes at `payload` (a
    /// buffer of [`super::payloads::Payloads`], which outlives the entry);
    /// allocates its header.
    pub(crate) fn new(payload: *mut u8, payload_len: usize) -> Entry {
        let header = Box::into_raw(vec![0u8; HEADER_LEN].into_boxed_slice()) as *mut u8;
        let iov = Box::into_raw(Box::new([
            libc::iovec {
                iov_base: header as *mut libc::c_void,
                iov_len: HEADER_LEN,
            },
            libc::iovec {
                iov_base: payload as *mut libc::c_void,
                iov_len: payload_len,
            },
        ]));
        Entry {
            header,
            payload,
            payload_len,
            iov,
        }
    }

    /// The header buffer (`struct fuse_uring_req_header`).
    pub(crate) fn header(&mut self) -> &mut [u8] {
        // SAFETY: HEADER_LEN bytes allocated in new(); the kernel does not
        // write them while we hold the entry (between CQE and commit), and
        // only the entry's owner calls this.
        unsafe { std::slice::from_raw_parts_mut(self.header, HEADER_LEN) }
    }

    /// The payload buffer.
    pub(crate) fn payload(&mut self) -> &mut [u8] {
        // SAFETY: as header(), payload_len bytes.
        unsafe { std::slice::from_raw_parts_mut(self.payload, self.payload_len) }
    }

    /// The request in the entry if it is a READ of at least `min` bytes:
    /// its unique id, commit id, file handle, offset and size (capped at
    /// the payload buffer).
    pub(crate) fn large_read(&mut self, min: usize) -> Option<ReadRequest> {
        let cap = self.payload_len;
        let hdr = self.header();
        let h = InHeader::parse(&hdr[..IN_HEADER_LEN]);
        if h.opcode != READ {
            return None;
        }
        let op = Fields(&hdr[OP_IN..ENT_IN_OUT]);
        let size = (op.u32(16) as usize).min(cap);
        (size >= min).then(|| ReadRequest {
            unique: h.unique,
            commit_id: Fields(&hdr[ENT_IN_OUT..]).u64(8),
            fh: op.u64(0),
            off: op.u64(8),
            size,
        })
    }

    /// Frees the header (the payload belongs to its `Payloads`); only
    /// once the kernel no longer holds the entry and no copy of it is used
    /// again.
    pub(crate) fn free(self) {
        // SAFETY: each pointer came from Box::into_raw with these lengths
        // and is freed once.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.header,
                HEADER_LEN,
            )));
            drop(Box::from_raw(self.iov));
        }
    }
}

/// A READ request as it sits in an entry.
pub(crate) struct ReadRequest {
    pub(crate) unique: u64,
    pub(crate) commit_id: u64,
    pub(crate) fh: u64,
    pub(crate) off: u64,
    pub(crate) size: usize,
}

/// The SQE of a FUSE ring command on `/dev/fuse` for entry number
/// `entry` (also its `user_data`).
pub(crate) fn cmd_sqe(
    dev: i32,
    cmd: u32,
    entry: usize,
    e: &Entry,
    commit_id: u64,
    qid: u16,
) -> [u8; SQE_LEN] {
    let mut s = [0u8; SQE_LEN];
    s[0] = OP_URING_CMD;
    s[4..8].copy_from_slice(&dev.to_le_bytes());
    s[8..12].copy_from_slice(&cmd.to_le_bytes());
    s[16..24].copy_from_slice(&(e.iov as u64).to_le_bytes());
    s[24..28].copy_from_slice(&2u32.to_le_bytes());
    s[32..40].copy_from_slice(&(entry as u64).to_le_bytes());
    // struct fuse_uring_cmd_req in the command area: flags, commit_id, qid.
    s[56..64].copy_from_slice(&commit_id.to_le_bytes());
    s[64..66].copy_from_slice(&qid.to_le_bytes());
    s
}

/// Writes the answer's header (`fuse_out_header` and the payload size)
/// over entry header `hdr`.
pub(crate) fn write_out_header(hdr: &mut [u8], unique: u64, error: i32, out_len: usize) {
    hdr[..OUT_HEADER_LEN].fill(0);
    hdr[0..4].copy_from_slice(&((OUT_HEADER_LEN + out_len) as u32).to_le_bytes());
    hdr[4..8].copy_from_slice(&error.to_le_bytes());
    hdr[8..16].copy_from_slice(&unique.to_le_bytes());
    hdr[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(out_len as u32).to_le_bytes());
}
