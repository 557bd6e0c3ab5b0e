//! The FUSE wire structures the io_uring queues read and write, as
//! `#[repr(C)]` types laid out as `include/uapi/linux/fuse.h` (protocol
//! 7.42+) declares them (x86-64 and other little-endian 64-bit targets:
//! native byte order, no implicit padding). Each size is pinned by a
//! compile-time assertion; a request too short for its struct is EINVAL,
//! never read as zeros.

use fuser::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Reads a `T` from the start of `b`: EINVAL when `b` is shorter.
pub(crate) fn parse<T: FromBytes + KnownLayout + Immutable>(b: &[u8]) -> Result<T, Errno> {
    T::read_from_prefix(b)
        .map(|(t, _)| t)
        .map_err(|_| Errno::EINVAL)
}

macro_rules! wire {
    ($(#[$m:meta])* $name:ident ($size:expr) { $($(#[$fm:meta])* $f:ident: $t:ty,)* }) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable)]
        pub(crate) struct $name { $($(#[$fm])* pub(crate) $f: $t,)* }
        const _: () = assert!(std::mem::size_of::<$name>() == $size);
        impl Default for $name {
            fn default() -> Self {
                <Self as zerocopy::FromZeros>::new_zeroed()
            }
        }
    };
}

wire!(
    /// `struct fuse_in_header`.
    InHeader(40) {
        len: u32,
        opcode: u32,
        unique: u64,
        nodeid: u64,
        uid: u32,
        gid: u32,
        pid: u32,
        total_extlen: u16,
        padding: u16,
    }
);

wire!(
    /// `struct fuse_out_header`.
    OutHeader(16) {
        len: u32,
        error: i32,
        unique: u64,
    }
);

wire!(
    /// `struct fuse_uring_ent_in_out`: the entry's commit id and payload size.
    EntInOut(32) {
        flags: u64,
        commit_id: u64,
        payload_sz: u32,
        padding: u32,
        reserved: u64,
    }
);

wire!(
    /// `struct fuse_setattr_in`.
    SetattrIn(88) {
        valid: u32,
        padding: u32,
        fh: u64,
        size: u64,
        lock_owner: u64,
        atime: u64,
        mtime: u64,
        ctime: u64,
        atimensec: u32,
        mtimensec: u32,
        ctimensec: u32,
        mode: u32,
        unused4: u32,
        uid: u32,
        gid: u32,
        unused5: u32,
    }
);

wire!(
    /// `struct fuse_mknod_in`.
    MknodIn(16) {
        mode: u32,
        rdev: u32,
        umask: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_mkdir_in`.
    MkdirIn(8) {
        mode: u32,
        umask: u32,
    }
);

wire!(
    /// `struct fuse_rename2_in` (a RENAME's `fuse_rename_in` is its first
    /// 8 bytes).
    Rename2In(16) {
        newdir: u64,
        flags: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_rename_in`.
    RenameIn(8) {
        newdir: u64,
    }
);

wire!(
    /// `struct fuse_link_in`.
    LinkIn(8) {
        oldnodeid: u64,
    }
);

wire!(
    /// `struct fuse_open_in`.
    OpenIn(8) {
        flags: u32,
        open_flags: u32,
    }
);

wire!(
    /// `struct fuse_read_in` (READ, READDIR, READDIRPLUS).
    ReadIn(40) {
        fh: u64,
        offset: u64,
        size: u32,
        read_flags: u32,
        lock_owner: u64,
        flags: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_write_in`.
    WriteIn(40) {
        fh: u64,
        offset: u64,
        size: u32,
        write_flags: u32,
        lock_owner: u64,
        flags: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_release_in`.
    ReleaseIn(24) {
        fh: u64,
        flags: u32,
        release_flags: u32,
        lock_owner: u64,
    }
);

wire!(
    /// `struct fuse_fsync_in`.
    FsyncIn(16) {
        fh: u64,
        fsync_flags: u32,
        padding: u32,
    }
);

wire!(
    /// The first 8 bytes of `struct fuse_setxattr_in`
    /// (`FUSE_COMPAT_SETXATTR_IN_SIZE`: what is sent without
    /// `FUSE_SETXATTR_EXT`).
    SetxattrIn(8) {
        size: u32,
        flags: u32,
    }
);

wire!(
    /// `struct fuse_getxattr_in` (GETXATTR, LISTXATTR).
    GetxattrIn(8) {
        size: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_flush_in`.
    FlushIn(24) {
        fh: u64,
        unused: u32,
        padding: u32,
        lock_owner: u64,
    }
);

wire!(
    /// `struct fuse_access_in`.
    AccessIn(8) {
        mask: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_create_in`.
    CreateIn(16) {
        flags: u32,
        mode: u32,
        umask: u32,
        open_flags: u32,
    }
);

wire!(
    /// `struct fuse_fallocate_in`.
    FallocateIn(32) {
        fh: u64,
        offset: u64,
        length: u64,
        mode: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_attr`.
    Attr(88) {
        ino: u64,
        size: u64,
        blocks: u64,
        atime: u64,
        mtime: u64,
        ctime: u64,
        atimensec: u32,
        mtimensec: u32,
        ctimensec: u32,
        mode: u32,
        nlink: u32,
        uid: u32,
        gid: u32,
        rdev: u32,
        blksize: u32,
        flags: u32,
    }
);

wire!(
    /// `struct fuse_entry_out` without its `fuse_attr`, which follows.
    EntryOutHead(40) {
        nodeid: u64,
        generation: u64,
        entry_valid: u64,
        attr_valid: u64,
        entry_valid_nsec: u32,
        attr_valid_nsec: u32,
    }
);

wire!(
    /// `struct fuse_attr_out` without its `fuse_attr`, which follows.
    AttrOutHead(16) {
        attr_valid: u64,
        attr_valid_nsec: u32,
        dummy: u32,
    }
);

wire!(
    /// `struct fuse_open_out`.
    OpenOut(16) {
        fh: u64,
        open_flags: u32,
        backing_id: i32,
    }
);

wire!(
    /// `struct fuse_write_out`.
    WriteOut(8) {
        size: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_getxattr_out`.
    GetxattrOut(8) {
        size: u32,
        padding: u32,
    }
);

wire!(
    /// `struct fuse_statfs_out` (a `struct fuse_kstatfs`).
    StatfsOut(80) {
        blocks: u64,
        bfree: u64,
        bavail: u64,
        files: u64,
        ffree: u64,
        bsize: u32,
        namelen: u32,
        frsize: u32,
        padding: u32,
        spare: [u32; 6],
    }
);

wire!(
    /// `struct fuse_dirent` without its name, which follows (padded to 8).
    DirentHead(24) {
        ino: u64,
        off: u64,
        namelen: u32,
        kind: u32,
    }
);

wire!(
    /// `struct fuse_uring_cmd_req`: the command area of a FUSE ring SQE.
    UringCmdReq(24) {
        flags: u64,
        commit_id: u64,
        qid: u16,
        padding: [u8; 6],
    }
);

wire!(
    /// `struct io_uring_sqe` as 128 bytes (`IORING_SETUP_SQE128`) for
    /// `IORING_OP_URING_CMD`: the 80-byte command area starts at byte 48.
    /// Not the `io-uring` crate's `UringCmd80`/`Entry128`: FUSE's REGISTER
    /// and COMMIT_AND_FETCH pass the entry's iovecs in `addr` and `len`,
    /// which that builder has no setter for, and the ring here is our own
    /// (`ring.rs`), so the crate would add a dependency to build one struct.
    Sqe128(128) {
        opcode: u8,
        flags: u8,
        ioprio: u16,
        fd: i32,
        /// The file offset, or for `IORING_OP_URING_CMD` the command
        /// (`cmd_op`, the low 32 bits).
        off: u64,
        addr: u64,
        len: u32,
        op_flags: u32,
        user_data: u64,
        buf_index: u16,
        personality: u16,
        file_index: u32,
        cmd: UringCmdReq,
        cmd_rest: [u8; 56],
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_request_is_einval() {
        assert_eq!(parse::<ReadIn>(&[0u8; 39]).unwrap_err(), Errno::EINVAL);
        let mut b = [0u8; 40];
        b[16..20].copy_from_slice(&4096u32.to_ne_bytes());
        assert_eq!(parse::<ReadIn>(&b).unwrap().size, 4096);
    }

    /// A few fields against their offsets in fuse.h.
    #[test]
    fn fields_sit_at_the_kernel_offsets() {
        let s = SetattrIn {
            size: 1,
            atime: 2,
            mtime: 3,
            atimensec: 4,
            mtimensec: 5,
            mode: 6,
            uid: 7,
            gid: 8,
            ..SetattrIn::default()
        };
        let b = s.as_bytes();
        let at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(b[16], 1);
        assert_eq!(b[32], 2);
        assert_eq!(b[40], 3);
        assert_eq!((at(56), at(60), at(68), at(76), at(80)), (4, 5, 6, 7, 8));
        let h = InHeader {
            opcode: 9,
            unique: 10,
            nodeid: 11,
            uid: 12,
            gid: 13,
            ..InHeader::default()
        };
        let b = h.as_bytes();
        assert_eq!((b[4], b[8], b[16], b[24], b[28]), (9, 10, 11, 12, 13));
        // io_uring_sqe: fd at 4, cmd_op at 8, addr at 16, len at 24,
        // user_data at 32, the command (flags, commit_id, qid) at 48.
        let q = Sqe128 {
            fd: 1,
            off: 2,
            addr: 3,
            len: 4,
            user_data: 5,
            cmd: UringCmdReq {
                commit_id: 6,
                qid: 7,
                ..UringCmdReq::default()
            },
            ..Sqe128::default()
        };
        let b = q.as_bytes();
        assert_eq!(
            (b[4], b[8], b[16], b[24], b[32], b[56], b[64]),
            (1, 2, 3, 4, 5, 6, 7)
        );
    }
}
