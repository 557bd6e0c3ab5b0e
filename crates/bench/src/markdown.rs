//! The Markdown pages of a run: one `report.md` per report and `index.md`.

use std::fmt::Write as _;

use crate::compare::{compare, Comparison};
use crate::data::{Better, ReportData, Role};
use crate::report::Report;
use crate::stats::Stat;

/// A figure with three significant digits (no exponent).
pub fn figure(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else {
        // Three significant digits, still without an exponent.
        let digits = (-a.log10()).ceil().clamp(0.0, 12.0) as usize + 2;
        format!("{v:.digits$}")
    }
}

/// A ratio as "2.31×".
pub fn times(r: f64) -> String {
    format!("{}×", figure(r))
}

fn cell(s: Option<Stat>) -> String {
    match s {
        None => "–".into(),
        Some(s) if s.n == 1 => figure(s.median),
        Some(s) => format!("{} ({}–{})", figure(s.median), figure(s.min), figure(s.max)),
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Ours => "cryptkeep",
        Role::Peer => "peer",
        Role::Baseline => "baseline",
    }
}

/// A file name for table `table`'s chart.
pub fn chart_file(table: &str) -> String {
    let slug: String = table
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    format!("chart-{}.svg", slug.trim_matches('-'))
}

/// The label of target `name` (its name when it has none).
pub(crate) fn label<'a>(data: &'a ReportData, name: &'a str) -> &'a str {
    data.targets
        .iter()
        .find(|t| t.name == name && !t.label.is_empty())
        .map_or(name, |t| t.label.as_str())
}

/// `report.md`: the published tables, this run's tables (median and
/// min–max), cryptkeep beside the best peer, and what was skipped.
pub fn report_page(report: Report, run: &str, data: &ReportData) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# {}\n", report.title());
    let _ = writeln!(
        md,
        "Run `{run}`; the machine is described in [machine.md](../machine.md). \
         Regenerate with `cryptkeep bench {}`.\n",
        report.name()
    );
    if !data.notes.trim().is_empty() {
        let _ = writeln!(md, "{}\n", data.notes.trim());
    }
    if !data.published.trim().is_empty() {
        let _ = writeln!(md, "## As published\n\n{}\n", data.published.trim());
    }
    let _ = writeln!(md, "## This machine, this run\n");
    let _ = writeln!(
        md,
        "Median (min–max) of every repetition; targets measured in the same run.\n"
    );
    for table in data.tables() {
        let metrics: Vec<_> = data.metrics.iter().filter(|m| m.table == table).collect();
        let _ = writeln!(md, "### {table}\n");
        let head: Vec<String> = metrics
            .iter()
            .map(|m| {
                let arrow = if m.better == Better::Higher {
                    "↑"
                } else {
                    "↓"
                };
                format!("{} [{}] {arrow}", m.label, m.unit)
            })
            .collect();
        let _ = writeln!(md, "| target | role | {} |", head.join(" | "));
        let _ = writeln!(md, "|---|---|{}", "---|".repeat(metrics.len()));
        for t in &data.targets {
            if !metrics.iter().any(|m| data.applies(m, &t.name)) {
                continue;
            }
            let cells: Vec<String> = metrics
                .iter()
                .map(|m| cell(data.stat(&t.name, &m.name)))
                .collect();
            let _ = writeln!(
                md,
                "| {} | {} | {} |",
                label(data, &t.name),
                role_name(t.role),
                cells.join(" | ")
            );
        }
        let _ = writeln!(md, "\n![{table}]({})\n", chart_file(table));
    }
    let comparisons = compare(data);
    if !comparisons.is_empty() {
        let _ = writeln!(md, "## cryptkeep beside the best peer\n");
        let _ = writeln!(
            md,
            "× is how many times better cryptkeep is (above 1: cryptkeep wins; for a baseline, \
             below 1 is what encryption costs).\n"
        );
        let _ = writeln!(
            md,
            "| metric | cryptkeep | figure | best peer | figure | × peer | baseline | × baseline |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
        for c in &comparisons {
            let _ = writeln!(md, "{}", comparison_row(data, c));
        }
        md.push('\n');
    }
    let pairs = pair_rows(data);
    if !pairs.is_empty() {
        let _ = writeln!(md, "## Like for like\n");
        let _ = writeln!(
            md,
            "| cryptkeep | compared with | why | metric | cryptkeep | other | × |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---|");
        for r in &pairs {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} {u} | {} {u} | **{}** |",
                label(data, &r.ours),
                label(data, &r.other),
                r.why,
                r.metric_label,
                figure(r.ours_median),
                figure(r.other_median),
                times(r.ratio),
                u = r.unit
            );
        }
        md.push('\n');
    }
    if !data.skipped.is_empty() {
        let _ = writeln!(md, "## Not measured\n");
        for (t, why) in &data.skipped {
            let _ = writeln!(md, "- **{t}**: {why}");
        }
        md.push('\n');
    }
    md
}

