//! The integration tests of cryptkeep-overlay, one module per topic, in one
//! test binary.

mod common;
mod config_file;
mod file_io;
mod fsck;
mod gocryptfs_interop;
mod passwd;
mod reverse;
mod streaming;
mod tamper;
