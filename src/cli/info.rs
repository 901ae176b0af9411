//! `webgpu-amp info`: every adapter, what it can do, and which precision modes run there with
//! which f16 storage, so a user knows before training.

use clap::Args;
use webgpu_amp::amp::AdapterReport;
use webgpu_amp::gpu::{BackendChoice, F16StorageChoice, TensorCoreChoice, enumerate_adapters};

use super::out::outln;

#[derive(Args)]
pub struct InfoArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Only this backend (vulkan, metal, dx12, gl, webgpu, auto).
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Show the precision modes as training would run them with this f16 storage: auto, native
    /// or packed (env WEBGPU_AMP_F16_STORAGE).
    #[arg(long = "f16-storage")]
    f16_storage: Option<String>,
    /// Show tensor cores as training would use them with this setting: auto, on, off, on:8x8
    /// or on:16x16 (env WEBGPU_AMP_TENSOR_CORES).
    #[arg(long = "tensor-cores")]
    tensor_cores: Option<String>,
}

pub fn run(args: &InfoArgs) -> webgpu_amp::Result<()> {
    let backend = BackendChoice::parse(&args.backend)?;
    let f16_choice = match &args.f16_storage {
        Some(s) => F16StorageChoice::parse(s)?,
        None => webgpu_amp::GpuOptions::from_env()?.f16_storage,
    };
    let tensor_cores = match &args.tensor_cores {
        Some(s) => TensorCoreChoice::parse(s)?,
        None => webgpu_amp::GpuOptions::from_env()?.tensor_cores,
    };
    let reports: Vec<AdapterReport> = pollster::block_on(enumerate_adapters(backend))
        .iter()
        .map(|a| AdapterReport::with_choices(a, f16_choice, tensor_cores))
        .collect();
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&reports).expect("adapter reports serialise")
        )?;
        return Ok(());
    }
    if reports.is_empty() {
        outln!(
            "no adapters found for backend {} (on Debian: apt-get install -y mesa-vulkan-drivers)",
            backend.name()
        )?;
        return Ok(());
    }
    for (i, r) in reports.iter().enumerate() {
        let a = &r.adapter;
        let c = &a.capabilities;
        outln!("[{i}] {}", a.name)?;
        outln!("    backend          {}", a.backend)?;
        outln!("    device type      {}", a.device_type)?;
        outln!("    driver           {} {}", a.driver, a.driver_info)?;
        outln!("    shader-f16       {}", yes_no(c.shader_f16))?;
        outln!("    subgroups        {}", yes_no(c.subgroups))?;
        outln!("    timestamp query  {}", yes_no(c.timestamp_query))?;
        outln!(
            "    tensor cores     {} (--tensor-cores {})",
            c.tensor_cores.describe(),
            tensor_cores.name()
        )?;
        outln!(
            "    f16 storage      {:?} (what --f16-storage auto uses)",
            a.f16_storage
        )?;
        outln!(
            "    precision modes  with --f16-storage {}:",
            r.f16_storage_requested.name()
        )?;
        for m in &r.modes {
            outln!(
                "      {:<9} {:<8} storage {:<10} {}",
                m.mode,
                if m.runs { "runs" } else { "FAILS" },
                m.storage,
                m.detail
            )?;
        }
        outln!("    matmul paths     per precision mode (auto):")?;
        for m in &r.modes {
            outln!("      {:<9} {}", m.mode, m.matmul)?;
        }
        outln!("    attention        fused, per precision mode (auto):")?;
        for m in &r.modes {
            outln!("      {:<9} {}", m.mode, m.attention)?;
        }
        outln!(
            "    limits           max buffer {} MiB, max storage binding {} MiB, {} storage buffers/stage, workgroup storage {} KiB, {} invocations/workgroup",
            c.max_buffer_size >> 20,
            c.max_storage_buffer_binding_size >> 20,
            c.max_storage_buffers_per_shader_stage,
            c.max_compute_workgroup_storage_size >> 10,
            c.max_compute_invocations_per_workgroup
        )?;
        for note in &a.notes {
            outln!("    note             {note}")?;
        }
    }
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}
