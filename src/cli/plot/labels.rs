//! The chart's words and numbers, apart from the drawing so that tests can read them: the
//! title, each mode's time and memory against f32's, the values printed on the bars, and
//! the axes' ranges (integer steps; one bar slot per mode, none empty).

use std::ops::Range;

/// What the title names.
pub struct ChartInfo {
    pub model: String,
    pub dataset: String,
    pub batch_size: usize,
    pub adapter: String,
    pub backend: String,
}

/// One mode's bars.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub mode: String,
    pub ms_per_step: f64,
    pub peak_gpu_bytes: u64,
}

impl Bar {
    pub fn peak_mb(&self) -> f64 {
        self.peak_gpu_bytes as f64 / 1e6
    }
}

/// `mlp on default, batch 32 · llvmpipe (LLVM 15.0.6, 256 bits), vulkan`.
pub fn title(info: &ChartInfo) -> String {
    format!(
        "{} on {}, batch {} · {}, {}",
        info.model, info.dataset, info.batch_size, info.adapter, info.backend
    )
}

/// Each mode's time per step and peak GPU memory as a multiple of f32's, as the tutorials
/// compare FP32 and AMP: `amp-f16 / f32: 0.62× the time per step, 0.71× the peak GPU
/// memory`. Empty without an f32 run to compare with.
pub fn ratios(bars: &[Bar]) -> Vec<String> {
    let Some(f32) = bars.iter().find(|b| b.mode == "f32") else {
        return Vec::new();
    };
    bars.iter()
        .filter(|b| b.mode != "f32")
        .map(|b| {
            format!(
                "{} / f32: {} the time per step, {} the peak GPU memory",
                b.mode,
                times(b.ms_per_step, f32.ms_per_step),
                times(b.peak_mb(), f32.peak_mb())
            )
        })
        .collect()
}

/// `0.62×` (`-` when the f32 figure is zero).
fn times(value: f64, f32: f64) -> String {
    if f32 > 0.0 {
        format!("{:.2}×", value / f32)
    } else {
        "-".into()
    }
}

/// The number printed on a bar, to three significant digits: `7.53 ms`, `153 ms`,
/// `0.0912 MB`.
pub fn value_label(value: f64, unit: &str) -> String {
    let digits = match value.abs() {
        v if v >= 100.0 || v == 0.0 => 0,
        v if v >= 10.0 => 1,
        v if v >= 1.0 => 2,
        v => (2 - v.log10().floor() as i32).clamp(2, 6) as usize,
    };
    format!("{value:.digits$} {unit}")
}

/// The loss chart's step axis: integers from 1 to the longest run's last step (at least
/// 2, so the axis has a length).
pub fn step_axis(last_steps: impl IntoIterator<Item = u64>) -> Range<u32> {
    let last = last_steps.into_iter().max().unwrap_or(1).max(2);
    1..u32::try_from(last).unwrap_or(u32::MAX)
}

/// The bar charts' x axis: slot `i` of `n` is `[i, i + 1)`, so the axis ends where the last
/// bar's slot does.
pub fn bar_axis(n: usize) -> Range<f64> {
    0.0..n.max(1) as f64
}

/// Where bar `i` is drawn within its slot (a margin each side).
pub fn bar_span(i: usize) -> (f64, f64) {
    (i as f64 + 0.18, i as f64 + 0.82)
}

/// The mode under slot `i`'s centre, for the axis labels (none between slots).
pub fn slot_label(x: f64, bars: &[Bar]) -> String {
    let slot = x - 0.5;
    let i = slot.round();
    if (slot - i).abs() < 1e-6 && i >= 0.0 {
        bars.get(i as usize)
            .map(|b| b.mode.clone())
            .unwrap_or_default()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(mode: &str, ms: f64, mb: f64) -> Bar {
        Bar {
            mode: mode.into(),
            ms_per_step: ms,
            peak_gpu_bytes: (mb * 1e6) as u64,
        }
    }

    #[test]
    fn the_title_names_model_data_batch_and_adapter() {
        let info = ChartInfo {
            model: "mlp".into(),
            dataset: "default".into(),
            batch_size: 32,
            adapter: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            backend: "vulkan".into(),
        };
        assert_eq!(
            title(&info),
            "mlp on default, batch 32 · llvmpipe (LLVM 15.0.6, 256 bits), vulkan"
        );
    }

    #[test]
    fn ratios_divide_each_mode_by_f32() {
        let bars = [
            bar("f32", 15.8, 2150.0),
            bar("amp-f16", 7.5, 1350.0),
            bar("amp-bf16", 31.6, 4300.0),
        ];
        assert_eq!(
            ratios(&bars),
            [
                "amp-f16 / f32: 0.47× the time per step, 0.63× the peak GPU memory",
                "amp-bf16 / f32: 2.00× the time per step, 2.00× the peak GPU memory",
            ]
        );
        assert!(ratios(&bars[1..]).is_empty(), "no f32 run, no ratio");
        assert_eq!(
            ratios(&[bar("f32", 0.0, 0.0), bar("f16", 1.0, 1.0)]),
            ["f16 / f32: - the time per step, - the peak GPU memory"]
        );
    }

    #[test]
    fn bar_values_keep_three_significant_digits() {
        let cases = [
            (153.4, "153 ms"),
            (15.84, "15.8 ms"),
            (7.534, "7.53 ms"),
            (0.09123, "0.0912 ms"),
            (0.0, "0 ms"),
        ];
        for (v, want) in cases {
            assert_eq!(value_label(v, "ms"), want);
        }
    }

    #[test]
    fn steps_are_integers_from_one() {
        assert_eq!(step_axis([50, 100]), 1..100);
        assert_eq!(step_axis([1]), 1..2);
        assert_eq!(step_axis([]), 1..2);
    }

    #[test]
    fn every_bar_slot_holds_a_bar() {
        for n in 1..=4 {
            let axis = bar_axis(n);
            let bars: Vec<Bar> = (0..n).map(|i| bar(&format!("m{i}"), 1.0, 1.0)).collect();
            // The slots tile the axis: the first starts at its start, the last ends at its end.
            assert_eq!(axis.start, 0.0);
            assert_eq!(axis.end, n as f64);
            for i in 0..n {
                let (l, r) = bar_span(i);
                assert!(
                    i as f64 <= l && l < r && r <= (i + 1) as f64,
                    "bar {i} of {n}"
                );
                assert_eq!(slot_label(i as f64 + 0.5, &bars), format!("m{i}"));
                assert_eq!(slot_label(i as f64, &bars), "", "no label between slots");
            }
            assert_eq!(
                slot_label(n as f64 + 0.5, &bars),
                "",
                "no slot past the bars"
            );
        }
    }
}
