//! Operation and status codes carried in ring descriptors.
//!
//! A descriptor names one operation on one buffer in the shared data area:
//! the keep reads `in_len` bytes there, writes at most the buffer's length
//! back in place, and answers with a status and the output length.

/// Round trip with no work (the secGear "null call").
pub const OP_NULL: u32 = 0;
/// Encrypt whole sectors in place; `arg` is the first data sector.
pub const OP_ENCRYPT_SECTORS: u32 = 1;
/// Decrypt whole sectors in place; `arg` is the first data sector.
pub const OP_DECRYPT_SECTORS: u32 = 2;
/// SHA-256 of the input; output is the 32-byte digest.
pub const OP_SHA256: u32 = 3;
/// Seal the input to the keep's sealing key (AES-256-GCM); see [`crate::ops`].
pub const OP_SEAL: u32 = 4;
/// Unseal a blob made by [`OP_SEAL`].
pub const OP_UNSEAL: u32 = 5;
/// AES-256-GCM encrypt with the keep's message key; output `nonce ‖ ct ‖ tag`.
pub const OP_GCM_ENCRYPT: u32 = 6;
/// AES-256-GCM decrypt of `nonce ‖ ct ‖ tag`.
pub const OP_GCM_DECRYPT: u32 = 7;
/// Generate the keep's RSA-2048 key pair; output the public key (DER).
pub const OP_RSA_GENERATE: u32 = 8;
/// RSA-OAEP(SHA-256) encrypt with the keep's public key.
pub const OP_RSA_ENCRYPT: u32 = 9;
/// RSA-OAEP(SHA-256) decrypt with the keep's private key.
pub const OP_RSA_DECRYPT: u32 = 10;
/// RSA-PSS(SHA-256) sign the input (a message) with the keep's private key.
pub const OP_RSA_SIGN: u32 = 11;

/// Open a streaming SHA-256 session; output an 8-byte little-endian handle.
pub const OP_SHA256_BEGIN: u32 = 12;
/// Hash the input into the session named by `arg`; no output.
pub const OP_SHA256_UPDATE: u32 = 13;
/// End the session named by `arg`; output the 32-byte digest.
pub const OP_SHA256_FINISH: u32 = 14;
/// Run another operation `arg` times inside the keep and report the time
/// it took there (the secGear measure: computation without the crossing).
/// Input: the inner op code (u32 LE) then its input; output: elapsed
/// nanoseconds (u64 LE) and repetitions done (u64 LE; fewer than asked only
/// when the keep's time budget ran out). Each repetition starts from the
/// same input.
pub const OP_REPEAT: u32 = 15;

/// Length of the request header of [`OP_OVERLAY_SEAL`] and
/// [`OP_OVERLAY_OPEN`]: file ID (16 bytes), then 1 if the blocks are bound
/// to it (0 for unbound data), then 15 zero bytes.
pub const OVERLAY_HEADER_LEN: usize = 32;
/// Seal gocryptfs content blocks with the overlay's content key; `arg` is
/// the first block number. Input: the overlay header, then the plaintext
/// (4096-byte blocks, the last may be shorter). Output: the cipher blocks,
/// each with a nonce the keep drew.
pub const OP_OVERLAY_SEAL: u32 = 16;
/// Open gocryptfs content blocks; `arg` is the first block number. Input:
/// the overlay header, then the cipher blocks. Output: the plaintext (a
/// full-size all-zero block is a hole and opens to 4096 zeros).
pub const OP_OVERLAY_OPEN: u32 = 17;
/// EME-encrypt a padded name with the overlay's name key. Input: the
/// 16-byte tweak (directory IV), then 16..=2048 bytes in whole blocks.
/// Output: the encrypted blocks.
pub const OP_NAME_ENCRYPT: u32 = 18;
/// EME-decrypt a name; input and output as [`OP_NAME_ENCRYPT`].
pub const OP_NAME_DECRYPT: u32 = 19;
/// EME-encrypt several names of one directory, or of several, in one
/// request. Input: the 16-byte tweak, then records: a name (its length,
/// `u16` little-endian, 16..=2048, whole blocks, then its bytes), or a
/// tweak switch (length 0, then the 16-byte tweak of the names after it;
/// a name must follow it). Output: the encrypted names, concatenated in
/// order (the caller knows their lengths).
pub const OP_NAMES_ENCRYPT: u32 = 20;
/// EME-decrypt several names; input and output as [`OP_NAMES_ENCRYPT`].
pub const OP_NAMES_DECRYPT: u32 = 21;

