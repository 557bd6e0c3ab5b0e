//! `cryptkeep isLuks VOLUME`: exit 0 if the header is LUKS1/LUKS2, 4 if not
//! (cryptsetup isLuks).

use std::path::PathBuf;

use clap::Args as ClapArgs;

use super::common::{self, TypeArg};
use crate::exit::{CliError, CliResult, Code};

/// Options of `isLuks`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// The image file or block device.
    pub volume: PathBuf,
    /// Detached header file.
    #[arg(long, value_name = "FILE")]
    pub header: Option<PathBuf>,
    /// Only this version: luks1 or luks2.
    #[arg(long = "type", value_enum)]
    pub kind: Option<TypeArg>,
}

/// Runs `isLuks`.
pub fn run(a: Args) -> CliResult {
    let place = common::place(&a.volume, a.header.as_deref());
    let io = common::open_header(&a.volume, a.header.as_deref(), false)?;
    let luks = common::load(&io, &place)?;
    let tag = common::version_tag(luks.version());
    match a.kind {
        Some(TypeArg::Luks1) if tag != "luks1" => {}
        Some(TypeArg::Luks2) if tag != "luks2" => {}
        _ => return Ok(()),
    }
    Err(CliError::new(
        Code::NotFound,
        format!("the volume is {}, not the --type asked", tag.to_uppercase()),
        place,
        "leave out --type",
    ))
}
