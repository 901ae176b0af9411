//! The CNN ops on given values, written out for comparison with PyTorch
//! (`scripts/cnn_ops_compat.py` runs it): BatchNorm2d (three training batches updating the
//! running statistics, the last one's backward, then an eval forward), with momentum 0.1 and
//! `None` and with a fused ReLU or GELU; AvgPool2d(2), AdaptiveAvgPool2d((3, 2)) and
//! AdaptiveAvgPool2d(1) forward and backward; cross-entropy with label smoothing.
//!
//! ```sh
//! cargo run --example cnn_ops_values -- IN.safetensors OUT.safetensors
//! ```
//!
//! `IN.safetensors` holds f32 tensors: `bn_x0`, `bn_x1`, `bn_x2` and `bn_dy` `[N, C, H, W]`,
//! `bn_w` and `bn_b` `[C]`, `bn_xe` `[M, C, H, W]`; `pool_x` `[N, C, H, W]` and `pool_dy_NAME`
//! for `NAME` in `window`, `adaptive`, `global`; `ce_logits` `[N, K]`, `ce_labels` `[N]`
//! (class indices as f32) and `ce_eps` `[1]`. For each dtype (`f32`, `f16` in the context's f16
//! storage, `bf16`) the activations are uploaded rounded to it (BatchNorm's affine parameters
//! stay f32, as under autocast) and every output is written widened to f32 as `DTYPE.NAME`.

use std::collections::HashMap;
use std::process::ExitCode;

use safetensors::tensor::{Dtype, TensorView};
use webgpu_amp::ops::avgpool::{self, AvgPool};
use webgpu_amp::ops::batchnorm::{Activation, Affine, BatchNorm, RunningStats};
use webgpu_amp::ops::loss;
use webgpu_amp::{DType, Error, GpuContext, GpuOptions, Result, Tensor};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, out] = args.as_slice() else {
        eprintln!("usage: cnn_ops_values IN.safetensors OUT.safetensors");
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

/// Every f32 tensor of a safetensors file: values and shape.
type Inputs = HashMap<String, (Vec<f32>, Vec<usize>)>;

fn read(path: &str) -> Result<Inputs> {
    let bad = |e: &dyn std::fmt::Display| Error::Checkpoint(format!("{path}: {e}"));
    let bytes = std::fs::read(path).map_err(|e| bad(&e))?;
    let file = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| bad(&e))?;
    let mut inputs = Inputs::new();
    for (name, view) in file.tensors() {
        if view.dtype() != Dtype::F32 {
            return Err(bad(&format!("`{name}` must be f32")));
        }
        let values = bytemuck::pod_collect_to_vec(view.data());
        inputs.insert(name, (values, view.shape().to_vec()));
    }
    Ok(inputs)
}

/// What one dtype's run writes: `(name, values, shape)`.
struct Outputs {
    dtype: DType,
    values: Vec<(String, Vec<f32>, Vec<usize>)>,
}

impl Outputs {
    fn put(&mut self, ctx: &GpuContext, name: &str, t: &Tensor) -> Result<()> {
        let name = format!("{}.{name}", self.dtype);
        self.values
            .push((name, t.read_f32(ctx)?, t.shape().to_vec()));
        Ok(())
    }
}