/// Seal whole sectors of an authenticated volume (LUKS2 `--integrity`,
/// dm-crypt's per-sector AEAD over dm-integrity) in place; `arg` is the
/// first sector, in sector-size units from the start of the data segment.
///
/// Request layout (`in_len = n · (sector_size + tuple_size)`, `n ≥ 0`):
///
/// ```text
/// [ sector 0 .. sector n-1 : n · sector_size ][ tuple 0 .. tuple n-1 : n · tuple_size ]
/// ```
///
/// A tuple is the sector's metadata as dm-crypt stores it in dm-integrity's
/// per-sector tag: the authentication tag, then the stored IV (if the mode
/// has one). The input tuples are ignored; the keep encrypts the data in
/// place, writes the tuples (IVs drawn in the keep) and answers `in_len`
/// bytes. An `in_len` that is not a whole number of `(sector, tuple)`
/// pairs, or sectors past the end of the 64-bit sector space, is
/// [`STATUS_BAD_DESCRIPTOR`].
pub const OP_SEAL_SECTORS: u32 = 22;
/// Verify and decrypt whole sectors of an authenticated volume in place;
/// `arg` and the input as [`OP_SEAL_SECTORS`]. The keep also needs room
/// for the answer's failure bitmap: `cap ≥ in_len + ⌈n / 8⌉`
/// ([`open_reply_len`]), else [`STATUS_BAD_DESCRIPTOR`].
///
/// Reply layout (`out_len = in_len + ⌈n / 8⌉`):
///
/// ```text
/// [ plaintext sectors : n · sector_size ][ tuples, unchanged ][ bitmap : ⌈n / 8⌉ ]
/// ```
///
/// Bit `i % 8` of bitmap byte `i / 8` is set when sector `i` of the request
/// failed authentication; such a sector's bytes are zeros, never
/// unauthenticated plaintext. Unused bits of the last byte are zero. A tag
/// failure is an answer (status [`STATUS_OK`]), not an error:
/// [`STATUS_FAILED`] means the operation itself could not run.
pub const OP_OPEN_SECTORS: u32 = 23;
/// Answer the runtime keep's greeting ([`HELLO_GREETING`]): the secGear
/// helloworld's one call, which has the enclave write a fixed string into
/// the caller's buffer. The input is ignored; a buffer shorter than the
/// greeting is [`STATUS_FAILED`].
pub const OP_HELLO: u32 = 24;
/// What [`OP_HELLO`] answers.
pub const HELLO_GREETING: &[u8] = b"Hello from the keep";

/// Bytes of the [`OP_OPEN_SECTORS`] failure bitmap for `n` sectors.
pub fn open_bitmap_len(n: usize) -> usize {
    n.div_ceil(8)
}

/// Length of the [`OP_OPEN_SECTORS`] answer for `n` sectors of
/// `sector_size` bytes with `tuple_size`-byte tuples (data, tuples,
/// bitmap); `None` on overflow.
pub fn open_reply_len(n: usize, sector_size: usize, tuple_size: usize) -> Option<usize> {
    sector_size
        .checked_add(tuple_size)?
        .checked_mul(n)?
        .checked_add(open_bitmap_len(n))
}

