//! `webgpu-amp kernels` (hidden): the kernels a training step (or a `bench matmul` GEMM)
//! plans on this adapter, through its kernel table and bodies, each entry point written as
//! SPIR-V the way wgpu 30's Vulkan backend writes it, with one JSON line per entry point.
//! `scripts/kernel-report.sh` compiles them with real GPU compilers (Mesa's RADV and NVK on
//! their noop DRM shims) and reports registers, spills, occupancy and the main loop's mix.
//! Labels are exact: the shader, entry point and every constant of the variant.

use std::path::{Path, PathBuf};

use clap::Args;
use naga::back::spv;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::gpu::CompiledEntry;
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, matmul_with};
use webgpu_amp::train::memory::step_kernels;
use webgpu_amp::{Error, GpuContext, Result, Storage, Tensor};

use super::out::outln;
use super::run_args::RunArgs;

#[derive(Args, Debug)]
pub struct KernelsArgs {
    /// f32, amp-f16, amp-bf16 or f16 (a training step's kernels).
    #[arg(long, default_value = "amp-f16")]
    precision: String,
    #[command(flatten)]
    common: RunArgs,
    /// Instead of a training step: square GEMMs of these sizes as `bench matmul` runs them
    /// (f32 on the SIMT body, native f16 on the body this adapter picks), e.g. 1024,4096.
    #[arg(long, value_delimiter = ',')]
    gemm: Vec<u32>,
    /// Folder for the SPIR-V files (one per entry point).
    #[arg(long)]
    spirv: PathBuf,
}

pub fn run(args: &KernelsArgs) -> Result<()> {
    let entries = if args.gemm.is_empty() {
        step(args)?
    } else {
        gemms(args)?
    };
    std::fs::create_dir_all(&args.spirv).map_err(|e| io_error(&args.spirv, e))?;
    for (i, e) in entries.iter().enumerate() {
        let path = args.spirv.join(format!("{i:04}.{}.spv", e.entry));
        let words = spirv(e)?;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(&path, bytes).map_err(|err| io_error(&path, err))?;
        let line = serde_json::json!({
            "index": i, "spv": path, "shader": e.variant.shader, "entry": e.entry,
            "trusted": e.trusted, "label": e.variant.label(),
        });
        outln!("{line}")?;
    }
    Ok(())
}

fn io_error(path: &Path, e: std::io::Error) -> Error {
    Error::InvalidArgument(format!("{}: {e}", path.display()))
}

/// The kernels one training step plans (the flags are `plan`'s).
fn step(args: &KernelsArgs) -> Result<Vec<CompiledEntry>> {
    let precision = Precision::parse(&args.precision)?;
    let (inputs, ctx, cfg) = args.common.planned(precision)?;
    let target_dim = inputs.split.train.output_dim();
    step_kernels(&ctx, inputs.spec, cfg.step, target_dim, cfg.batch_size)
}

/// `bench matmul`'s products of `n`×`n` matrices, planned on a dry twin.
fn gemms(args: &KernelsArgs) -> Result<Vec<CompiledEntry>> {
    let ctx = GpuContext::new(&args.common.device.options()?)?.dry_twin();
    let mut storages = vec![Storage::F32];
    if ctx.caps.shader_f16 {
        storages.push(Storage::F16);
    }
    for &n in &args.gemm {
        let n = n as usize;
        for &storage in &storages {
            let t = || Tensor::zeros_with_storage(&ctx, &[n, n], storage);
            let (a, b, c) = (t(), t(), t());
            matmul_with(&ctx, &a, &b, &c, MatmulOpts::default(), MatmulKernel::Auto)?;
        }
    }
    Ok(ctx.compiled_entries())
}

/// One entry point as wgpu-hal 30's Vulkan backend writes it on a Vulkan 1.3 device with
/// robustBufferAccess2, robust image access and native workgroup zero-initialisation (RADV,
/// NVK): SPIR-V 1.6, index bounds clamped, loop bounding and integer-division checks on; a
/// trusted kernel gets `ShaderRuntimeChecks::unchecked()` (wgpu-hal's vulkan/device.rs and
/// vulkan/adapter.rs). Pipelines are made with ALLOW_VARYING_SUBGROUP_SIZE, as wgpu makes
/// them where subgroups are enabled (the report's compiler step).
fn spirv(e: &CompiledEntry) -> Result<Vec<u32>> {
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let label = e.variant.label();
    let source = e.variant.specialise()?;
    let (module, info) = webgpu_amp::shader::validate(&label, &source)?;
    let stage = naga::ShaderStage::Compute;
    let fail = |what: &str, err: String| Error::Shader {
        name: format!("{label}::{}", e.entry),
        message: format!("{what}: {err}"),
    };
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((stage, &e.entry)),
        &Default::default(),
    )
    .map_err(|err| fail("overrides", err.to_string()))?;
    let mut opts = spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::LABEL_VARYINGS | spv::WriterFlags::FORCE_POINT_SIZE,
        capabilities: None,
        fake_missing_bindings: true,
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::Native,
        ..Default::default()
    };
    opts.bounds_check_policies = BoundsCheckPolicies {
        index: BoundsCheckPolicy::Restrict,
        buffer: BoundsCheckPolicy::Unchecked,
        image_load: BoundsCheckPolicy::Unchecked,
        binding_array: BoundsCheckPolicy::Unchecked,
    };
    opts.force_loop_bounding = true;
    opts.emit_int_div_checks = true;
    if e.trusted {
        opts.bounds_check_policies.index = BoundsCheckPolicy::Unchecked;
        opts.force_loop_bounding = false;
        opts.ray_query_initialization_tracking = false;
        opts.emit_int_div_checks = false;
    }
    let pipeline = spv::PipelineOptions {
        entry_point: e.entry.clone(),
        shader_stage: stage,
    };
    spv::write_vec(&module, &info, &opts, Some(&pipeline))
        .map_err(|err| fail("SPIR-V", err.to_string()))
}
