//! `cryptkeep fs fsck CIPHERDIR` (gocryptfs `-fsck`): decrypts every name,
//! header, block, symlink and xattr and reports each failure; changes
//! nothing. Exit 6 when damage is found.

use std::path::{Path, PathBuf};

use clap::Args as ClapArgs;
use cryptkeep_overlay::{CipherDir, MasterKey};

use super::common::{from_overlay, need_dir, PassArgs};
use crate::exit::{CliError, CliResult, Code};

/// Options of `fs fsck`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The cipher directory.
    pub cipherdir: PathBuf,
    /// Open with the master key (hex, dashes allowed) instead of a password.
    #[arg(long, value_name = "HEX", conflicts_with_all = ["passfile", "extpass"])]
    pub masterkey: Option<String>,
    #[command(flatten)]
    pub pass: PassArgs,
}

/// Runs `fs fsck`.
pub fn run(a: Args) -> CliResult {
    need_dir(&a.cipherdir, "cipher directory")?;
    let cd = match &a.masterkey {
        Some(hex) => {
            let mk = MasterKey::from_hex(hex).map_err(|e| from_overlay(e, &a.cipherdir))?;
            CipherDir::open_with_master_key(&a.cipherdir, &mk)
        }
        None => {
            let pw = a.pass.read("Password: ", false)?;
            CipherDir::open(&a.cipherdir, &pw)
        }
    }
    .map_err(|e| from_overlay(e, &a.cipherdir))?;
    let r = cd.fsck();
    for p in &r.problems {
        match plain_path(&cd, &p.path) {
            Some(plain) => eprintln!("fsck: {p} [plaintext path: {}]", plain.display()),
            None => eprintln!("fsck: {p}"),
        }
    }
    if r.is_clean() {
        println!(
            "fsck summary: no problems found ({} entries, {} blocks checked)",
            r.entries, r.blocks
        );
        return Ok(());
    }
    println!(
        "fsck summary: {} problems found ({} entries, {} blocks checked)",
        r.problems.len(),
        r.entries,
        r.blocks
    );
    Err(CliError::new(
        Code::Corrupt,
        format!("{} problems found", r.problems.len()),
        a.cipherdir.display().to_string(),
        "the damaged files are listed above; restore them from a backup",
    ))
}

/// The plaintext path of the cipher path `cipher` (under the cipher
/// directory), when every component's name decrypts.
fn plain_path(cd: &CipherDir, cipher: &Path) -> Option<PathBuf> {
    let rel = cipher.strip_prefix(cd.root()).ok()?;
    let mut dir = cd.root().to_path_buf();
    let mut out = PathBuf::new();
    for comp in rel.components() {
        let name = comp.as_os_str();
        if cd.is_internal(&dir, name) {
            return None;
        }
        let iv = cd.dir_iv(&dir).ok()?;
        out.push(cd.decrypt_entry(&dir, &iv, name).ok()?);
        dir.push(name);
    }
    if out.as_os_str().is_empty() {
        None
    } else {
        Some(out)
    }
}
