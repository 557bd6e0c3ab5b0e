//! `cryptkeep fs init CIPHERDIR` (gocryptfs `-init`): a new
//! gocryptfs-format file system; prints the master key like gocryptfs.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_overlay::{CipherDir, InitOptions};

use super::common::{from_overlay, PassArgs, CONF_NAME, CONF_REVERSE_NAME};
use crate::exit::{CliError, CliResult};

/// Options of `fs init`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The directory to create it in (created if missing, else must be empty;
    /// with --reverse: the plaintext directory).
    pub cipherdir: PathBuf,
    /// Encrypt contents with AES-SIV.
    #[arg(long, conflicts_with = "xchacha")]
    pub aessiv: bool,
    /// Encrypt contents with XChaCha20-Poly1305.
    #[arg(long)]
    pub xchacha: bool,
    /// Store names unencrypted.
    #[arg(long)]
    pub plaintextnames: bool,
    /// Encrypt names without per-directory IVs (no gocryptfs.diriv).
    #[arg(long = "deterministic-names")]
    pub deterministic_names: bool,
    /// Hash encrypted names longer than N bytes (62..=255).
    #[arg(long, value_name = "N", default_value_t = 255,
          value_parser = clap::value_parser!(u8).range(62..=255))]
    pub longnamemax: u8,
    /// scrypt cost as log2(N) (10..=28; gocryptfs's default 16).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u8).range(10..=28))]
    pub scryptn: u8,
    /// Create .gocryptfs.reverse.conf in a plaintext directory for
    /// `fs mount --reverse` (AES-SIV).
    #[arg(long)]
    pub reverse: bool,
    #[command(flatten)]
    pub pass: PassArgs,
}

/// Runs `fs init`.
pub fn run(a: Args) -> CliResult {
    let opts = InitOptions {
        aessiv: a.aessiv,
        xchacha: a.xchacha,
        plaintext_names: a.plaintextnames,
        deterministic_names: a.deterministic_names,
        long_name_max: a.longnamemax,
        scrypt_log_n: a.scryptn,
        ..InitOptions::default()
    };
    if a.reverse && a.xchacha {
        return Err(CliError::usage(
            "--reverse uses AES-SIV; --xchacha is not possible",
            "command line",
            "leave out --xchacha",
        ));
    }
    if a.reverse && !a.cipherdir.is_dir() {
        return Err(CliError::new(
            crate::exit::Code::NotFound,
            "the plaintext directory does not exist",
            a.cipherdir.display().to_string(),
            "--reverse needs the existing plaintext directory",
        ));
    }
    let pw = a.pass.read(
        "Choose a password for protecting your files.\nPassword: ",
        true,
    )?;
    let (mk, conf) = if a.reverse {
        let (_cd, mk) = CipherDir::init_reverse(&a.cipherdir, &pw, &opts)
            .map_err(|e| from_overlay(e, &a.cipherdir))?;
        (mk, a.cipherdir.join(CONF_REVERSE_NAME))
    } else {
        let (_cd, mk) =
            CipherDir::init(&a.cipherdir, &pw, &opts).map_err(|e| from_overlay(e, &a.cipherdir))?;
        (mk, a.cipherdir.join(CONF_NAME))
    };
    println!("Your master key is:\n\n    {}\n", mk.to_display_hex());
    println!(
        "If the config file becomes corrupted or you ever forget your password, there is only\n\
         one hope for recovery: the master key. Keep it on paper, somewhere safe.\n\
         This message is only printed once."
    );
    println!("The config is {}.", conf.display());
    println!(
        "You can now mount it with: cryptkeep fs mount {}{} MOUNTPOINT",
        if a.reverse { "--reverse " } else { "" },
        a.cipherdir.display()
    );
    Ok(())
}
