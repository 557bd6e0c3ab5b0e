//! The integration tests of cryptkeep-cli, one module per topic, in one
//! test binary.

mod common;
mod hostile_headers;
mod interrupt;
mod keep_overlay;
mod keep_process;
mod keep_volume;
mod key_work;
mod run_dir;
mod same_volume;
mod support;
