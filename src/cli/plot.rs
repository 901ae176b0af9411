//! The comparison chart: a title naming the model, data, batch and adapter; each mode's
//! time and memory against f32's; loss curves per mode; and ms/step and peak-GPU-memory
//! bars with their values, like the tutorial's FP32-vs-AMP chart. Drawn with plotters into
//! memory and encoded as PNG; text uses egui's bundled Ubuntu font so no system fonts are
//! needed. The words and numbers come from `labels.rs`.

mod labels;

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{FontStyle, register_font};
use webgpu_amp::train::RunSummary;
use webgpu_amp::{Error, Result};

pub use labels::ChartInfo;
use labels::{Bar, bar_axis, bar_span, ratios, slot_label, step_axis, title, value_label};

const COLORS: [RGBColor; 4] = [
    RGBColor(51, 154, 240),
    RGBColor(240, 101, 51),
    RGBColor(81, 207, 102),
    RGBColor(174, 62, 201),
];

/// The chart's width, the plots' height, and the heights of the title and of each line of
/// ratios above them (two modes' ratios to a line).
const WIDTH: u32 = 1200;
const PLOTS: u32 = 464;
const TITLE: u32 = 44;
const RATIO_LINE: u32 = 28;

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

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

/// The chart as PNG bytes (`path` names it in errors; the caller writes it atomically).
pub fn comparison_png(path: &Path, info: &ChartInfo, runs: &[RunSummary]) -> Result<Vec<u8>> {
    let bars: Vec<Bar> = runs
        .iter()
        .map(|r| Bar {
            mode: r.precision.clone(),
            ms_per_step: r.ms_per_step,
            peak_gpu_bytes: r.peak_gpu_bytes,
        })
        .collect();
    let ratio_lines: Vec<String> = ratios(&bars)
        .chunks(2)
        .map(|pair| pair.join("   ·   "))
        .collect();
    let header = TITLE + RATIO_LINE * ratio_lines.len() as u32 + 8;
    let size = (WIDTH, header + PLOTS);
    let mut rgb = vec![0u8; (size.0 * size.1 * 3) as usize];
    let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
    draw(
        path,
        info,
        runs,
        &bars,
        &ratio_lines,
        root.split_vertically(header),
    )?;
    root.present().map_err(err(path))?;
    drop(root);
    let image = image::RgbImage::from_raw(size.0, size.1, rgb).expect("buffer of the chart's size");
    let mut png = std::io::Cursor::new(Vec::new());
    image
        .write_to(&mut png, image::ImageOutputFormat::Png)
        .map_err(err(path))?;
    Ok(png.into_inner())
}

fn draw(
    path: &Path,
    info: &ChartInfo,
    runs: &[RunSummary],
    bars: &[Bar],
    ratio_lines: &[String],
    (header, body): (Area<'_>, Area<'_>),
) -> Result<()> {
    register();
    header.fill(&WHITE).map_err(err(path))?;
    body.fill(&WHITE).map_err(err(path))?;

    let centre = |size| {
        ("sans-serif", size)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Top))
    };
    let mid = WIDTH as i32 / 2;
    header
        .draw(&Text::new(title(info), (mid, 10), centre(24)))
        .map_err(err(path))?;
    for (i, line) in ratio_lines.iter().enumerate() {
        let y = (TITLE + RATIO_LINE * i as u32) as i32;
        header
            .draw(&Text::new(line.as_str(), (mid, y), centre(19)))
            .map_err(err(path))?;
    }

    let (left, right) = body.split_horizontally(560);
    let (time_area, mem_area) = right.split_horizontally(320);
    losses(path, &left, runs)?;
    bar_chart(path, &time_area, "ms / step", bars, "ms", |b| b.ms_per_step)?;
    bar_chart(
        path,
        &mem_area,
        "peak GPU memory (MB)",
        bars,
        "MB",
        Bar::peak_mb,
    )
}

