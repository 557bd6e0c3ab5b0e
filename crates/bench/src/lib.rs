//! `cryptkeep bench REPORT…`: regenerates the published reports' tables on
//! this machine, cryptkeep and the peers measured in the same run.
//!
//! Each report's measurements are a shell script (`scripts/bench/NAME.sh`)
//! that writes the files of the contract in docs/design/bench.md; this crate
//! runs it ([`script`]), reads and checks what it wrote ([`data`]: every row
//! present, every value positive), and writes the report's page
//! ([`markdown`]: the published tables, ours with median and min–max, each
//! cryptkeep figure beside the best peer's with the ratio), one SVG chart per
//! table ([`chart`]), the machine's description ([`machine`]) and an index.
//!
//! | module | job |
//! |---|---|
//! | [`report`] | the reports by subject, `all` |
//! | [`script`] | runs a script: process group, progress, Ctrl-C |
//! | [`csv`], [`data`] | the script's files, read and cross-checked |
//! | [`stats`], [`compare`] | medians and spreads; best peer, ratios |
//! | [`markdown`], [`chart`], [`machine`] | the pages and charts |
//! | [`side_by_side`] | runs on different backing stores on one page |

pub mod chart;
pub mod compare;
pub mod csv;
pub mod data;
pub mod error;
pub mod machine;
pub mod markdown;
pub mod report;
pub mod script;
pub mod side_by_side;
pub mod stats;
#[cfg(test)]
mod testdata;

use std::path::{Path, PathBuf};

pub use error::{Error, Result};
pub use report::Report;

use data::ReportData;
use error::io;
use script::ScriptRun;

/// What to run and where to write it.
#[derive(Debug, Clone)]
pub struct Options {
    /// The reports, in order.
    pub reports: Vec<Report>,
    /// Tiny sizes and one repetition: proves every report still runs end to end.
    pub quick: bool,
    /// Repetitions per measurement (`None`: each report's default).
    pub reps: Option<u32>,
    /// A directory on the store to measure (`None`: a tmpfs per report).
    pub backing: Option<PathBuf>,
    /// Where the run's directory is made.
    pub out: PathBuf,
    /// The `cryptkeep` binary to measure.
    pub exe: PathBuf,
}

/// Days since 1970-01-01 to a (year, month, day) civil date (proleptic Gregorian).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The run's name: UTC date and time, then the host name.
fn run_name() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().replace(['/', ' '], "-"))
        .unwrap_or_else(|_| "host".into());
    format!(
        "{y:04}-{m:02}-{d:02}-{:02}{:02}{:02}-{host}",
        t / 3600,
        t % 3600 / 60,
        t % 60
    )
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(io("writing", path))
}

/// Reads what a report's script wrote into `dir`, writes its page and
/// charts, and returns its headline lines; a missing measurement fails it
/// (after the page is written, to show what is there).
fn finish_report(report: Report, run: &str, dir: &Path) -> Result<Vec<String>> {
    let data = ReportData::load(dir, report.name())?;
    for table in data.tables() {
        chart::draw(&data, table, &dir.join(markdown::chart_file(table)))?;
    }
    write(
        &dir.join("report.md"),
        &markdown::report_page(report, run, &data),
    )?;
    let missing = data.missing();
    if !missing.is_empty() {
        return Err(Error::Missing {
            report: report.name().into(),
            pairs: missing,
        });
    }
    Ok(markdown::headlines(&data))
}

/// Runs `opts.reports` one after the other and returns the run's directory.
/// A report that fails does not stop the others (the error lists every
/// failure at the end); an interrupt stops the run after the running
/// script has cleaned up.
pub fn run(opts: &Options) -> Result<PathBuf> {
    script::install_signal_handlers();
    let scripts = script::find_scripts(&opts.exe)?;
    let name = run_name();
    let dir = opts.out.join(&name);
    std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
    write(
        &dir.join("machine.md"),
        &machine::describe(opts.backing.as_deref(), &opts.exe),
    )?;
    let mut pages = Vec::new();
    let mut errors = Vec::new();
    let mut all_csv = data::DATA_HEADER.join(",") + "\n";
    for &report in &opts.reports {
        let rdir = dir.join(report.name());
        std::fs::create_dir_all(&rdir).map_err(io("creating", &rdir))?;
        eprintln!("bench: {} ({})", report.title(), rdir.display());
        let run = ScriptRun {
            report,
            script: scripts.join(format!("{}.sh", report.name())),
            out: rdir.clone(),
            quick: opts.quick,
            reps: opts.reps,
            backing: opts.backing.clone(),
            exe: opts.exe.clone(),
        };
        let result = run.run().and_then(|()| finish_report(report, &name, &rdir));
        if let Ok(text) = csv::read_text(&rdir.join("data.csv")) {
            all_csv.extend(text.lines().skip(1).map(|l| format!("{l}\n")));
        }
        match result {
            Ok(lines) => pages.push((report, Ok(lines))),
            Err(Error::Interrupted) => {
                write(&dir.join("index.md"), &markdown::index_page(&name, &pages))?;
                return Err(Error::Interrupted);
            }
            Err(e) => {
                pages.push((report, Err(e.to_string())));
                errors.push(e);
            }
        }
    }
    write(&dir.join("data.csv"), &all_csv)?;
    write(&dir.join("index.md"), &markdown::index_page(&name, &pages))?;
    match errors.len() {
        0 => Ok(dir),
        1 => Err(errors.remove(0)),
        _ => Err(Error::Reports(errors)),
    }
}

/// Writes the pages, charts and index of an earlier run's directory again
/// from the data its scripts wrote (after a change to the pages, or to
/// look at a run that failed half-way), for every report directory in it.
pub fn render(dir: &Path) -> Result<()> {
    let name = dir
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned());
    let mut pages = Vec::new();
    for report in Report::ALL {
        let rdir = dir.join(report.name());
        if rdir.join("targets.csv").is_file() {
            let result = finish_report(report, &name, &rdir).map_err(|e| e.to_string());
            pages.push((report, result));
        }
    }
    if pages.is_empty() {
        return Err(Error::Data {
            path: dir.to_path_buf(),
            line: 0,
            msg: "no report directories with a targets.csv: not a run of cryptkeep bench".into(),
        });
    }
    write(&dir.join("index.md"), &markdown::index_page(&name, &pages))
}

/// Reads the runs in `dirs` (made with different `--backing` stores, or on
/// different days) and returns one Markdown page with their figures side
/// by side ([`side_by_side::page`]).
pub fn side_by_side(dirs: &[PathBuf]) -> Result<String> {
    let runs = dirs
        .iter()
        .map(|d| side_by_side::Run::load(d))
        .collect::<Result<Vec<_>>>()?;
    Ok(side_by_side::page(&runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(20_783), (2026, 11, 26));
    }
}
