//! What the `integrity` verbs share: the tag algorithm and key options
//! (integritysetup's names), and how integrity errors read on the
//! command line.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use cryptkeep_integrity::{Error, TagHash};

use crate::exit::{CliError, CliResult, Code};
use crate::passphrase::read_key_file;

/// The tag algorithm and its key, as integritysetup names them.
#[derive(ClapArgs, Debug)]
pub struct AlgArgs {
    /// Tag algorithm: crc32c, sha1, sha256, hmac-sha1, hmac-sha256, hmac-sha512.
    #[arg(long = "integrity", default_value = "crc32c", value_name = "ALG")]
    pub integrity: String,
    /// Key of an hmac algorithm.
    #[arg(long = "integrity-key-file", value_name = "FILE")]
    pub key_file: Option<PathBuf>,
    /// Bytes of the key file to use (default: all of it).
    #[arg(long = "integrity-key-size", value_name = "BYTES")]
    pub key_size: Option<u64>,
}

impl AlgArgs {
    /// The algorithm, with its key read from the key file.
    pub(crate) fn hash(&self, place: &str) -> CliResult<TagHash> {
        let key = match &self.key_file {
            Some(p) => Some(read_key_file(p, 0, self.key_size)?),
            None => None,
        };
        TagHash::by_name(&self.integrity, key).map_err(|e| failed(e, place))
    }
}

/// The command-line error for an integrity error at `place`.
pub(crate) fn failed(e: Error, place: &str) -> CliError {
    match e {
        Error::Io { what, source } => CliError::io(format!("cannot read {what}"), place, &source),
        Error::NotIntegrity => CliError::new(
            Code::NotFound,
            e.to_string(),
            place,
            "check the device: it must be formatted by integritysetup",
        ),
        Error::BadHash(_) => CliError::usage(
            e.to_string(),
            place,
            "give --integrity as at format time (and its key)",
        ),
        Error::Unsupported(_) => CliError::new(
            Code::Corrupt,
            e.to_string(),
            place,
            "open it with integritysetup where device-mapper is available",
        ),
        Error::BadSuperblock(_) | Error::TagMismatch { .. } => CliError::new(
            Code::Corrupt,
            e.to_string(),
            place,
            "the device is damaged or not what integritysetup made",
        ),
    }
}
