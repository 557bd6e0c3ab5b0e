//! The integration tests of cryptkeep-keep, one module per topic, in one
//! test binary.

mod auth_volume;
mod ops;
mod overlay_keys;
mod rings;
mod sandbox;
