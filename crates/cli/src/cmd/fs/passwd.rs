//! `cryptkeep fs passwd CIPHERDIR` (gocryptfs `-passwd`): re-wraps the
//! master key with a new password; the old config is replaced atomically.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_overlay::config::change_password;
use cryptkeep_overlay::Config;

use super::common::{from_overlay, read_passfile, PassArgs, CONF_NAME, CONF_REVERSE_NAME};
use crate::exit::CliResult;

/// Options of `fs passwd`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The cipher directory (with --reverse: the plaintext directory).
    pub cipherdir: PathBuf,
    /// Change .gocryptfs.reverse.conf instead of gocryptfs.conf.
    #[arg(long)]
    pub reverse: bool,
    /// The old password: --passfile / --extpass (else asked).
    #[command(flatten)]
    pub pass: PassArgs,
    /// Read the new password from the first line of FILE (else asked twice).
    #[arg(long = "new-passfile", value_name = "FILE")]
    pub new_passfile: Option<PathBuf>,
    /// scrypt cost of the new wrapping as log2(N) (default: keep the current one).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(10..=28))]
    pub scryptn: Option<u8>,
}

/// Runs `fs passwd`.
pub fn run(a: Args) -> CliResult {
    let path = a.cipherdir.join(if a.reverse {
        CONF_REVERSE_NAME
    } else {
        CONF_NAME
    });
    let cfg = Config::load(&path).map_err(|e| from_overlay(e, &path))?;
    let log_n = a.scryptn.unwrap_or_else(|| cfg.scrypt().log_n());
    let old = a.pass.read("Old password: ", false)?;
    // Check the old password before asking for the new one.
    cfg.unlock(&old, &path)
        .map_err(|e| from_overlay(e, &path))?;
    let new = match &a.new_passfile {
        Some(p) => read_passfile(p)?,
        None => crate::passphrase::ask("New password: ", true)?,
    };
    change_password(&path, &old, &new, log_n).map_err(|e| from_overlay(e, &path))?;
    println!("Password changed ({}).", path.display());
    Ok(())
}
