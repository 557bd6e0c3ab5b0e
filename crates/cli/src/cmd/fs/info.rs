//! `cryptkeep fs info CIPHERDIR` (gocryptfs `-info`): the config's creator,
//! feature flags, scrypt parameters and format version. Needs no password.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_overlay::Config;

use super::common::{from_overlay, CONF_NAME, CONF_REVERSE_NAME};
use crate::exit::CliResult;

/// Options of `fs info`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The cipher directory (with --reverse: the plaintext directory).
    pub cipherdir: PathBuf,
    /// Read .gocryptfs.reverse.conf instead of gocryptfs.conf.
    #[arg(long)]
    pub reverse: bool,
    /// Use this config file instead.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Runs `fs info`.
pub fn run(a: Args) -> CliResult {
    let path = a.config.clone().unwrap_or_else(|| {
        a.cipherdir.join(if a.reverse {
            CONF_REVERSE_NAME
        } else {
            CONF_NAME
        })
    });
    // A config named with --config may be a symbolic link (as with
    // gocryptfs -config); the one inside the directory may not.
    let c = if a.config.is_some() {
        Config::load_named(&path)
    } else {
        Config::load(&path)
    }
    .map_err(|e| from_overlay(e, &path))?;
    let s = c.scrypt();
    let flags: Vec<&str> = c.flags().iter().map(|f| f.name()).collect();
    println!("Config:       {}", path.display());
    println!("Creator:      {}", c.creator());
    println!("FeatureFlags: {}", flags.join(" "));
    println!(
        "ScryptObject: Salt={}B N={} R={} P={} KeyLen={}",
        s.salt.len(),
        s.n,
        s.r,
        s.p,
        s.key_len
    );
    println!("Version:      2");
    println!("Contents:     {:?}", c.content_alg());
    println!("Names:        {:?}", c.name_mode());
    println!("LongNameMax:  {}", c.long_name_max());
    Ok(())
}
