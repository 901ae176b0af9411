//! `webgpu-amp plan`: a training step's GPU memory without running it (or allocating it):
//! the step `train` would run with the same flags is planned on a dry twin of the device
//! (`webgpu_amp::train::memory`), and its bytes are reported by kind (weights, master
//! weights, gradients, optimizer state, activations, workspace) with the largest buffer and
//! the largest storage binding against the adapter's limits and the browser's defaults.

use clap::Args;
use webgpu_amp::Result;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::gpu::human_bytes;
use webgpu_amp::train::memory::{MemoryPlan, plan_step};

use super::out::outln;
use super::run_args::RunArgs;

/// WebGPU's default `maxStorageBufferBindingSize` (what a browser page gets unless it asks
/// for more): 128 MiB.
pub const BROWSER_BINDING_LIMIT: u64 = 128 << 20;
/// WebGPU's default `maxBufferSize`: 256 MiB. A page that asks for its adapter's limits, as
/// ours does, may get more; this is what every browser must give.
pub const BROWSER_BUFFER_LIMIT: u64 = 256 << 20;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// f32, amp-f16, amp-bf16 or f16.
    #[arg(long, default_value = "amp-f16")]
    precision: String,
    #[command(flatten)]
    common: RunArgs,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &PlanArgs) -> Result<()> {
    let precision = Precision::parse(&args.precision)?;
    let (inputs, ctx, cfg) = args.common.planned(precision)?;
    // The plan runs nothing: a loaded table's tiles are checked here, as a run would first.
    let training = webgpu_amp::ops::table_check::TableUse::training(&ctx);
    webgpu_amp::ops::table_check::ensure_checked(&ctx, &training)?;
    let what = args
        .common
        .model
        .clone()
        .unwrap_or_else(|| inputs.spec.name.clone());
    // How its attention runs, for a model that has attention (a language model's family).
    let attention = inputs.spec.tokens().map(|_| inputs.spec.attention.name());
    let target_dim = inputs.split.train.output_dim();
    // Frozen parameters count apart (`--freeze`, `trainable: false`, a preset's own).
    let (parameters, frozen) = (inputs.spec.num_parameters(), inputs.spec.num_frozen());
    let plan = plan_step(&ctx, inputs.spec, cfg.step, target_dim, cfg.batch_size)?;
    if args.json {
        let line = serde_json::json!({
            "kind": "plan", "adapter": ctx.report.name, "model": what,
            "precision": precision.name(), "attention": attention, "plan": plan,
            "parameters": parameters, "trainable_parameters": parameters - frozen,
            "browser_binding_limit": BROWSER_BINDING_LIMIT,
            "browser_buffer_limit": BROWSER_BUFFER_LIMIT,
        });
        outln!("{line}")?;
        return Ok(());
    }
    let attention = attention.map_or(String::new(), |a| format!(", {a} attention"));
    outln!(
        "plan: {what}, batch {}, {}{attention}, on {} (nothing allocated)",
        plan.batch,
        precision.name(),
        ctx.report.name
    )?;
    outln!(
        "parameters: {parameters} ({} trainable, {frozen} frozen)",
        parameters - frozen
    )?;
    print_table(&plan)
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn print_table(plan: &MemoryPlan) -> Result<()> {
    for (kind, bytes) in &plan.kinds {
        outln!("  {kind:<18} {:>12}", mb(*bytes))?;
    }
    outln!(
        "  {:<18} {:>12}  ({} bytes)",
        "peak",
        mb(plan.peak_bytes),
        plan.peak_bytes
    )?;
    outln!("largest buffers:")?;
    for (label, bytes) in &plan.largest_buffers {
        outln!("  {:>12}  {label}", mb(*bytes))?;
    }
    let verdict = |bytes: u64, limit: u64| if bytes <= limit { "fits" } else { "EXCEEDS" };
    // The flat parameter buffers are bound in pieces: a buffer may pass the binding limit
    // but not the buffer size limit.
    if let Some((label, bytes)) = plan.largest_buffers.first() {
        outln!("largest buffer: `{label}`, {}", mb(*bytes))?;
        outln!(
            "  adapter's max_buffer_size {}: {}",
            human_bytes(plan.max_buffer_size),
            verdict(*bytes, plan.max_buffer_size)
        )?;
        outln!(
            "  browser default (256 MiB): {}",
            verdict(*bytes, BROWSER_BUFFER_LIMIT)
        )?;
    }
    let Some(b) = &plan.largest_binding else {
        return Ok(());
    };
    outln!(
        "largest binding: `{}`, {} (`{}` of kernel {})",
        b.buffer,
        mb(b.bytes),
        b.name,
        b.kernel
    )?;
    outln!(
        "  adapter's max_storage_buffer_binding_size {}: {}",
        human_bytes(plan.max_storage_buffer_binding_size),
        verdict(b.bytes, plan.max_storage_buffer_binding_size)
    )?;
    outln!(
        "  browser default (128 MiB): {}",
        verdict(b.bytes, BROWSER_BINDING_LIMIT)
    )?;
    Ok(())
}
