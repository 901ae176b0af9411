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
    /// Show the kernel table of this tuning file (`bench tune` writes them) for the adapter
    /// it was measured on (env WEBGPU_AMP_TUNING).
    #[arg(long)]
    tuning: Option<std::path::PathBuf>,
}

pub fn run(args: &InfoArgs) -> webgpu_amp::Result<()> {
    super::empty_values::no_empty_values(&[
        ("--backend", Some(&args.backend)),
        ("--f16-storage", args.f16_storage.as_deref()),
        ("--tensor-cores", args.tensor_cores.as_deref()),
        (
            "--tuning",
            args.tuning
                .as_deref()
                .map(|p| p.as_os_str().to_str().unwrap_or("?")),
        ),
    ])?;
    let backend = BackendChoice::parse(&args.backend)?;
    let f16_choice = match &args.f16_storage {
        Some(s) => F16StorageChoice::parse(s)?,
        None => webgpu_amp::GpuOptions::from_env()?.f16_storage,
    };
    let tensor_cores = match &args.tensor_cores {
        Some(s) => TensorCoreChoice::parse(s)?,
        None => webgpu_amp::GpuOptions::from_env()?.tensor_cores,
    };
    if args.tuning.is_some() {
        webgpu_amp::gpu::set_tuning_file(args.tuning.clone());
    }
    // A tuning file applies to the adapter it was measured on: the others keep their
    // built-in tables, and say why the file is not theirs.
    let mut tuning_notes = Vec::new();
    let adapters = pollster::block_on(enumerate_adapters(backend));
    let reports: Vec<AdapterReport> = adapters
        .iter()
        .map(|a| {
            let mut report = AdapterReport::with_choices(a, f16_choice, tensor_cores);
            let note = report
                .adapter
                .capabilities
                .apply_tuning_file(&a.get_info())
                .err()
                .map(|e| e.to_string());
            tuning_notes.push(note);
            report
        })
        .collect();
    if tuning_notes.iter().all(Option::is_some) && !tuning_notes.is_empty() {
        // No adapter takes the file: that is an error, not a note.
        let why = tuning_notes
            .into_iter()
            .flatten()
            .next()
            .unwrap_or_default();
        return Err(webgpu_amp::Error::InvalidArgument(why));
    }
    // The adapters that take the file run its tiles against the reference first, as every
    // command that loads it does before its first product.
    if webgpu_amp::gpu::tuning_file::requested_tuning_file().is_some() {
        for (adapter, note) in adapters.iter().zip(&tuning_notes) {
            if note.is_none() {
                let ctx = pollster::block_on(webgpu_amp::GpuContext::from_adapter(
                    adapter.clone(),
                    f16_choice,
                    tensor_cores,
                ))?;
                let training = webgpu_amp::ops::table_check::TableUse::training(&ctx);
                webgpu_amp::ops::table_check::ensure_checked(&ctx, &training)?;
            }
        }
    }
    if args.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&reports).expect("adapter reports serialise")
        )?;
        return Ok(());
    }
    if reports.is_empty() {
        outln!(
            "no adapters found for backend {}: {}",
            backend.name(),
            webgpu_amp::error::no_adapter_advice(backend.name())
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
        outln!("    convolutions     per precision mode (auto):")?;
        for m in &r.modes {
            outln!("      {:<9} {}", m.mode, m.conv)?;
        }
        outln!("    adapter class    {}", c.class.name())?;
        outln!("    kernel table     {}", c.kernels.source)?;
        let edge = c.tensor_cores.config().map(|t| t.edge);
        for line in c.kernels.table.describe(edge) {
            outln!("      {line}")?;
        }
        if let Some(Some(note)) = tuning_notes.get(i) {
            outln!("    note             {note}")?;
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
