//! `webgpu-amp bench matmul`: GFLOP/s of the matmul kernels per storage and size.
//!
//! Each measurement is the median over `--repeats` runs of one compute pass holding a batch
//! of identical n×n×n dispatches (batched so small sizes are not dominated by submit cost),
//! timed with GPU timestamp queries when the adapter has them, else by wall clock around
//! submit and a blocking sync.

use clap::{Args, Subcommand};
use webgpu_amp::ops::matmul::{MatmulKernel, MatmulOpts, flops, matmul_with};
use webgpu_amp::{F16StorageChoice, GpuContext, Storage, Tensor, TensorCoreChoice};

use super::DeviceArgs;
use super::bench_timer::Timer;
use super::numbers::number;
use super::out::outln;

/// `--sizes`: matrices of n×n; the adapter's buffer limits bound n further.
const SIZES_RANGE: &str = "1 to 65536";
const MAX_SIZE: usize = 1 << 16;
/// `--repeats`: timed runs per measurement.
const REPEATS_RANGE: &str = "1 to 10000";
const MAX_REPEATS: usize = 10_000;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: BenchWhat,
}

#[derive(Subcommand)]
enum BenchWhat {
    /// n×n×n matmul for each storage (f32, native f16 when available, packed f16, bf16).
    Matmul(MatmulBenchArgs),
    /// ms per training step, images/s and peak GPU memory per model and precision, and the
    /// GradScaler's overhead, as JSON lines.
    Step(super::bench_step::BenchStepArgs),
    /// Time the kernel table's candidates on this adapter (the preset models' GEMM and
    /// convolution shapes and 4096³) and write the fastest as a tuning file (`--tuning`).
    Tune(super::bench_tune::TuneArgs),
}

#[derive(Args)]
struct MatmulBenchArgs {
    /// Comma-separated sizes n (each run is n×n×n), each 1 to 65536 and within the
    /// adapter's buffer limits.
    #[arg(long, value_delimiter = ',', default_values_t = [256usize, 512, 1024],
          allow_negative_numbers = true, value_parser = number::<usize>(SIZES_RANGE))]
    sizes: Vec<usize>,
    /// Timed runs per measurement (the median is reported), 1 to 10000.
    #[arg(long, default_value_t = 5, allow_negative_numbers = true,
          value_parser = number::<usize>(REPEATS_RANGE))]
    repeats: usize,
    /// Kernel body: auto (the resolver's choice for the adapter: direct on CPU adapters,
    /// tiled on GPUs, coop for native f16 where tensor cores are used), tiled, direct or coop
    /// (tensor cores; native f16 only, where `info` says they are used).
    #[arg(long, default_value = "auto", value_parser = kernel_names())]
    kernel: String,
    /// Comma-separated storages to measure (f32, f16, f16packed, bf16); default: every one
    /// this adapter offers.
    #[arg(long, value_delimiter = ',')]
    storages: Vec<String>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    device: DeviceArgs,
}

/// `--kernel`'s choices: the matmul bodies as the library names them.
fn kernel_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(MatmulKernel::ALL.map(MatmulKernel::name))
}

#[derive(serde::Serialize)]
struct BenchResult {
    storage: &'static str,
    n: usize,
    kernel: &'static str,
    /// Median seconds of one n×n×n matmul.
    seconds: f64,
    gflops: f64,
    /// Dispatches per timed pass.
    batch: usize,
}

#[derive(serde::Serialize)]
struct BenchReport {
    adapter: String,
    backend: String,
    device_type: String,
    driver: String,
    timing: &'static str,
    repeats: usize,
    results: Vec<BenchResult>,
}

pub fn run(args: &BenchArgs) -> webgpu_amp::Result<()> {
    // SIGINT/SIGTERM: stop between measurements (a second signal ends it at once).
    webgpu_amp::interrupt::install();
    match &args.what {
        BenchWhat::Matmul(a) => bench_matmul(a),
        BenchWhat::Step(a) => super::bench_step::run(a),
        BenchWhat::Tune(a) => super::bench_tune::run(a),
    }
}

