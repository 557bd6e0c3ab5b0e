//! The one error type of the benchmark driver.

use std::fmt;
use std::path::PathBuf;

/// What went wrong in a benchmark run; every variant names where and what to do.
#[derive(Debug)]
pub enum Error {
    /// Reading or writing a file or directory failed.
    Io {
        /// What was being done.
        what: String,
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A file a report script wrote is malformed.
    Data {
        /// The file.
        path: PathBuf,
        /// 1-based line number (0: the whole file).
        line: usize,
        /// What is wrong with it.
        msg: String,
    },
    /// A chart could not be drawn.
    Chart {
        /// The SVG file.
        path: PathBuf,
        /// What the plotting library said.
        msg: String,
    },
    /// A report name that does not exist.
    UnknownReport(String),
    /// The directory of the report scripts was not found.
    NoScripts(Vec<PathBuf>),
    /// A report script exited with an error.
    Script {
        /// The report.
        report: String,
        /// How it ended.
        status: String,
        /// Its log file.
        log: PathBuf,
    },
    /// A report's run is missing measurements (a target without a metric).
    Missing {
        /// The report.
        report: String,
        /// `target/metric` pairs without a positive value.
        pairs: Vec<String>,
    },
    /// The run was interrupted (SIGINT or SIGTERM) and cleaned up.
    Interrupted,
    /// Several reports failed; each is listed.
    Reports(Vec<Error>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, path, source } => {
                write!(f, "{what} {}: {source}", path.display())
            }
            Error::Data { path, line, msg } if *line > 0 => {
                write!(f, "{}:{line}: {msg}", path.display())
            }
            Error::Data { path, msg, .. } => write!(f, "{}: {msg}", path.display()),
            Error::Chart { path, msg } => write!(f, "drawing {}: {msg}", path.display()),
            Error::UnknownReport(name) => write!(
                f,
                "no report named {name:?}: choose tresor, encfs, secgear, caam, integrity or all"
            ),
            Error::NoScripts(tried) => {
                write!(f, "the report scripts (scripts/bench/*.sh) are not in ")?;
                let names: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "{}: run from a checkout, or set CRYPTKEEP_BENCH_SCRIPTS to the directory",
                    names.join(", ")
                )
            }
            Error::Script {
                report,
                status,
                log,
            } => write!(
                f,
                "the {report} report's measurements failed ({status}): see {}",
                log.display()
            ),
            Error::Missing { report, pairs } => write!(
                f,
                "the {report} report is missing measurements (target/metric): {}",
                pairs.join(", ")
            ),
            Error::Interrupted => write!(
                f,
                "interrupted: the running report was stopped and cleaned up"
            ),
            Error::Reports(errors) => {
                let lines: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                write!(
                    f,
                    "{} report(s) failed:\n  {}",
                    errors.len(),
                    lines.join("\n  ")
                )
            }
        }
    }
}

impl std::error::Error for Error {}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Builds an [`Error::Io`] for `what` on `path`.
pub(crate) fn io(what: &str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.to_string();
    let path = path.to_path_buf();
    move |source| Error::Io { what, path, source }
}
