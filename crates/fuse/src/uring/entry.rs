//! One FUSE ring entry (`Documentation/filesystems/fuse-io-uring.rst`):
//! its header and payload buffers, the REGISTER and COMMIT_AND_FETCH
//! commands that hand it to the kernel, and the answer header.

use zerocopy::IntoBytes;

use super::abi::{out_header, IN_HEADER_LEN, OUT_HEADER_LEN, READ};
use super::ring::OP_URING_CMD;
use super::wire::{parse, EntInOut, InHeader, ReadIn, Sqe128, UringCmdReq};

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
/// of their queue (this type is only the buffers' addresses); an entry is
/// touched only by the thread whose ring holds its last command (the
/// kernel answers a command on the ring that sent it), or by the thread
/// it was handed to. Hence the buffers are reached only through the
/// `unsafe` accessors, whose callers uphold that rule.
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
    ///
    /// # Safety
    /// The caller owns the entry now (its CQE arrived on the caller's ring,
    /// or it was handed to the caller, and it has not been committed
    /// since), and no other view of its buffers is alive.
    pub(crate) unsafe fn header(&mut self) -> &mut [u8] {
        // SAFETY: HEADER_LEN bytes allocated in new(); the kernel does not
        // write them while the caller owns the entry (the contract above).
        unsafe { std::slice::from_raw_parts_mut(self.header, HEADER_LEN) }
    }

    /// The payload buffer.
    ///
    /// # Safety
    /// As [`Entry::header`].
    pub(crate) unsafe fn payload(&mut self) -> &mut [u8] {
        // SAFETY: as header(), payload_len bytes.
        unsafe { std::slice::from_raw_parts_mut(self.payload, self.payload_len) }
    }

    /// The request header, fixed arguments and entry info the kernel wrote.
    ///
    /// # Safety
    /// As [`Entry::header`].
    pub(crate) unsafe fn request(&mut self) -> Request {
        // SAFETY: the caller owns the entry (the contract above).
        let hdr = unsafe { self.header() };
        let mut op_in = [0u8; ENT_IN_OUT - OP_IN];
        op_in.copy_from_slice(&hdr[OP_IN..ENT_IN_OUT]);
        Request {
            // The header buffer always holds whole structs (HEADER_LEN).
            head: parse(&hdr[..IN_HEADER_LEN]).unwrap_or_default(),
            ent: parse(&hdr[ENT_IN_OUT..]).unwrap_or_default(),
            op_in,
        }
    }

    /// The request in the entry if it is a READ of at least `min` bytes:
    /// its unique id, commit id, file handle, offset and size (capped at
    /// the payload buffer).
    ///
    /// # Safety
    /// As [`Entry::header`].
    pub(crate) unsafe fn large_read(&mut self, min: usize) -> Option<ReadRequest> {
        let cap = self.payload_len;
        // SAFETY: the caller owns the entry (the contract above).
        let r = unsafe { self.request() };
        if r.head.opcode != READ {
            return None;
        }
        let op: ReadIn = parse(&r.op_in).ok()?;
        let size = (op.size as usize).min(cap);
        (size >= min).then_some(ReadRequest {
            unique: r.head.unique,
            commit_id: r.ent.commit_id,
            fh: op.fh,
            off: op.offset,
            size,
        })
    }

    /// Frees the header (the payload belongs to its `Payloads`).
    ///
    /// # Safety
    /// The kernel no longer holds the entry, and no copy of it is used
    /// again.
    pub(crate) unsafe fn free(self) {
        // SAFETY: each pointer came from Box::into_raw with these lengths
        // and is freed once (the contract above).
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.header,
                HEADER_LEN,
            )));
            drop(Box::from_raw(self.iov));
        }
    }
}

/// What the kernel wrote into an entry's header buffer.
pub(crate) struct Request {
    /// `struct fuse_in_header`.
    pub(crate) head: InHeader,
    /// `struct fuse_uring_ent_in_out`: commit id, payload size.
    pub(crate) ent: EntInOut,
    /// The opcode's fixed argument struct (the whole `op_in` area).
    pub(crate) op_in: [u8; ENT_IN_OUT - OP_IN],
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
/// `entry` (also its `user_data`): its iovecs point at the entry's
/// buffers, which the kernel then owns until the command completes.
pub(crate) fn cmd_sqe(
    dev: i32,
    cmd: u32,
    entry: usize,
    e: &Entry,
    commit_id: u64,
    qid: u16,
) -> Sqe128 {
    Sqe128 {
        opcode: OP_URING_CMD,
        fd: dev,
        off: u64::from(cmd),
        addr: e.iov as u64,
        len: 2,
        user_data: entry as u64,
        cmd: UringCmdReq {
            commit_id,
            qid,
            ..UringCmdReq::default()
        },
        ..Sqe128::default()
    }
}

/// Writes the answer's header (`fuse_out_header` and the payload size)
/// over entry header `hdr`.
pub(crate) fn write_out_header(hdr: &mut [u8], unique: u64, error: i32, out_len: usize) {
    hdr[..OUT_HEADER_LEN].copy_from_slice(out_header(unique, error, out_len).as_bytes());
    let ent = EntInOut {
        payload_sz: out_len as u32,
        ..EntInOut::default()
    };
    hdr[ENT_IN_OUT..ENT_IN_OUT + std::mem::size_of::<EntInOut>()].copy_from_slice(ent.as_bytes());
}
