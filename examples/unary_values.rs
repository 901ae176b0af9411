//! Every unary op of the table (`webgpu_amp::ops::unary::UNARY_OPS`), forward and backward,
//! on given values, written out for comparison with PyTorch (`scripts/activation_compat.py`
//! runs it and builds each op's `torch.nn` module from its repr).
//!
//! ```sh
//! cargo run --example unary_values -- IN.safetensors OUT.safetensors
//! ```
//!
//! `IN.safetensors` holds `x` and `dy`, f32 vectors of one length. For each op and each dtype
//! (`f32`, `f16` in the context's f16 storage, `bf16`) the example uploads both rounded to
//! the dtype, runs the op's forward (`y = f(x)`) and backward (`dx = dy · f'(x)`) kernels into
//! tensors of that dtype, and writes them widened to f32 as `NAME.DTYPE.y` and `NAME.DTYPE.dx`.
//! The metadata holds `ops` (a JSON list of `[name, repr]`), `adapter` and `f16_storage`.

use std::collections::HashMap;
use std::process::ExitCode;

use safetensors::tensor::{Dtype, TensorView};
use webgpu_amp::ops::unary::{self, UNARY_OPS};
use webgpu_amp::{DType, Error, GpuContext, GpuOptions, Result, Tensor};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, out] = args.as_slice() else {
        eprintln!("usage: unary_values IN.safetensors OUT.safetensors");
        return ExitCode::from(2);
    };
    match run(input, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The f32 vector `name` of a safetensors file.
fn vector(file: &safetensors::SafeTensors<'_>, name: &str) -> Result<Vec<f32>> {
    let view = file
        .tensor(name)
        .map_err(|e| Error::Checkpoint(format!("`{name}`: {e}")))?;
    if view.dtype() != Dtype::F32 || view.shape().len() != 1 {
        return Err(Error::Checkpoint(format!("`{name}` must be an f32 vector")));
    }
    Ok(view
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn run(input: &str, out: &str) -> Result<()> {
    let bytes = std::fs::read(input).map_err(|e| Error::Checkpoint(format!("{input}: {e}")))?;
    let file = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| Error::Checkpoint(format!("{input}: {e}")))?;
    let (x, dy) = (vector(&file, "x")?, vector(&file, "dy")?);
    let n = x.len();
    let ctx = GpuContext::new(&GpuOptions::from_env()?)?;
    let mut results: Vec<(String, Vec<f32>)> = Vec::new();
    for op in UNARY_OPS {
        for dtype in DType::ALL {
            let xt = Tensor::from_f32(&ctx, &x, &[n], dtype)?;
            let dyt = Tensor::from_f32(&ctx, &dy, &[n], dtype)?;
            let y = Tensor::zeros(&ctx, &[n], dtype);
            let dx = Tensor::zeros(&ctx, &[n], dtype);
            let forward = unary::forward(&ctx, op, &xt, &y)?;
            let backward = unary::backward(&ctx, op, &xt, &dyt, &dx)?;
            ctx.run(&[&forward, &backward]);
            results.push((format!("{}.{dtype}.y", op.name), y.read_f32(&ctx)?));
            results.push((format!("{}.{dtype}.dx", op.name), dx.read_f32(&ctx)?));
        }
    }
    ctx.check()?;
    let views = results
        .iter()
        .map(|(name, values)| {
            TensorView::new(Dtype::F32, vec![n], bytemuck::cast_slice(values))
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::Checkpoint(format!("{name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let ops: Vec<[&str; 2]> = UNARY_OPS.iter().map(|op| [op.name, op.repr]).collect();
    let metadata = HashMap::from([
        ("ops".to_string(), serde_json::to_string(&ops).unwrap()),
        ("adapter".to_string(), ctx.report.name.clone()),
        (
            "f16_storage".to_string(),
            ctx.storage_for(DType::F16).name().to_string(),
        ),
    ]);
    let bytes = safetensors::serialize(views, Some(metadata))
        .map_err(|e| Error::Checkpoint(format!("{out}: {e}")))?;
    std::fs::write(out, bytes).map_err(|e| Error::Checkpoint(format!("{out}: {e}")))
}
