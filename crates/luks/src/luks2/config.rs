//! LUKS2 `config`: persistent flags and mandatory requirements (spec §3.5).
//! We implement no requirement, so any mandatory one makes the volume unusable here.

use super::json::Metadata;
use crate::error::Error;

/// Persistent activation flags (e.g. `allow-discards`).
pub fn flags(m: &Metadata) -> Vec<String> {
    m.config.flags.clone().unwrap_or_default()
}

/// Mandatory requirements listed in the header.
pub fn mandatory(m: &Metadata) -> Vec<String> {
    m.config
        .requirements
        .as_ref()
        .and_then(|r| r.mandatory.clone())
        .unwrap_or_default()
}

/// Fail with [`Error::UnmetRequirement`] naming the first mandatory requirement.
pub fn check_requirements(m: &Metadata) -> Result<(), Error> {
    match mandatory(m).into_iter().next() {
        Some(r) => Err(Error::UnmetRequirement(r)),
        None => Ok(()),
    }
}