fn comparison_row(data: &ReportData, c: &Comparison) -> String {
    let Some(m) = data.metric(&c.metric) else {
        return String::new();
    };
    let unit = &m.unit;
    let other = |o: &Option<(String, Stat)>| match o {
        Some((name, s)) => (
            label(data, name).to_string(),
            format!("{} {unit}", figure(s.median)),
        ),
        None => ("–".into(), "–".into()),
    };
    let (peer, peer_fig) = other(&c.peer);
    let base = match &c.baseline {
        Some(_) => {
            let (name, fig) = other(&c.baseline);
            format!("{name} {fig}")
        }
        None => "–".into(),
    };
    let r = |x: Option<f64>| x.map_or("–".into(), times);
    format!(
        "| {} | {} | {} {unit} | {peer} | {peer_fig} | {} | {base} | {} |",
        m.label,
        label(data, &c.ours),
        figure(c.ours_stat.median),
        c.vs_peer(m.better)
            .map_or("–".into(), |x| format!("**{}**", times(x))),
        r(c.vs_baseline(m.better)),
    )
}

/// One metric of a like-for-like pair.
struct PairRow {
    ours: String,
    other: String,
    why: String,
    metric_label: String,
    unit: String,
    ours_median: f64,
    other_median: f64,
    ratio: f64,
}

/// Every metric both targets of a pair measured.
fn pair_rows(data: &ReportData) -> Vec<PairRow> {
    let mut out = Vec::new();
    for (ours, other, why) in &data.pairs {
        for m in &data.metrics {
            let (Some(a), Some(b)) = (data.stat(ours, &m.name), data.stat(other, &m.name)) else {
                continue;
            };
            out.push(PairRow {
                ours: ours.clone(),
                other: other.clone(),
                why: why.clone(),
                metric_label: m.label.clone(),
                unit: m.unit.clone(),
                ours_median: a.median,
                other_median: b.median,
                ratio: crate::compare::ratio(m.better, a.median, b.median),
            });
        }
    }
    out
}

/// The headline lines of one report for `index.md`: the first cryptkeep
/// target's ratio to the best peer on every metric a peer measured, then
/// every like-for-like pair.
pub fn headlines(data: &ReportData) -> Vec<String> {
    let mut out = best_peer_headlines(data);
    for r in pair_rows(data) {
        out.push(format!(
            "{}: {} {} {u} vs {} {} {u} ({}) — **{}**",
            r.metric_label,
            label(data, &r.ours),
            figure(r.ours_median),
            label(data, &r.other),
            figure(r.other_median),
            r.why,
            times(r.ratio),
            u = r.unit
        ));
    }
    out
}

fn best_peer_headlines(data: &ReportData) -> Vec<String> {
    let comparisons = compare(data);
    let Some(first) = comparisons.first().map(|c| c.ours.clone()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in comparisons.iter().filter(|c| c.ours == first) {
        let Some(m) = data.metric(&c.metric) else {
            continue;
        };
        let line = match (
            c.vs_peer(m.better),
            &c.peer,
            c.vs_baseline(m.better),
            &c.baseline,
        ) {
            (Some(r), Some((p, ps)), _, _) => format!(
                "{}: {} {} {u} vs {} {} {u} — **{}** the best peer",
                m.label,
                label(data, &c.ours),
                figure(c.ours_stat.median),
                label(data, p),
                figure(ps.median),
                times(r),
                u = m.unit
            ),
            (None, _, Some(r), Some((b, _))) => format!(
                "{}: {} {} {} — {} of {}",
                m.label,
                label(data, &c.ours),
                figure(c.ours_stat.median),
                m.unit,
                times(r),
                label(data, b)
            ),
            _ => continue,
        };
        out.push(line);
    }
    out
}

/// `index.md`: every report of the run, its headline ratios and its status.
pub fn index_page(run: &str, reports: &[(Report, Result<Vec<String>, String>)]) -> String {
    let mut md = format!(
        "# cryptkeep bench, run `{run}`\n\nThe machine: [machine.md](machine.md). \
         Every figure below was measured in this run, cryptkeep and peers interleaved.\n\n"
    );
    for (report, lines) in reports {
        let _ = writeln!(md, "## [{}]({}/report.md)\n", report.title(), report.name());
        match lines {
            Ok(lines) if lines.is_empty() => {
                let _ = writeln!(md, "No peer measured the same metrics in this run.\n");
            }
            Ok(lines) => {
                for l in lines {
                    let _ = writeln!(md, "- {l}");
                }
                md.push('\n');
            }
            Err(e) => {
                let _ = writeln!(md, "**Failed:** {e}\n");
            }
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_and_files() {
        assert_eq!(figure(1234.4), "1234");
        assert_eq!(figure(12.34), "12.3");
        assert_eq!(figure(1.234), "1.23");
        assert_eq!(figure(0.1234), "0.123");
        assert_eq!(figure(0.00620), "0.00620");
        assert_eq!(figure(0.0000123), "0.0000123");
        assert_eq!(times(2.0), "2.00×");
        assert_eq!(chart_file("fio (1 MiB)"), "chart-fio--1-mib.svg");
    }
}
