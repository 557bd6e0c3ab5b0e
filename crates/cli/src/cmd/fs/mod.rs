//! `cryptkeep fs`: gocryptfs-compatible encrypted overlay directories
//! (`cryptkeep_overlay` format, `cryptkeep_overlayfs` file system), with
//! gocryptfs's verbs and option names: init, mount, umount, passwd, info,
//! fsck.

pub mod common;
pub mod fsck;
pub mod info;
pub mod init;
pub mod mount;
pub mod passwd;
pub mod umount;

use clap::Subcommand;

use crate::exit::CliResult;

/// The `fs` verbs.
#[derive(Subcommand, Debug)]
pub enum FsCmd {
    /// Create a gocryptfs-format file system in an empty CIPHERDIR (gocryptfs -init).
    Init(init::Args),
    /// Mount CIPHERDIR's plaintext view on MOUNTPOINT (in the background unless --foreground).
    Mount(mount::Args),
    /// Unmount MOUNTPOINT and wait for its daemon to exit.
    Umount(umount::Args),
    /// Change the password of CIPHERDIR (gocryptfs -passwd).
    Passwd(passwd::Args),
    /// Show CIPHERDIR's config: flags, scrypt parameters, version (gocryptfs -info).
    Info(info::Args),
    /// Check every name, header and block of CIPHERDIR; changes nothing (gocryptfs -fsck).
    Fsck(fsck::Args),
}

/// Runs one `fs` verb.
pub fn run(c: FsCmd) -> CliResult {
    match c {
        FsCmd::Init(a) => init::run(a),
        FsCmd::Mount(a) => mount::run(a),
        FsCmd::Umount(a) => umount::run(a),
        FsCmd::Passwd(a) => passwd::run(a),
        FsCmd::Info(a) => info::run(a),
        FsCmd::Fsck(a) => fsck::run(a),
    }
}
