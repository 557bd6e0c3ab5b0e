//! One module per verb; `common` holds the options and helpers they share.

pub mod bench_keep;
pub mod benchmark;
pub mod close;
pub mod common;
pub mod dump;
pub mod format;
pub mod fs;
pub mod header_backup;
pub mod header_restore;
pub mod integrity;
pub mod integrity_args;
pub mod integrity_open;
pub mod isluks;
pub mod kdf_opts;
pub mod keep_serve;
pub mod keep_start;
pub mod keyslot_add;
pub mod keyslot_change;
pub mod keyslot_kill;
pub mod keyslot_list;
pub mod keyslot_remove;
pub mod man;
pub mod open;
pub mod serve;
pub mod status;
