//! One page that sets runs of `cryptkeep bench` made on different backing
//! stores (a tmpfs, a disk) beside each other: for every cryptkeep figure
//! that each run measured, its value, the best peer's and the ratios of
//! every run in one row, so what a disk changes reads off a single table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::compare::{compare, Comparison};
use crate::data::ReportData;
use crate::error::{Error, Result};
use crate::markdown::{figure, label, times};
use crate::report::Report;

/// One earlier run: its name, its backing store and its reports.
pub struct Run {
    /// The run directory's name (date, time, host).
    pub name: String,
    /// Where it was, relative to the page's directory when it can be.
    pub dir: PathBuf,
    /// The backing store, as its `machine.md` names it.
    pub backing: String,
    /// Every report of the run with a `targets.csv`, in report order.
    pub reports: Vec<(Report, ReportData)>,
    /// Reports whose files could not be read (a run stopped half-way), and why.
    pub unreadable: Vec<(Report, String)>,
}

/// The "backing store" row of a run's `machine.md`.
fn backing_of(machine_md: &str) -> Option<String> {
    machine_md.lines().find_map(|l| {
        l.strip_prefix("| backing store |")
            .map(|rest| rest.trim().trim_end_matches('|').trim().to_string())
    })
}

/// The run name in the title of a run's `index.md`.
fn run_name_of(index_md: &str) -> Option<String> {
    let title = index_md.lines().next()?;
    let name = title
        .strip_prefix("# cryptkeep bench, run `")?
        .strip_suffix('`')?;
    (!name.is_empty()).then(|| name.to_string())
}

impl Run {
    /// Reads the run in `dir`; a report whose files do not read is set
    /// aside with its error, and a run without any readable report is an
    /// error.
    pub fn load(dir: &Path) -> Result<Run> {
        // The run's own name (its index page's title), which survives a
        // copy of the directory under another name.
        let name = std::fs::read_to_string(dir.join("index.md"))
            .ok()
            .and_then(|t| run_name_of(&t))
            .unwrap_or_else(|| {
                std::fs::canonicalize(dir)
                    .unwrap_or_else(|_| dir.to_path_buf())
                    .file_name()
                    .map_or_else(|| "run".into(), |n| n.to_string_lossy().into_owned())
            });
        let backing = std::fs::read_to_string(dir.join("machine.md"))
            .ok()
            .and_then(|m| backing_of(&m))
            .unwrap_or_else(|| "unknown (no machine.md)".into());
        let mut reports = Vec::new();
        let mut unreadable = Vec::new();
        for report in Report::ALL {
            let rdir = dir.join(report.name());
            if rdir.join("targets.csv").is_file() {
                match ReportData::load(&rdir, report.name()) {
                    Ok(d) => reports.push((report, d)),
                    Err(e) => unreadable.push((report, e.to_string())),
                }
            }
        }
        if reports.is_empty() {
            return Err(Error::Data {
                path: dir.to_path_buf(),
                line: 0,
                msg: match unreadable.first() {
                    Some((_, e)) => format!("no report of the run reads: {e}"),
                    None => {
                        "no report directories with a targets.csv: not a run of cryptkeep bench"
                            .into()
                    }
                },
            });
        }
        Ok(Run {
            name,
            dir: dir.to_path_buf(),
            backing,
            reports,
            unreadable,
        })
    }

    fn report(&self, report: Report) -> Option<&ReportData> {
        self.reports
            .iter()
            .find(|(r, _)| *r == report)
            .map(|(_, d)| d)
    }
}

/// One run's cells of a row: cryptkeep's figure, the best peer's, × peer
/// and × baseline.
fn cells(data: &ReportData, c: Option<&Comparison>) -> [String; 4] {
    let dash = || "–".to_string();
    let Some(c) = c else {
        return [dash(), dash(), dash(), dash()];
    };
    let Some(m) = data.metric(&c.metric) else {
        return [dash(), dash(), dash(), dash()];
    };
    let peer = c.peer.as_ref().map_or_else(dash, |(p, s)| {
        format!("{} {}", label(data, p), figure(s.median))
    });
    [
        figure(c.ours_stat.median),
        peer,
        c.vs_peer(m.better)
            .map_or_else(dash, |x| format!("**{}**", times(x))),
        c.vs_baseline(m.better).map_or_else(dash, times),
    ]
}