/// What a volume keep answers ([`crate::server::run_volume`]): the null
/// call and sector crypto with the volume's key.
pub const VOLUME_OPS: &[u32] = &[OP_NULL, OP_ENCRYPT_SECTORS, OP_DECRYPT_SECTORS];
/// What a keep of an authenticated volume answers
/// ([`crate::server::run_volume`] with an
/// [`AuthVolumeKey`](crate::server::AuthVolumeKey)): the null call and
/// sector sealing and opening with the volume's key.
pub const AUTH_VOLUME_OPS: &[u32] = &[OP_NULL, OP_SEAL_SECTORS, OP_OPEN_SECTORS];
/// What an overlay keep answers ([`crate::server::run_overlay`]): the
/// null call, content blocks and names with the file system's keys.
pub const OVERLAY_OPS: &[u32] = &[
    OP_NULL,
    OP_OVERLAY_SEAL,
    OP_OVERLAY_OPEN,
    OP_NAME_ENCRYPT,
    OP_NAME_DECRYPT,
    OP_NAMES_ENCRYPT,
    OP_NAMES_DECRYPT,
];
/// What a runtime keep answers ([`crate::server::run_runtime`]): the
/// null call, SHA-256 (one-shot and streamed), seal/unseal, AES-256-GCM,
/// RSA-2048, the timed repeat of any of these and the greeting.
pub const RUNTIME_OPS: &[u32] = &[
    OP_NULL,
    OP_SHA256,
    OP_SEAL,
    OP_UNSEAL,
    OP_GCM_ENCRYPT,
    OP_GCM_DECRYPT,
    OP_RSA_GENERATE,
    OP_RSA_ENCRYPT,
    OP_RSA_DECRYPT,
    OP_RSA_SIGN,
    OP_SHA256_BEGIN,
    OP_SHA256_UPDATE,
    OP_SHA256_FINISH,
    OP_REPEAT,
    OP_HELLO,
];

/// Success.
pub const STATUS_OK: u32 = 0;
/// The descriptor was malformed (range, overlap, length); nothing was done.
pub const STATUS_BAD_DESCRIPTOR: u32 = 1;
/// The operation code is unknown or not one this kind of keep answers
/// ([`VOLUME_OPS`], [`AUTH_VOLUME_OPS`], [`OVERLAY_OPS`],
/// [`RUNTIME_OPS`]); nothing was done.
pub const STATUS_UNSUPPORTED: u32 = 2;
/// The operation ran and failed (bad tag, wrong length, crypto error).
pub const STATUS_FAILED: u32 = 3;
/// The keep is shutting down; the request was not done.
pub const STATUS_SHUTDOWN: u32 = 4;

/// A short name for an operation code, for messages.
pub fn op_name(op: u32) -> &'static str {
    match op {
        OP_NULL => "null call",
        OP_ENCRYPT_SECTORS => "sector encrypt",
        OP_DECRYPT_SECTORS => "sector decrypt",
        OP_SHA256 => "SHA-256",
        OP_SEAL => "seal",
        OP_UNSEAL => "unseal",
        OP_GCM_ENCRYPT => "AES-256-GCM encrypt",
        OP_GCM_DECRYPT => "AES-256-GCM decrypt",
        OP_RSA_GENERATE => "RSA-2048 key generation",
        OP_RSA_ENCRYPT => "RSA-2048 encrypt",
        OP_RSA_DECRYPT => "RSA-2048 decrypt",
        OP_RSA_SIGN => "RSA-2048 sign",
        OP_SHA256_BEGIN => "SHA-256 begin",
        OP_SHA256_UPDATE => "SHA-256 update",
        OP_SHA256_FINISH => "SHA-256 finish",
        OP_REPEAT => "timed repeat",
        OP_OVERLAY_SEAL => "overlay block seal",
        OP_OVERLAY_OPEN => "overlay block open",
        OP_NAME_ENCRYPT => "name encrypt",
        OP_NAME_DECRYPT => "name decrypt",
        OP_NAMES_ENCRYPT => "names encrypt",
        OP_NAMES_DECRYPT => "names decrypt",
        OP_SEAL_SECTORS => "authenticated sector seal",
        OP_OPEN_SECTORS => "authenticated sector open",
        OP_HELLO => "greeting",
        _ => "unknown operation",
    }
}

/// A short description of a status code, for messages.
pub fn status_text(status: u32) -> &'static str {
    match status {
        STATUS_OK => "ok",
        STATUS_BAD_DESCRIPTOR => "malformed descriptor",
        STATUS_UNSUPPORTED => "operation not supported by this keep",
        STATUS_FAILED => "operation failed",
        STATUS_SHUTDOWN => "the keep is shutting down",
        _ => "unknown status",
    }
}
