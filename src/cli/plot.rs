//! The comparison chart: loss curves per mode, and ms/step and peak-GPU-memory bars like the
//! tutorial's FP32-vs-AMP chart. Drawn with plotters into a PNG; text uses egui's bundled
//! Ubuntu font so no system fonts are needed.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use webgpu_amp::train::RunSummary;
use webgpu_amp::{Error, Result};

const COLORS: [RGBColor; 4] = [
    RGBColor(51, 154, 240),
    RGBColor(240, 101, 51),
    RGBColor(81, 207, 102),
    RGBColor(174, 62, 201),
];

fn register() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = register_font(
            "sans-serif",
            FontStyle::Normal,
            epaint_default_fonts::UBUNTU_LIGHT,
        );
    });
}

fn err<E: std::fmt::Display>(path: &Path) -> impl Fn(E) -> Error + '_ {
    move |e| Error::InvalidArgument(format!("{}: drawing the chart: {e}", path.display()))
}

pub fn comparison_png(path: &Path, runs: &[RunSummary]) -> Result<()> {
    register();
    let root = BitMapBackend::new(path, (1200, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err(path))?;
    let (left, right) = root.split_horizontally(640);
    let (time_area, mem_area) = right.split_horizontally(280);

    // Loss curves.
    let max_step = runs
        .iter()
        .map(|r| r.history.len())
        .max()
        .unwrap_or(1)
        .max(2) as f32;
    let losses = runs
        .iter()
        .flat_map(|r| r.history.iter().map(|h| h.loss))
        .filter(|l| l.is_finite());
    let (lo, hi) = losses.fold((f32::MAX, f32::MIN), |(a, b), l| (a.min(l), b.max(l)));
    let (lo, hi) = if lo <= hi {
        (lo.min(0.0), hi * 1.05 + 1e-6)
    } else {
        (0.0, 1.0)
    };
    let mut chart = ChartBuilder::on(&left)
        .caption("training loss", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(52)
        .build_cartesian_2d(1f32..max_step, lo..hi)
        .map_err(err(path))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err(path))?;
    for (i, r) in runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                r.history
                    .iter()
                    .enumerate()
                    .filter(|(_, h)| h.loss.is_finite())
                    .map(|(k, h)| ((k + 1) as f32, h.loss)),
                color.stroke_width(2),
            ))
            .map_err(err(path))?
            .label(r.precision.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(err(path))?;

    bars(path, &time_area, "ms / step", runs, |r| r.ms_per_step)?;
    bars(path, &mem_area, "peak GPU memory (MB)", runs, |r| {
        r.peak_gpu_bytes as f64 / 1e6
    })?;
    root.present().map_err(err(path))?;
    Ok(())
}

fn bars(
    path: &Path,
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    runs: &[RunSummary],
    value: impl Fn(&RunSummary) -> f64,
) -> Result<()> {
    let max = runs.iter().map(&value).fold(0.0, f64::max).max(1e-9) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(52)
        .build_cartesian_2d((0..runs.len()).into_segmented(), 0f64..max)
        .map_err(err(path))?;
    let names: Vec<String> = runs.iter().map(|r| r.precision.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err(path))?;
    chart
        .draw_series(runs.iter().enumerate().map(|(i, r)| {
            let mut bar = Rectangle::new(
                [
                    (SegmentValue::Exact(i), 0.0),
                    (SegmentValue::Exact(i + 1), value(r)),
                ],
                COLORS[i % COLORS.len()].filled(),
            );
            bar.set_margin(0, 0, 12, 12);
            bar
        }))
        .map_err(err(path))?;
    Ok(())
}
