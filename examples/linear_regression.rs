//! The tutorial's AMP "Sample Model": `nn.Linear(10, 1)` on `x = randn(20, 10)`,
//! `y = randn(20, 1)`, SGD lr 0.1, MSE, three epochs under autocast (f16) with a GradScaler,
//! the whole data set as one batch per epoch.
//!
//! ```text
//! cargo run --example linear_regression [-- --epochs N --seed S --precision P]
//! ```
//!
//! The PyTorch original:
//!
//! ```python
//! for epoch in range(3):
//!     optimizer.zero_grad()
//!     with autocast():
//!         output = model(x)
//!         loss = loss_fn(output, y)
//!     scaler.scale(loss).backward()
//!     scaler.step(optimizer)
//!     scaler.update()
//!     print(f"Epoch {epoch+1}, Loss: {loss.item():.4f}")
//! ```
//!
//! The data come from the crate's seeded generator, not torch's, so the numbers differ from
//! a PyTorch run; the procedure is the same.

use webgpu_amp::amp::policy::Precision;
use webgpu_amp::data::{Inputs, Labels, synthetic};
use webgpu_amp::nn::LossKind;
use webgpu_amp::nn::preset;
use webgpu_amp::optim::OptimizerConfig;
use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};
use webgpu_amp::{Error, GpuContext, GpuOptions, Result};

struct Args {
    epochs: u64,
    seed: u64,
    precision: Precision,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        epochs: 3,
        seed: 0,
        precision: Precision::AmpF16,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| Error::InvalidArgument(format!("{flag} needs a value")))
        };
        let bad = |e: std::num::ParseIntError| Error::InvalidArgument(format!("{flag}: {e}"));
        match flag.as_str() {
            "--epochs" => args.epochs = value()?.parse().map_err(bad)?,
            "--seed" => args.seed = value()?.parse().map_err(bad)?,
            "--precision" => args.precision = Precision::parse(&value()?)?,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown argument `{other}` (expected --epochs N, --seed S, --precision P)"
                )));
            }
        }
    }
    Ok(args)
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args = parse_args()?;
    // x = torch.randn(20, 10); y = torch.randn(20, 1)
    let data = synthetic::regression(20, 10, 1, args.seed)?;
    let (Inputs::Features(x), Labels::Targets { values: y, .. }) = (&data.x, &data.y) else {
        unreachable!("synthetic data are f32 features with regression targets")
    };

    // model = SimpleModel() (self.linear = nn.Linear(10, 1))
    let spec = preset("linear", &data.sample_shape, data.output_dim())?;
    let init = spec.init_params(args.seed);

    let ctx = GpuContext::new(&GpuOptions::from_env()?)?;
    println!(
        "device: {} | precision: {} | model: Linear(10, 1) | 20 samples",
        ctx.report.name, args.precision
    );

    // optimizer = optim.SGD(model.parameters(), lr=0.1); loss_fn = nn.MSELoss();
    // scaler = GradScaler() (on by default for amp-f16, as PyTorch recommends).
    let config = StepConfig::new(args.precision, LossKind::Mse, OptimizerConfig::sgd(0.1));
    let mut trainer = Trainer::new(&ctx, spec, config, data.output_dim(), &init)?;

    for epoch in 0..args.epochs {
        // zero_grad, autocast forward, scale(loss).backward(), scaler.step, scaler.update:
        // one planned submit.
        trainer.train_batch(&ctx, data.n, x, BatchTargets::Values(y))?;
        // loss.item() waits for the step, as here.
        for stats in trainer.finish(&ctx)? {
            let skipped = if stats.skipped {
                " (step skipped: inf/NaN gradients)"
            } else {
                ""
            };
            println!("Epoch {}, Loss: {:.4}{skipped}", epoch + 1, stats.loss);
        }
    }
    Ok(())
}
