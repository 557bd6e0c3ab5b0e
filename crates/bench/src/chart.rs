//! One SVG chart per table: grouped bars (one group per metric, one bar per
//! target), error bars from min to max.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::data::ReportData;
use crate::error::{Error, Result};

/// Draws table `table` of `data` into `path`. Metrics of one unit are drawn
/// as measured; a table mixing units is drawn relative to the best median of
/// each metric (1 = the best target), which the axis says.
pub fn draw(data: &ReportData, table: &str, path: &Path) -> Result<()> {
    let err = |e: &dyn std::fmt::Display| Error::Chart {
        path: path.to_path_buf(),
        msg: e.to_string(),
    };
    let metrics: Vec<_> = data.metrics.iter().filter(|m| m.table == table).collect();
    let targets: Vec<_> = data
        .targets
        .iter()
        .filter(|t| {
            metrics
                .iter()
                .any(|m| data.stat(&t.name, &m.name).is_some())
        })
        .collect();
    if metrics.is_empty() || targets.is_empty() {
        return Ok(());
    }
    let one_unit = metrics.iter().all(|m| m.unit == metrics[0].unit);
    // scale[i]: what metric i's values are divided by.
    let scale: Vec<f64> = metrics
        .iter()
        .map(|m| {
            if one_unit {
                return 1.0;
            }
            let medians = targets.iter().filter_map(|t| data.stat(&t.name, &m.name));
            let best = match m.better {
                crate::data::Better::Higher => medians.map(|s| s.median).fold(0.0, f64::max),
                crate::data::Better::Lower => {
                    medians.map(|s| s.median).fold(f64::INFINITY, f64::min)
                }
            };
            if best.is_finite() && best > 0.0 {
                best
            } else {
                1.0
            }
        })
        .collect();
    let ymax = metrics
        .iter()
        .zip(&scale)
        .flat_map(|(m, k)| {
            targets
                .iter()
                .filter_map(move |t| data.stat(&t.name, &m.name).map(|s| s.max / k))
        })
        .fold(0.0, f64::max)
        * 1.12;
    let y_desc = if one_unit {
        metrics[0].unit.clone()
    } else {
        "relative to the best target (1 = best)".to_string()
    };

    let name = |t: &crate::data::Target| {
        if t.label.is_empty() {
            t.name.clone()
        } else {
            t.label.clone()
        }
    };
    let longest = targets
        .iter()
        .map(|t| name(t).chars().count())
        .max()
        .unwrap_or(0);
    let legend_width = (36 + longest * 7).clamp(160, 520) as u32;
    let plot_width = (160 + metrics.len() * (targets.len() * 26 + 40)).clamp(560, 1400) as u32;
    let height = (80 + targets.len() * 22).max(440) as u32;
    let root = SVGBackend::new(path, (plot_width + legend_width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (plot, legend) = root.split_horizontally(plot_width);
    let mut chart = ChartBuilder::on(&plot)
        .caption(table, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(70)
        .build_cartesian_2d(
            0f64..metrics.len() as f64,
            0f64..ymax.max(f64::MIN_POSITIVE),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|v| crate::markdown::figure(*v))
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;

    let group = 0.8;
    let bar = group / targets.len() as f64;
    for (ti, t) in targets.iter().enumerate() {
        let color = Palette99::pick(ti).to_rgba();
        for (mi, m) in metrics.iter().enumerate() {
            let Some(s) = data.stat(&t.name, &m.name) else {
                continue;
            };
            let k = scale[mi];
            let x0 = mi as f64 + 0.1 + ti as f64 * bar;
            let (x1, xc) = (x0 + bar * 0.9, x0 + bar * 0.45);
            chart
                .draw_series([Rectangle::new(
                    [(x0, 0.0), (x1, s.median / k)],
                    color.filled(),
                )])
                .map_err(|e| err(&e))?;
            if s.n > 1 {
                let cap = bar * 0.2;
                chart
                    .draw_series([
                        PathElement::new(vec![(xc, s.min / k), (xc, s.max / k)], BLACK),
                        PathElement::new(vec![(xc - cap, s.min / k), (xc + cap, s.min / k)], BLACK),
                        PathElement::new(vec![(xc - cap, s.max / k), (xc + cap, s.max / k)], BLACK),
                    ])
                    .map_err(|e| err(&e))?;
            }
        }
    }
    let label_style = TextStyle::from(("sans-serif", 13)).pos(Pos::new(HPos::Center, VPos::Top));
    for (mi, m) in metrics.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(mi as f64 + 0.5, 0.0));
        let arrow = if m.better == crate::data::Better::Higher {
            "↑"
        } else {
            "↓"
        };
        let text = if one_unit {
            format!("{} {arrow}", m.label)
        } else {
            format!("{} [{}] {arrow}", m.label, m.unit)
        };
        plot.draw(&Text::new(text, (px, py + 8), label_style.clone()))
            .map_err(|e| err(&e))?;
    }
    for (ti, t) in targets.iter().enumerate() {
        let y = 40 + ti as i32 * 22;
        let color = Palette99::pick(ti).to_rgba();
        legend
            .draw(&Rectangle::new([(8, y), (22, y + 14)], color.filled()))
            .map_err(|e| err(&e))?;
        legend
            .draw(&Text::new(name(t), (28, y), ("sans-serif", 13)))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
