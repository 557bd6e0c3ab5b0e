//! The Network Block Device protocol (NBD's `doc/proto.md`), for cryptkeep:
//! the wire constants shared by the server that exports a volume and the
//! client that keeps a volume's ciphertext on an NBD server.

#![forbid(unsafe_code)]

pub mod proto;
