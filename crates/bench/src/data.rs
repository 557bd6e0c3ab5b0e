//! What a report script measured: the five files of the contract in
//! docs/design/bench.md (`data.csv`, `targets.csv`, `metrics.csv`,
//! `skipped.txt`, `published.md`, `notes.md`), read and cross-checked.

use std::path::Path;

use crate::csv;
use crate::error::{Error, Result};
use crate::stats::Stat;

/// What a target stands for in the comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A cryptkeep configuration.
    Ours,
    /// Another implementation of the same job (the figures cryptkeep is compared with).
    Peer,
    /// What no encryption costs (a plain loop device, tmpfs, the host).
    Baseline,
}

/// One measured configuration (a row of `targets.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Its name in `data.csv`.
    pub name: String,
    /// Ours, a peer or a baseline.
    pub role: Role,
    /// What it is, for the tables.
    pub label: String,
}

/// Whether a larger value of a metric is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Throughput and the like.
    Higher,
    /// Times, sizes and the like.
    Lower,
}

/// One measured quantity (a row of `metrics.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Its name in `data.csv`.
    pub name: String,
    /// What it is, for the tables.
    pub label: String,
    /// Its unit (`MiB/s`, `s`, …).
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// The table (and chart) it belongs to.
    pub table: String,
    /// The targets it applies to (`None`: all of them).
    pub applies_to: Option<Vec<String>>,
}

/// One measurement (a row of `data.csv`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The target's name.
    pub target: String,
    /// The metric's name.
    pub metric: String,
    /// The repetition, from 1.
    pub rep: u32,
    /// The value, positive, in the metric's unit.
    pub value: f64,
}

/// Everything one report's run produced.
#[derive(Debug, Clone, Default)]
pub struct ReportData {
    /// The targets in display order.
    pub targets: Vec<Target>,
    /// The metrics in display order.
    pub metrics: Vec<Metric>,
    /// The measurements.
    pub samples: Vec<Sample>,
    /// Targets that did not run, with why and how to install them.
    pub skipped: Vec<(String, String)>,
    /// Like-for-like pairs from `pairs.csv` (optional): a cryptkeep target,
    /// the target it is compared with on every metric (the same image
    /// through another implementation, or the other crypto backend), and why.
    pub pairs: Vec<(String, String, String)>,
    /// The report's own tables, as published (Markdown).
    pub published: String,
    /// The conditions of this run (Markdown).
    pub notes: String,
}

/// The header of `data.csv`.
pub const DATA_HEADER: [&str; 6] = ["report", "target", "metric", "rep", "value", "unit"];
/// The header of `targets.csv`.
pub const TARGETS_HEADER: [&str; 3] = ["target", "role", "label"];
/// The header of `pairs.csv`.
pub const PAIRS_HEADER: [&str; 3] = ["ours", "other", "why"];
/// The header of `metrics.csv`.
pub const METRICS_HEADER: [&str; 6] = ["metric", "label", "unit", "better", "table", "targets"];