fn bench_matmul(args: &MatmulBenchArgs) -> webgpu_amp::Result<()> {
    if !(1..=MAX_REPEATS).contains(&args.repeats) {
        return Err(webgpu_amp::Error::InvalidArgument(format!(
            "--repeats must be {REPEATS_RANGE}, got {}",
            args.repeats
        )));
    }
    if let Some(bad) = args.sizes.iter().find(|&&n| !(1..=MAX_SIZE).contains(&n)) {
        return Err(webgpu_amp::Error::InvalidArgument(format!(
            "--sizes must be {SIZES_RANGE} each, got {bad}"
        )));
    }
    let mut options = args.device.options()?;
    let f16_choice = options.f16_storage;
    // The packed context runs f32, packed f16 and bf16 (never on tensor cores); a native one
    // adds native f16, with the tensor cores asked for.
    let tensor_cores = options.tensor_cores;
    options.f16_storage = F16StorageChoice::Packed;
    options.tensor_cores = TensorCoreChoice::Auto;
    let packed = GpuContext::new(&options)?;
    let native = if packed.caps.shader_f16 && f16_choice != F16StorageChoice::Packed {
        options.f16_storage = F16StorageChoice::Native;
        options.tensor_cores = tensor_cores;
        Some(GpuContext::new(&options)?)
    } else {
        None
    };
    let mut runs: Vec<(&GpuContext, Storage)> = vec![(&packed, Storage::F32)];
    if let Some(n) = &native {
        runs.push((n, Storage::F16));
    }
    if f16_choice != F16StorageChoice::Native {
        runs.push((&packed, Storage::F16Packed));
    }
    runs.push((&packed, Storage::BF16));
    let mut runs = super::bench_storages::keep(runs, &args.storages)?;
    // Before any matrix is made, on the host or the device: each must fit one binding.
    let limit = packed
        .caps
        .max_storage_buffer_binding_size
        .min(packed.caps.max_buffer_size);
    if let Some(&n) = args
        .sizes
        .iter()
        .find(|&&n| 4 * (n as u64) * (n as u64) > limit)
    {
        return Err(webgpu_amp::Error::InvalidArgument(format!(
            "--sizes {n}: an {n}×{n} f32 matrix is {} bytes, over this adapter's buffer limit \
             of {limit} bytes (max_storage_buffer_binding_size, max_buffer_size)",
            4 * (n as u64) * (n as u64)
        )));
    }

    let timing = if packed.caps.timestamp_query {
        "gpu-timestamps"
    } else {
        "wall-clock"
    };
    let kernel = MatmulKernel::parse(&args.kernel)?;
    let report = &packed.report;
    if !args.json {
        outln!(
            "matmul on {} ({}, {}, {}); timing: {timing}, median of {}",
            report.name,
            report.backend,
            report.device_type,
            report.driver,
            args.repeats
        )?;
        outln!(
            "{:<10} {:>6} {:>7} {:>6} {:>12} {:>10}",
            "storage",
            "n",
            "kernel",
            "batch",
            "ms/matmul",
            "GFLOP/s"
        )?;
    }
    let mut results = Vec::new();
    if kernel == MatmulKernel::Coop {
        // Tensor cores take native f16 inputs only.
        runs.retain(|&(_, storage)| storage == Storage::F16);
        if runs.is_empty() {
            return Err(webgpu_amp::Error::Unsupported(
                "--kernel coop needs native f16 storage (an adapter with shader-f16)".into(),
            ));
        }
    }
    let measured = |results: &Vec<BenchResult>| {
        format!(
            "bench matmul: interrupted after {} measurements",
            results.len()
        )
    };
    for &n in &args.sizes {
        for &(ctx, storage) in &runs {
            super::interrupted::check(|| measured(&results))?;
            let r = measure(ctx, storage, n, kernel, args.repeats)?;
            if !args.json {
                outln!(
                    "{:<10} {:>6} {:>7} {:>6} {:>12.3} {:>10.2}",
                    r.storage,
                    r.n,
                    r.kernel,
                    r.batch,
                    r.seconds * 1e3,
                    r.gflops
                )?;
            }
            results.push(r);
        }
    }
    if args.json {
        let out = BenchReport {
            adapter: report.name.clone(),
            backend: report.backend.clone(),
            device_type: report.device_type.clone(),
            driver: report.driver.clone(),
            timing,
            repeats: args.repeats,
            results,
        };
        outln!(
            "{}",
            serde_json::to_string_pretty(&out).expect("bench report serialises")
        )?;
    }
    Ok(())
}

fn measure(
    ctx: &GpuContext,
    storage: Storage,
    n: usize,
    kernel: MatmulKernel,
    repeats: usize,
) -> webgpu_amp::Result<BenchResult> {
    let a = Tensor::zeros_with_storage(ctx, &[n, n], storage);
    let b = Tensor::zeros_with_storage(ctx, &[n, n], storage);
    let c = Tensor::zeros_with_storage(ctx, &[n, n], storage);
    let values: Vec<f32> = (0..n * n).map(|i| ((i % 17) as f32 - 8.0) / 8.0).collect();
    a.write_f32(ctx, &values)?;
    b.write_f32(ctx, &values)?;
    let k = matmul_with(ctx, &a, &b, &c, MatmulOpts::default(), kernel)?;
    let work = flops(n, n, n);
    // Enough dispatches per pass for about 0.5 GFLOP of work, at most 64.
    let batch = ((5e8 / work).ceil() as usize).clamp(1, 64);

    let timer = Timer::new(ctx);
    timer.time(ctx, &[&k], batch)?; // warm-up: pipeline creation, first-touch, clocks
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        // A signal stops the measurement between passes (1000 repeats of a big size on a
        // CPU adapter take minutes).
        super::interrupted::check(|| {
            format!(
                "bench matmul: interrupted while measuring {} at n = {n}",
                storage.name()
            )
        })?;
        times.push(timer.time(ctx, &[&k], batch)? / batch as f64);
    }
    times.sort_by(f64::total_cmp);
    let seconds = times[times.len() / 2];
    Ok(BenchResult {
        storage: storage.name(),
        n,
        kernel: kernel.resolve(ctx, storage, storage).name(),
        seconds,
        gflops: work / seconds / 1e9,
        batch,
    })
}
