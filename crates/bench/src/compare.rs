//! cryptkeep beside the best peer and the baseline of the same run.

use crate::data::{Better, ReportData, Role};
use crate::stats::Stat;

/// How many times better `ours` is than `other` for a metric: ours / other
/// when higher is better, other / ours when lower is.
pub fn ratio(better: Better, ours: f64, other: f64) -> f64 {
    match better {
        Better::Higher => ours / other,
        Better::Lower => other / ours,
    }
}

/// One cryptkeep figure with the best peer's and the baseline's.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The cryptkeep target.
    pub ours: String,
    /// The metric.
    pub metric: String,
    /// cryptkeep's figure.
    pub ours_stat: Stat,
    /// The best peer (by median) and its figure, if any peer measured this metric.
    pub peer: Option<(String, Stat)>,
    /// The first baseline in display order that measured this metric.
    pub baseline: Option<(String, Stat)>,
}

impl Comparison {
    /// Times better than the best peer.
    pub fn vs_peer(&self, better: Better) -> Option<f64> {
        self.peer
            .as_ref()
            .map(|(_, s)| ratio(better, self.ours_stat.median, s.median))
    }

    /// Times better than the baseline (below 1: what encryption costs).
    pub fn vs_baseline(&self, better: Better) -> Option<f64> {
        self.baseline
            .as_ref()
            .map(|(_, s)| ratio(better, self.ours_stat.median, s.median))
    }
}

/// Every measured cryptkeep figure of `data`, metric by metric in display
/// order, each beside the best peer's and the baseline's.
pub fn compare(data: &ReportData) -> Vec<Comparison> {
    let mut out = Vec::new();
    for m in &data.metrics {
        let measured = |role: Role| {
            data.targets
                .iter()
                .filter(move |t| t.role == role)
                .filter_map(|t| data.stat(&t.name, &m.name).map(|s| (t.name.clone(), s)))
        };
        let peer = measured(Role::Peer)
            .max_by(|a, b| ratio(m.better, a.1.median, b.1.median).total_cmp(&1.0));
        let baseline = measured(Role::Baseline).next();
        for (ours, ours_stat) in measured(Role::Ours) {
            out.push(Comparison {
                ours,
                metric: m.name.clone(),
                ours_stat,
                peer: peer.clone(),
                baseline: baseline.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(better: Better) -> ReportData {
        crate::testdata::one_metric(
            better,
            &[
                ("plain", Role::Baseline, 100.0),
                ("ck", Role::Ours, 50.0),
                ("slow", Role::Peer, 10.0),
                ("fast", Role::Peer, 25.0),
            ],
        )
    }

    #[test]
    fn best_peer_follows_the_direction() {
        let c = &compare(&data(Better::Higher))[0];
        assert_eq!(c.peer.as_ref().unwrap().0, "fast");
        assert_eq!(c.vs_peer(Better::Higher), Some(2.0));
        assert_eq!(c.vs_baseline(Better::Higher), Some(0.5));
        let c = &compare(&data(Better::Lower))[0];
        assert_eq!(c.peer.as_ref().unwrap().0, "slow");
        assert_eq!(c.vs_peer(Better::Lower), Some(0.2));
        assert_eq!(c.vs_baseline(Better::Lower), Some(2.0));
    }
}