impl ReportData {
    /// Reads the files of report `report` from `dir` and checks that they
    /// agree: every sample names a declared target and metric, in the
    /// metric's unit, with a positive value, for this report.
    pub fn load(dir: &Path, report: &str) -> Result<ReportData> {
        let mut data = ReportData::default();
        let path = dir.join("targets.csv");
        for (line, f) in csv::read(&path, &TARGETS_HEADER)? {
            let bad = |msg: String| Error::Data {
                path: path.clone(),
                line,
                msg,
            };
            let role = match f[1].as_str() {
                "ours" => Role::Ours,
                "peer" => Role::Peer,
                "baseline" => Role::Baseline,
                r => return Err(bad(format!("role {r:?}: expected ours, peer or baseline"))),
            };
            if f[0].is_empty() || data.targets.iter().any(|t| t.name == f[0]) {
                return Err(bad(format!("target {:?} is empty or declared twice", f[0])));
            }
            data.targets.push(Target {
                name: f[0].clone(),
                role,
                label: f[2].clone(),
            });
        }
        let path = dir.join("metrics.csv");
        for (line, f) in csv::read(&path, &METRICS_HEADER)? {
            let bad = |msg: String| Error::Data {
                path: path.clone(),
                line,
                msg,
            };
            let better = match f[3].as_str() {
                "higher" => Better::Higher,
                "lower" => Better::Lower,
                b => return Err(bad(format!("better {b:?}: expected higher or lower"))),
            };
            if f[0].is_empty() || data.metrics.iter().any(|m| m.name == f[0]) {
                return Err(bad(format!("metric {:?} is empty or declared twice", f[0])));
            }
            let applies_to = match f[5].trim() {
                "*" | "" => None,
                list => {
                    let names: Vec<String> = list.split_whitespace().map(String::from).collect();
                    if let Some(n) = names.iter().find(|n| !data.has_target(n)) {
                        return Err(bad(format!("target {n:?} is not in targets.csv")));
                    }
                    Some(names)
                }
            };
            data.metrics.push(Metric {
                name: f[0].clone(),
                label: f[1].clone(),
                unit: f[2].clone(),
                better,
                table: f[4].clone(),
                applies_to,
            });
        }
        let path = dir.join("data.csv");
        for (line, f) in csv::read(&path, &DATA_HEADER)? {
            let bad = |msg: String| Error::Data {
                path: path.clone(),
                line,
                msg,
            };
            if f[0] != report {
                return Err(bad(format!(
                    "report {:?} in the {report} report's data",
                    f[0]
                )));
            }
            if !data.has_target(&f[1]) {
                return Err(bad(format!("target {:?} is not in targets.csv", f[1])));
            }
            let Some(metric) = data.metric(&f[2]) else {
                return Err(bad(format!("metric {:?} is not in metrics.csv", f[2])));
            };
            if metric.unit != f[5] {
                return Err(bad(format!(
                    "unit {:?}, but metrics.csv gives {} the unit {:?}",
                    f[5], metric.name, metric.unit
                )));
            }
            let rep: u32 = f[3]
                .parse()
                .ok()
                .filter(|r| *r >= 1)
                .ok_or_else(|| bad(format!("rep {:?}: expected a number from 1", f[3])))?;
            let value: f64 = f[4]
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v > 0.0)
                .ok_or_else(|| bad(format!("value {:?}: expected a positive number", f[4])))?;
            data.samples.push(Sample {
                target: f[1].clone(),
                metric: f[2].clone(),
                rep,
                value,
            });
        }
        let path = dir.join("pairs.csv");
        if path.exists() {
            for (line, f) in csv::read(&path, &PAIRS_HEADER)? {
                let known = |n: &str, role: Option<Role>| {
                    data.targets
                        .iter()
                        .any(|t| t.name == n && role.is_none_or(|r| t.role == r))
                };
                if !known(&f[0], Some(Role::Ours)) || !known(&f[1], None) || f[0] == f[1] {
                    return Err(Error::Data {
                        path: path.clone(),
                        line,
                        msg: format!(
                            "pair {:?}/{:?}: the first must be a cryptkeep target and the second \
                             another target of targets.csv",
                            f[0], f[1]
                        ),
                    });
                }
                data.pairs.push((f[0].clone(), f[1].clone(), f[2].clone()));
            }
        }
        for line in csv::read_text(&dir.join("skipped.txt"))?.lines() {
            if let Some((t, why)) = line.split_once(':') {
                data.skipped
                    .push((t.trim().to_string(), why.trim().to_string()));
            } else if !line.trim().is_empty() {
                data.skipped.push((String::new(), line.trim().to_string()));
            }
        }
        data.published = csv::read_text(&dir.join("published.md"))?;
        data.notes = csv::read_text(&dir.join("notes.md"))?;
        Ok(data)
    }

    /// Whether `name` is a declared target.
    pub fn has_target(&self, name: &str) -> bool {
        self.targets.iter().any(|t| t.name == name)
    }

    /// The metric called `name`.
    pub fn metric(&self, name: &str) -> Option<&Metric> {
        self.metrics.iter().find(|m| m.name == name)
    }

    /// Whether `target` did not run (it has a line in `skipped.txt`).
    pub fn is_skipped(&self, target: &str) -> bool {
        self.skipped.iter().any(|(t, _)| t == target)
    }

    /// Whether `metric` is measured on `target`.
    pub fn applies(&self, metric: &Metric, target: &str) -> bool {
        metric
            .applies_to
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == target))
    }

    /// The values of `metric` on `target`, in the order measured.
    pub fn values(&self, target: &str, metric: &str) -> Vec<f64> {
        self.samples
            .iter()
            .filter(|s| s.target == target && s.metric == metric)
            .map(|s| s.value)
            .collect()
    }

    /// Median, min and max of `metric` on `target`, if measured.
    pub fn stat(&self, target: &str, metric: &str) -> Option<Stat> {
        Stat::of(&self.values(target, metric))
    }

    /// The tables, in the order their first metric appears.
    pub fn tables(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for m in &self.metrics {
            if !out.contains(&m.table.as_str()) {
                out.push(&m.table);
            }
        }
        out
    }

    /// Target/metric pairs that should have been measured and were not: the
    /// target is declared, not skipped, the metric applies to it, and no
    /// positive value was recorded.
    pub fn missing(&self) -> Vec<String> {
        let mut out = Vec::new();
        for t in self.targets.iter().filter(|t| !self.is_skipped(&t.name)) {
            for m in self.metrics.iter().filter(|m| self.applies(m, &t.name)) {
                if self.values(&t.name, &m.name).is_empty() {
                    out.push(format!("{}/{}", t.name, m.name));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).unwrap();
    }

    fn sample_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ck-bench-data-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir, "targets.csv", "target,role,label\nloop,baseline,plain loop\nck,ours,cryptkeep\ngo,peer,gocryptfs\nqsd,peer,qemu\n");
        write(&dir, "metrics.csv", "metric,label,unit,better,table,targets\nread,seq read,MiB/s,higher,fio,*\nboot,set-up,s,lower,setup,ck go\n");
        write(
            &dir,
            "skipped.txt",
            "qsd: qemu-storage-daemon missing; install: apt-get install qemu-system-x86\n",
        );
        dir
    }

    #[test]
    fn loads_and_finds_missing_rows() {
        let dir = sample_dir("a");
        write(&dir, "data.csv", "report,target,metric,rep,value,unit\nt,loop,read,1,100,MiB/s\nt,ck,read,1,90,MiB/s\nt,ck,read,2,80.5,MiB/s\nt,go,read,1,30,MiB/s\nt,ck,boot,1,0.2,s\n");
        let d = ReportData::load(&dir, "t").unwrap();
        assert_eq!(d.values("ck", "read"), vec![90.0, 80.5]);
        assert_eq!(d.missing(), vec!["go/boot".to_string()]);
        assert!(d.is_skipped("qsd"));
        assert_eq!(d.tables(), vec!["fio", "setup"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn pairs_name_ours_first() {
        let dir = sample_dir("p");
        write(&dir, "data.csv", "report,target,metric,rep,value,unit\n");
        write(&dir, "pairs.csv", "ours,other,why\nck,go,same image\n");
        assert_eq!(ReportData::load(&dir, "t").unwrap().pairs.len(), 1);
        write(&dir, "pairs.csv", "ours,other,why\ngo,ck,backwards\n");
        let e = ReportData::load(&dir, "t").unwrap_err().to_string();
        assert!(e.contains("pairs.csv:2"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn refuses_bad_rows() {
        let dir = sample_dir("b");
        for (row, want) in [
            ("t,ck,read,1,0,MiB/s", "positive"),
            ("t,ck,read,1,nan,MiB/s", "positive"),
            ("t,ck,read,0,5,MiB/s", "rep"),
            ("t,ck,read,1,5,MB/s", "unit"),
            ("t,xx,read,1,5,MiB/s", "targets.csv"),
            ("t,ck,write,1,5,MiB/s", "metrics.csv"),
            ("u,ck,read,1,5,MiB/s", "report"),
        ] {
            write(
                &dir,
                "data.csv",
                &format!("report,target,metric,rep,value,unit\n{row}\n"),
            );
            let e = ReportData::load(&dir, "t").unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("data.csv:2"), "{row}: {e}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
