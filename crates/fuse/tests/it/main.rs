//! The integration tests of cryptkeep-fuse, one module per topic, in one
//! test binary.

mod bench_block;
mod common;
mod ext4_loop;
mod file_io;
mod lifecycle;
mod loop_zeroes;