/// Loss per step of every run, on an integer step axis.
fn losses(path: &Path, area: &Area<'_>, runs: &[RunSummary]) -> Result<()> {
    let steps = step_axis(runs.iter().filter_map(|r| r.history.last().map(|h| h.step)));
    let finite = runs
        .iter()
        .flat_map(|r| r.history.iter().map(|h| h.loss))
        .filter(|l| l.is_finite());
    let (lo, hi) = finite.fold((f32::MAX, f32::MIN), |(a, b), l| (a.min(l), b.max(l)));
    let (lo, hi) = if lo <= hi {
        (lo.min(0.0), hi * 1.05 + 1e-6)
    } else {
        (0.0, 1.0)
    };
    let mut chart = ChartBuilder::on(area)
        .caption("training loss", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(52)
        .build_cartesian_2d(steps, lo..hi)
        .map_err(err(path))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .x_label_formatter(&|s| s.to_string())
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err(path))?;
    for (i, r) in runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        // Earlier curves wider, so one that a later one follows closely still shows.
        let width = 2 + 2 * (runs.len() - 1 - i).min(2) as u32;
        let points = r
            .history
            .iter()
            .filter(|h| h.loss.is_finite())
            .map(|h| (u32::try_from(h.step).unwrap_or(u32::MAX), h.loss));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(width)))
            .map_err(err(path))?
            .label(r.precision.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(err(path))?;
    Ok(())
}

/// One bar per mode, its value printed above it; one slot per bar, none empty.
fn bar_chart(
    path: &Path,
    area: &Area<'_>,
    caption: &str,
    bars: &[Bar],
    unit: &str,
    value: impl Fn(&Bar) -> f64,
) -> Result<()> {
    // Headroom above the tallest bar for its label.
    let max = bars.iter().map(&value).fold(0.0, f64::max).max(1e-9) * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(52)
        .build_cartesian_2d(bar_axis(bars.len()), 0f64..max)
        .map_err(err(path))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * bars.len() + 1)
        .x_label_formatter(&|x| slot_label(*x, bars))
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(err(path))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let (l, r) = bar_span(i);
            Rectangle::new([(l, 0.0), (r, value(b))], COLORS[i % COLORS.len()].filled())
        }))
        .map_err(err(path))?;
    let above = ("sans-serif", 14)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            Text::new(
                value_label(value(b), unit),
                (i as f64 + 0.5, value(b)),
                above.clone(),
            )
        }))
        .map_err(err(path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use webgpu_amp::train::StepStats;

    fn run(precision: &str, ms_per_step: f64, peak_gpu_bytes: u64) -> RunSummary {
        RunSummary {
            precision: precision.into(),
            adapter: "test adapter".into(),
            backend: "vulkan".into(),
            f16_storage: "native".into(),
            tensor_cores: None,
            steps: 3,
            epochs: 0,
            first_loss: Some(2.0),
            final_loss: Some(1.0),
            val_loss: None,
            val_accuracy: None,
            ms_per_step,
            images_per_sec: 1.0,
            tokens_per_sec: None,
            peak_gpu_bytes,
            skipped_steps: 0,
            final_scale: 1.0,
            host_waits: 0,
            throttle_waits: 0,
            history: (1..=3)
                .map(|step| StepStats {
                    step,
                    loss: 3.0 - step as f32 * 0.5,
                    scale: 1.0,
                    scale_after: 1.0,
                    skipped: false,
                    lr: 1e-3,
                })
                .collect(),
            distributed: None,
            interrupted: false,
            saved: None,
        }
    }

    /// The chart encodes as a PNG of its size, with ink in the title band and in one line
    /// of ratios per two modes besides f32.
    #[test]
    fn the_chart_is_a_png_with_a_title_and_ratios() {
        let info = ChartInfo {
            model: "mlp".into(),
            dataset: "default".into(),
            batch_size: 8,
            adapter: "test adapter".into(),
            backend: "vulkan".into(),
        };
        let modes = [
            run("f32", 10.0, 2_000_000),
            run("amp-f16", 5.0, 1_000_000),
            run("amp-bf16", 6.0, 1_000_000),
            run("f16", 4.0, 900_000),
        ];
        for (n, lines) in [(1, 0), (2, 1), (3, 1), (4, 2)] {
            let png = comparison_png(Path::new("chart.png"), &info, &modes[..n]).unwrap();
            let image = image::load_from_memory(&png).unwrap().to_rgb8();
            let header = TITLE + RATIO_LINE * lines + 8;
            assert_eq!(image.dimensions(), (WIDTH, header + PLOTS), "{n} modes");
            let dark = |y0: u32, y1: u32| {
                (y0..y1)
                    .flat_map(|y| (0..WIDTH).map(move |x| (x, y)))
                    .filter(|&(x, y)| image.get_pixel(x, y).0.iter().all(|&c| c < 128))
                    .count()
            };
            assert!(dark(0, TITLE) > 100, "{n} modes: no title drawn");
            for line in 0..lines {
                let y = TITLE + RATIO_LINE * line;
                assert!(
                    dark(y, y + RATIO_LINE) > 100,
                    "{n} modes: ratio line {line}"
                );
            }
        }
    }
}
