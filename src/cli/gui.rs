//! `webgpu-amp gui`: open the app window (eframe on wgpu). All of it lives in
//! `webgpu_amp::app` (the window in `app/native.rs`); this only turns flags into options.

use clap::Args;
use webgpu_amp::Result;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::app::config::SessionConfig;
use webgpu_amp::app::model::dataset_for;
use webgpu_amp::app::native::{NativeOptions, run_native};
use webgpu_amp::train::Setting;

use super::DeviceArgs;
use super::numbers::setting;

#[derive(Args, Debug)]
pub struct GuiArgs {
    /// Start training as soon as the window opens.
    #[arg(long)]
    autostart: bool,
    /// Comma-separated precision modes to train side by side (f32, amp-f16, amp-bf16, f16).
    #[arg(long, default_value = "f32,amp-f16")]
    modes: String,
    /// Model preset (mlp, linear, simple-cnn, mnist-cnn, gpt-tiny, gpt-char).
    #[arg(long, default_value = "mlp")]
    model: String,
    /// Data set (default: the embedded MNIST subset, or the embedded hamlet text for a GPT;
    /// fashion-mnist, mnist, synthetic:N, hamlet, shakespeare, text:FILE, FILE.safetensors).
    #[arg(long)]
    dataset: Option<String>,
    /// Optimizer steps per mode (1 to 2^53).
    #[arg(long, default_value_t = 300, allow_negative_numbers = true,
          value_parser = setting::<u64>(Setting::Steps))]
    steps: u64,
    /// Samples per batch (1 to 16777216).
    #[arg(long, default_value_t = 64, allow_negative_numbers = true,
          value_parser = setting::<usize>(Setting::BatchSize))]
    batch_size: usize,
    /// Window size in points, WIDTHxHEIGHT, each 200 to 8192.
    #[arg(long, default_value = "1280x820")]
    size: String,
    #[command(flatten)]
    device: DeviceArgs,
}

pub fn run(a: &GuiArgs) -> Result<()> {
    let modes = a
        .modes
        .split(',')
        .map(|m| Precision::parse(m.trim()))
        .collect::<Result<Vec<_>>>()?;
    let size = window_size(&a.size)?;
    let config = SessionConfig {
        modes,
        model: a.model.clone(),
        dataset: a
            .dataset
            .clone()
            .unwrap_or_else(|| dataset_for(&a.model, "default")),
        steps: a.steps,
        batch_size: a.batch_size,
        ..Default::default()
    };
    // The run builder's checks, before a window opens.
    config.validate_named(super::flag)?;
    run_native(NativeOptions {
        gpu: a.device.options()?,
        config,
        autostart: a.autostart,
        size: Some(size),
        program: std::env::args()
            .next()
            .unwrap_or_else(|| "webgpu-amp".into()),
    })
}

/// `--size`: the window's size in points.
const SIZE_RANGE: &str = "WIDTHxHEIGHT, each 200 to 8192";

fn window_size(text: &str) -> Result<[f32; 2]> {
    let side = |s: &str| s.parse::<u32>().ok().filter(|n| (200..=8192).contains(n));
    text.split_once('x')
        .and_then(|(w, h)| Some([side(w)? as f32, side(h)? as f32]))
        .ok_or_else(|| {
            webgpu_amp::Error::InvalidArgument(format!("--size must be {SIZE_RANGE}, got `{text}`"))
        })
}
