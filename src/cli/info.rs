//! `webgpu-amp info`: every adapter, what it can do, and which f16 storage training uses.

use clap::Args;
use webgpu_amp::gpu::{AdapterReport, BackendChoice, enumerate_adapters};

#[derive(Args)]
pub struct InfoArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Only this backend (vulkan, metal, dx12, gl, webgpu, auto).
    #[arg(long, default_value = "auto")]
    backend: String,
}

pub fn run(args: &InfoArgs) -> webgpu_amp::Result<()> {
    let backend = BackendChoice::parse(&args.backend)?;
    let reports: Vec<AdapterReport> = pollster::block_on(enumerate_adapters(backend))
        .iter()
        .map(AdapterReport::new)
        .collect();
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&reports).expect("adapter reports serialise")
        );
        return Ok(());
    }
    if reports.is_empty() {
        println!(
            "no adapters found for backend {} (on Debian: apt-get install -y mesa-vulkan-drivers)",
            backend.name()
        );
        return Ok(());
    }
    for (i, r) in reports.iter().enumerate() {
        let c = &r.capabilities;
        println!("[{i}] {}", r.name);
        println!("    backend          {}", r.backend);
        println!("    device type      {}", r.device_type);
        println!("    driver           {} {}", r.driver, r.driver_info);
        println!("    shader-f16       {}", yes_no(c.shader_f16));
        println!("    subgroups        {}", yes_no(c.subgroups));
        println!("    timestamp query  {}", yes_no(c.timestamp_query));
        println!(
            "    f16 storage      {:?} (what --f16-storage auto uses)",
            r.f16_storage
        );
        println!(
            "    limits           max buffer {} MiB, max storage binding {} MiB, {} storage buffers/stage, workgroup storage {} KiB, {} invocations/workgroup",
            c.max_buffer_size >> 20,
            c.max_storage_buffer_binding_size >> 20,
            c.max_storage_buffers_per_shader_stage,
            c.max_compute_workgroup_storage_size >> 10,
            c.max_compute_invocations_per_workgroup
        );
    }
    Ok(())
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}