/// The page: per report that every run measured, one table whose rows
/// are (metric, cryptkeep target) in the first run's order, with each
/// run's figures side by side.
pub fn page(runs: &[Run]) -> String {
    let mut md = String::from("# cryptkeep bench on different backing stores\n\n");
    md.push_str(
        "The same reports, run on each backing store below; every ratio compares \
         figures of one run (cryptkeep and the peers interleaved), never figures \
         of different runs. × is how many times better cryptkeep is (for a \
         baseline such as a plain loop device or tmpfs, below 1 is what \
         encryption costs).\n\n",
    );
    for (i, r) in runs.iter().enumerate() {
        let _ = writeln!(
            md,
            "- **{}**: run [`{}`]({}/index.md), {}",
            letter(i),
            r.name,
            r.dir.display(),
            r.backing
        );
        for (report, e) in &r.unreadable {
            let _ = writeln!(md, "  - {} left out: {e}", report.title());
        }
    }
    md.push('\n');
    for report in Report::ALL {
        let datas: Vec<&ReportData> = runs.iter().filter_map(|r| r.report(report)).collect();
        if datas.len() != runs.len() || datas.is_empty() {
            continue;
        }
        let all: Vec<Vec<Comparison>> = datas.iter().map(|d| compare(d)).collect();
        let _ = writeln!(md, "## {}\n", report.title());
        let mut head = String::from("| metric | cryptkeep |");
        let mut rule = String::from("|---|---|");
        for i in 0..runs.len() {
            let l = letter(i);
            let _ = write!(
                head,
                " {l}: cryptkeep | {l}: best peer | {l}: × peer | {l}: × baseline |"
            );
            rule.push_str("---|---|---|---|");
        }
        let _ = writeln!(md, "{head}\n{rule}");
        for c in &all[0] {
            let Some(m) = datas[0].metric(&c.metric) else {
                continue;
            };
            let mut row = format!(
                "| {} [{}] | {} |",
                m.label,
                m.unit,
                label(datas[0], &c.ours)
            );
            for (data, comps) in datas.iter().zip(&all) {
                let same = comps
                    .iter()
                    .find(|o| o.ours == c.ours && o.metric == c.metric);
                for cell in cells(data, same) {
                    let _ = write!(row, " {cell} |");
                }
            }
            let _ = writeln!(md, "{row}");
        }
        md.push('\n');
    }
    md
}

/// The name of the `i`th run in the page's columns: A, B, C…
fn letter(i: usize) -> char {
    char::from(b'A' + (i % 26) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Better, Role};

    fn data(ours: f64, peer: f64, base: f64) -> ReportData {
        crate::testdata::one_metric(
            Better::Higher,
            &[
                ("plain", Role::Baseline, base),
                ("ck", Role::Ours, ours),
                ("peer", Role::Peer, peer),
            ],
        )
    }

    fn run(name: &str, backing: &str, d: ReportData) -> Run {
        Run {
            name: name.into(),
            dir: PathBuf::from(name),
            backing: backing.into(),
            reports: vec![(Report::Encfs, d)],
            unreadable: Vec::new(),
        }
    }

    #[test]
    fn each_run_gets_its_own_ratios_in_one_row() {
        let runs = [
            run(
                "r1",
                "a tmpfs per report (RAM)",
                data(2000.0, 1000.0, 4000.0),
            ),
            run("r2", "/var/tmp (ext4 /dev/vda)", data(900.0, 300.0, 1000.0)),
        ];
        let md = page(&runs);
        assert!(md.contains("**A**: run [`r1`](r1/index.md), a tmpfs per report (RAM)"));
        assert!(md.contains("**B**: run [`r2`](r2/index.md), /var/tmp (ext4 /dev/vda)"));
        let row = md
            .lines()
            .find(|l| l.starts_with("| stream read [MiB/s]"))
            .expect("a row for the metric");
        assert_eq!(
            row,
            "| stream read [MiB/s] | ck | 2000 | peer 1000 | **2.00×** | 0.500× \
             | 900 | peer 300 | **3.00×** | 0.900× |"
        );
    }

    #[test]
    fn a_report_missing_from_one_run_is_left_out() {
        let mut b = run("r2", "disk", data(1.0, 1.0, 1.0));
        b.reports[0].0 = Report::Tresor;
        let md = page(&[run("r1", "ram", data(1.0, 1.0, 1.0)), b]);
        assert!(!md.contains("## "), "{md}");
    }

    #[test]
    fn run_name_from_the_index_title() {
        assert_eq!(
            run_name_of("# cryptkeep bench, run `2026-11-26-150316-vm`\n\nThe machine").as_deref(),
            Some("2026-11-26-150316-vm")
        );
        assert_eq!(run_name_of("# something else"), None);
    }

    #[test]
    fn backing_row_of_machine_md() {
        let m = "| cores | 2 |\n| backing store | /var/tmp (ext4 /dev/vda) |\n";
        assert_eq!(backing_of(m).as_deref(), Some("/var/tmp (ext4 /dev/vda)"));
        assert_eq!(backing_of("| cores | 2 |"), None);
    }
}
