//! Wire constants of the NBD protocol, as NBD's `doc/proto.md` defines them.
//! Every value here is fixed by the protocol: changing one breaks every
//! peer. All integers travel big-endian.

/// `NBDMAGIC`: the first eight bytes a server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the newstyle magic, sent by the server after `NBDMAGIC` and
/// by the client before every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// The magic that starts every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// The magic that starts every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// The magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// The magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flags the server sends (16 bits).
pub mod handshake {
    /// The server speaks fixed newstyle.
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    /// The server omits the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Flags the client answers to the handshake (32 bits).
pub mod client_flags {
    /// The client speaks fixed newstyle.
    pub const FIXED_NEWSTYLE: u32 = 1 << 0;
    /// The client wants no zero padding after `NBD_OPT_EXPORT_NAME`.
    pub const NO_ZEROES: u32 = 1 << 1;
}

/// Option numbers (`NBD_OPT_*`).
pub mod opt {
    /// Choose an export by name and enter transmission (old style reply).
    pub const EXPORT_NAME: u32 = 1;
    /// End the negotiation.
    pub const ABORT: u32 = 2;
    /// List the exports.
    pub const LIST: u32 = 3;
    /// Upgrade the connection to TLS.
    pub const STARTTLS: u32 = 5;
    /// Ask about an export without choosing it.
    pub const INFO: u32 = 6;
    /// Choose an export and enter transmission.
    pub const GO: u32 = 7;
    /// Use structured replies.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// List metadata contexts.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Choose metadata contexts for `NBD_CMD_BLOCK_STATUS`.
    pub const SET_META_CONTEXT: u32 = 10;
    /// Use 64-bit extended headers.
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (`NBD_REP_*`).
pub mod rep {
    /// The option is done.
    pub const ACK: u32 = 1;
    /// One export of a list.
    pub const SERVER: u32 = 2;
    /// One piece of information about an export.
    pub const INFO: u32 = 3;
    /// One metadata context.
    pub const META_CONTEXT: u32 = 4;
    /// Bit that marks an error reply.
    pub const FLAG_ERROR: u32 = 1 << 31;
    /// The option is not known to the server.
    pub const ERR_UNSUP: u32 = FLAG_ERROR | 1;
    /// The server forbids the option.
    pub const ERR_POLICY: u32 = FLAG_ERROR | 2;
    /// The option is malformed.
    pub const ERR_INVALID: u32 = FLAG_ERROR | 3;
    /// The platform cannot do it.
    pub const ERR_PLATFORM: u32 = FLAG_ERROR | 4;
    /// TLS must come first.
    pub const ERR_TLS_REQD: u32 = FLAG_ERROR | 5;
    /// The export does not exist.
    pub const ERR_UNKNOWN: u32 = FLAG_ERROR | 6;
    /// The server is shutting down.
    pub const ERR_SHUTDOWN: u32 = FLAG_ERROR | 7;
    /// The client must ask for block sizes first.
    pub const ERR_BLOCK_SIZE_REQD: u32 = FLAG_ERROR | 8;
    /// The option's payload is too large.
    pub const ERR_TOO_BIG: u32 = FLAG_ERROR | 9;
    /// Extended headers are required.
    pub const ERR_EXT_HEADER_REQD: u32 = FLAG_ERROR | 10;
}

/// Information types of `NBD_REP_INFO` / `NBD_OPT_INFO` (16 bits).
pub mod info {
    /// Size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// The export's canonical name.
    pub const NAME: u16 = 1;
    /// A human-readable description.
    pub const DESCRIPTION: u16 = 2;
    /// Minimum, preferred and maximum block sizes.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Transmission flags (16 bits) sent with the export's size.
pub mod tflag {
    /// Always set: the other flags are meaningful.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// The export is read-only.
    pub const READ_ONLY: u16 = 1 << 1;
    /// `NBD_CMD_FLUSH` is supported.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// `NBD_CMD_FLAG_FUA` is supported.
    pub const SEND_FUA: u16 = 1 << 3;
    /// The export behaves like a rotational medium.
    pub const ROTATIONAL: u16 = 1 << 4;
    /// `NBD_CMD_TRIM` is supported.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// `NBD_CMD_WRITE_ZEROES` is supported.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// `NBD_CMD_FLAG_DF` is supported.
    pub const SEND_DF: u16 = 1 << 7;
    /// Several connections to this export see one consistent store.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    /// `NBD_CMD_RESIZE` is supported.
    pub const SEND_RESIZE: u16 = 1 << 9;
    /// `NBD_CMD_CACHE` is supported.
    pub const SEND_CACHE: u16 = 1 << 10;
    /// `NBD_CMD_FLAG_FAST_ZERO` is supported.
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
    /// `NBD_CMD_BLOCK_STATUS` accepts a payload.
    pub const BLOCK_STAT_PAYLOAD: u16 = 1 << 12;
}

/// Command types (`NBD_CMD_*`, 16 bits).
pub mod cmd {
    /// Read.
    pub const READ: u16 = 0;
    /// Write.
    pub const WRITE: u16 = 1;
    /// Disconnect.
    pub const DISC: u16 = 2;
    /// Make completed writes durable.
    pub const FLUSH: u16 = 3;
    /// Discard.
    pub const TRIM: u16 = 4;
    /// Prefetch.
    pub const CACHE: u16 = 5;
    /// Write zeroes.
    pub const WRITE_ZEROES: u16 = 6;
    /// Query metadata (allocation).
    pub const BLOCK_STATUS: u16 = 7;
    /// Resize.
    pub const RESIZE: u16 = 8;
}

/// Command flags (16 bits).
pub mod cmd_flag {
    /// Force unit access: durable before the reply.
    pub const FUA: u16 = 1 << 0;
    /// `WRITE_ZEROES` must not punch holes.
    pub const NO_HOLE: u16 = 1 << 1;
    /// Don't fragment a structured read reply.
    pub const DF: u16 = 1 << 2;
    /// `BLOCK_STATUS`: one extent is enough.
    pub const REQ_ONE: u16 = 1 << 3;
    /// `WRITE_ZEROES`: fail fast rather than write slowly.
    pub const FAST_ZERO: u16 = 1 << 4;
    /// The request carries a payload length (extended headers).
    pub const PAYLOAD_LEN: u16 = 1 << 5;
}

/// Structured reply chunk flags and types.
pub mod reply {
    /// Flag: the last chunk of a reply.
    pub const FLAG_DONE: u16 = 1 << 0;
    /// No payload (only with `FLAG_DONE`).
    pub const NONE: u16 = 0;
    /// Data at an offset.
    pub const OFFSET_DATA: u16 = 1;
    /// A hole (reads as zeros) at an offset.
    pub const OFFSET_HOLE: u16 = 2;
    /// Block status extents (32-bit).
    pub const BLOCK_STATUS: u16 = 5;
    /// Block status extents (64-bit, extended headers).
    pub const BLOCK_STATUS_EXT: u16 = 6;
    /// Bit that marks an error chunk.
    pub const FLAG_ERROR: u16 = 1 << 15;
    /// An error for the whole request.
    pub const ERROR: u16 = FLAG_ERROR | 1;
    /// An error at an offset.
    pub const ERROR_OFFSET: u16 = FLAG_ERROR | 2;
}

/// Error values on the wire (Linux errno numbers the protocol fixes).
pub mod err {
    /// Operation not permitted (writes to a read-only export).
    pub const EPERM: u32 = 1;
    /// Input/output error.
    pub const EIO: u32 = 5;
    /// Out of memory.
    pub const ENOMEM: u32 = 12;
    /// Invalid argument.
    pub const EINVAL: u32 = 22;
    /// No space left.
    pub const ENOSPC: u32 = 28;
    /// Value too large (request beyond limits).
    pub const EOVERFLOW: u32 = 75;
    /// Not supported.
    pub const ENOTSUP: u32 = 95;
    /// The server is shutting down.
    pub const ESHUTDOWN: u32 = 108;
}

/// The `base:allocation` metadata context and its extent flags.
pub mod alloc {
    /// The context's name.
    pub const CONTEXT: &str = "base:allocation";
    /// The extent is not allocated.
    pub const STATE_HOLE: u32 = 1 << 0;
    /// The extent reads as zeros.
    pub const STATE_ZERO: u32 = 1 << 1;
}

/// The longest export name or description the protocol allows (bytes).
pub const MAX_STRING: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    /// The magics spell what the protocol says they spell; changing one
    /// breaks every peer.
    #[test]
    fn magics_are_the_protocols() {
        assert_eq!(&NBD_MAGIC.to_be_bytes(), b"NBDMAGIC");
        assert_eq!(&IHAVEOPT.to_be_bytes(), b"IHAVEOPT");
        assert_eq!(OPTION_REPLY_MAGIC, 0x3e889045565a9);
        assert_eq!(REQUEST_MAGIC.to_be_bytes(), [0x25, 0x60, 0x95, 0x13]);
        assert_eq!(SIMPLE_REPLY_MAGIC.to_be_bytes(), [0x67, 0x44, 0x66, 0x98]);
        assert_eq!(
            STRUCTURED_REPLY_MAGIC.to_be_bytes(),
            [0x66, 0x8e, 0x33, 0xef]
        );
        assert_eq!(rep::ERR_UNKNOWN, 0x8000_0006);
        assert_eq!(reply::ERROR, 32769);
    }
}
