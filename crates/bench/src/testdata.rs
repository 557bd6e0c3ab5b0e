//! Report data for the unit tests: one metric, one value per target.

use crate::data::{Better, Metric, ReportData, Role, Sample, Target};

/// A report with one metric `m` ("stream read", MiB/s, `better`) and one
/// sample per target, each target labelled by its name.
pub(crate) fn one_metric(better: Better, targets: &[(&str, Role, f64)]) -> ReportData {
    ReportData {
        targets: targets
            .iter()
            .map(|&(name, role, _)| Target {
                name: name.into(),
                role,
                label: name.into(),
            })
            .collect(),
        metrics: vec![Metric {
            name: "m".into(),
            label: "stream read".into(),
            unit: "MiB/s".into(),
            better,
            table: "t".into(),
            applies_to: None,
        }],
        samples: targets
            .iter()
            .map(|&(name, _, value)| Sample {
                target: name.into(),
                metric: "m".into(),
                rep: 1,
                value,
            })
            .collect(),
        ..Default::default()
    }
}