fn run(input: &str, out: &str) -> Result<()> {
    let inputs = read(input)?;
    let get = |name: &str| {
        inputs
            .get(name)
            .ok_or_else(|| Error::Checkpoint(format!("{input}: no `{name}`")))
    };
    let ctx = GpuContext::new(&GpuOptions::from_env()?)?;
    let mut written = Vec::new();
    for dtype in DType::ALL {
        let mut o = Outputs {
            dtype,
            values: Vec::new(),
        };
        let upload = |name: &str, dt: DType| -> Result<Tensor> {
            let (values, shape) = get(name)?;
            Tensor::from_f32(&ctx, values, shape, dt)
        };
        // BatchNorm2d: three batches, the last with its backward, then eval.
        let cases = [
            ("m0.1", Some(0.1), Activation::None),
            ("none", None, Activation::None),
            ("relu", Some(0.1), Activation::Relu),
            ("gelu", Some(0.1), Activation::Gelu),
        ];
        for (case, momentum, activation) in cases {
            let bn = BatchNorm {
                momentum,
                activation,
                ..BatchNorm::default()
            };
            let (w, b) = (upload("bn_w", DType::F32)?, upload("bn_b", DType::F32)?);
            let affine = Affine {
                weight: Some(&w),
                bias: Some(&b),
            };
            let c = w.numel();
            let running = RunningStats::new(&ctx, "running statistics", c)?;
            let saved = Tensor::zeros(&ctx, &[2 * c], DType::F32);
            let (dw, db) = (
                Tensor::zeros(&ctx, &[c], DType::F32),
                Tensor::zeros(&ctx, &[c], DType::F32),
            );
            for batch in ["bn_x0", "bn_x1", "bn_x2"] {
                let x = upload(batch, dtype)?;
                let y = Tensor::zeros(&ctx, x.shape(), dtype);
                let mut kernels =
                    bn.train_forward(&ctx, (&x, &y), affine, &saved, Some(&running))?;
                if batch == "bn_x2" {
                    let dy = upload("bn_dy", dtype)?;
                    let dx = Tensor::zeros(&ctx, x.shape(), dtype);
                    kernels.extend(bn.backward(
                        &ctx,
                        (&x, &dy, &dx),
                        affine,
                        &saved,
                        (Some(&dw), Some(&db)),
                    )?);
                    ctx.run(&kernels.iter().collect::<Vec<_>>());
                    o.put(&ctx, &format!("bn.{case}.y"), &y)?;
                    o.put(&ctx, &format!("bn.{case}.dx"), &dx)?;
                } else {
                    ctx.run(&kernels.iter().collect::<Vec<_>>());
                }
            }
            o.put(&ctx, &format!("bn.{case}.dweight"), &dw)?;
            o.put(&ctx, &format!("bn.{case}.dbias"), &db)?;
            let (mean, var, count) = running.read(&ctx)?;
            for (what, values) in [
                ("running_mean", mean),
                ("running_var", var),
                ("count", vec![count as f32]),
            ] {
                let shape = vec![values.len()];
                o.values
                    .push((format!("{dtype}.bn.{case}.{what}"), values, shape));
            }
            let xe = upload("bn_xe", dtype)?;
            let ye = Tensor::zeros(&ctx, xe.shape(), dtype);
            ctx.run(&[&bn.eval_forward(&ctx, (&xe, &ye), affine, &running)?]);
            o.put(&ctx, &format!("bn.{case}.eval_y"), &ye)?;
        }
        // Average pooling.
        let x = upload("pool_x", dtype)?;
        let &[n, c, h, w] = x.shape() else {
            return Err(Error::Checkpoint("pool_x must be [N, C, H, W]".into()));
        };
        for (name, pool) in [
            ("window", AvgPool::window(2)),
            (
                "adaptive",
                AvgPool::Adaptive {
                    height: 3,
                    width: 2,
                },
            ),
            (
                "global",
                AvgPool::Adaptive {
                    height: 1,
                    width: 1,
                },
            ),
        ] {
            let (ho, wo) = pool.output_hw(h, w)?;
            let y = Tensor::zeros(&ctx, &[n, c, ho, wo], dtype);
            let dy = upload(&format!("pool_dy_{name}"), dtype)?;
            let dx = Tensor::zeros(&ctx, x.shape(), dtype);
            let kernels = [
                avgpool::forward(&ctx, &x, &y, pool)?,
                avgpool::backward(&ctx, &dy, &dx, pool)?,
            ];
            ctx.run(&kernels.iter().collect::<Vec<_>>());
            o.put(&ctx, &format!("pool.{name}.y"), &y)?;
            o.put(&ctx, &format!("pool.{name}.dx"), &dx)?;
        }
        // Cross-entropy with label smoothing: the loss, and its gradient seeded with 1.
        let logits = upload("ce_logits", dtype)?;
        let label_values: Vec<u32> = get("ce_labels")?.0.iter().map(|&l| l as u32).collect();
        let labels = ctx.alloc_storage("labels", 4 * label_values.len() as u64);
        ctx.write_buffer(&labels, 0, bytemuck::cast_slice(&label_values));
        let seed = ctx.alloc_storage("seed", 4);
        ctx.write_buffer(&seed, 0, bytemuck::bytes_of(&1f32));
        let eps = get("ce_eps")?.0[0];
        let (loss_out, grad) = (
            Tensor::zeros(&ctx, &[1], DType::F32),
            Tensor::zeros(&ctx, logits.shape(), dtype),
        );
        let kernels = loss::cross_entropy_smoothed(
            &ctx,
            &logits,
            &labels,
            &loss_out,
            Some((&grad, &seed, 1.0)),
            eps,
        )?;
        ctx.run(&kernels.iter().collect::<Vec<_>>());
        o.put(&ctx, "ce.loss", &loss_out)?;
        o.put(&ctx, "ce.grad", &grad)?;
        written.extend(o.values);
    }
    ctx.check()?;
    let views = written
        .iter()
        .map(|(name, values, shape)| {
            TensorView::new(Dtype::F32, shape.clone(), bytemuck::cast_slice(values))
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::Checkpoint(format!("{name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let metadata = HashMap::from([
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
