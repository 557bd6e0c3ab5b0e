//! The published reports `cryptkeep bench` regenerates, named by subject.

use crate::error::{Error, Result};

/// One published report and the script that measures it (`scripts/bench/NAME.sh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// The TresorSGX report: a disk cipher inside an enclave against a plain disk.
    Tresor,
    /// The EncFS vs eCryptfs report: user-space and kernel encrypted file systems.
    Encfs,
    /// The secGear report: an enclave runtime against the host.
    Secgear,
    /// The dm-crypt on i.MX6 report: accelerated against generic crypto.
    Caam,
    /// The dm-integrity report: authenticated disk encryption.
    Integrity,
}

impl Report {
    /// Every report, in the order `all` runs them.
    pub const ALL: [Report; 5] = [
        Report::Tresor,
        Report::Encfs,
        Report::Secgear,
        Report::Caam,
        Report::Integrity,
    ];

    /// The name on the command line, of the script and of the output directory.
    pub fn name(self) -> &'static str {
        match self {
            Report::Tresor => "tresor",
            Report::Encfs => "encfs",
            Report::Secgear => "secgear",
            Report::Caam => "caam",
            Report::Integrity => "integrity",
        }
    }

    /// The report's subject, as a title.
    pub fn title(self) -> &'static str {
        match self {
            Report::Tresor => "The TresorSGX report: a disk cipher inside an enclave",
            Report::Encfs => "The EncFS vs eCryptfs report: encrypted file systems",
            Report::Secgear => "The secGear report: an enclave runtime against the host",
            Report::Caam => "The dm-crypt on i.MX6 report: accelerated and generic crypto",
            Report::Integrity => "The dm-integrity report: authenticated disk encryption",
        }
    }

    /// Parses report names; `all` stands for every report. Each report runs once,
    /// in the order given.
    pub fn parse_list<S: AsRef<str>>(names: &[S]) -> Result<Vec<Report>> {
        let mut out = Vec::new();
        for name in names {
            let found: Vec<Report> = match name.as_ref() {
                "all" => Report::ALL.to_vec(),
                n => vec![Report::ALL
                    .into_iter()
                    .find(|r| r.name() == n)
                    .ok_or_else(|| Error::UnknownReport(n.to_string()))?],
            };
            for r in found {
                if !out.contains(&r) {
                    out.push(r);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_expands_once_in_order() {
        let r = Report::parse_list(&["caam", "all"]).unwrap();
        assert_eq!(r[0], Report::Caam);
        assert_eq!(r.len(), 5);
        assert!(matches!(
            Report::parse_list(&["tresor", "nope"]),
            Err(Error::UnknownReport(n)) if n == "nope"
        ));
    }
}
