//! The integration tests of cryptkeep-volume, one module per topic, in one
//! test binary.

mod authenticated;
mod bench_engine;
mod ciphertext;
mod common;
mod concurrency;
mod device;
mod extents;
mod limits;
mod roundtrip;
mod staging;
mod zeroes;
