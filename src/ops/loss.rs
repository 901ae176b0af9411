//! Fused losses (`shaders/loss.wgsl`), forward and backward together, computed in f32 from
//! inputs of any storage: softmax cross-entropy (with PyTorch's label smoothing), mean squared
//! error, and the accuracy count.
//!
//! The loss value is deterministic: per-row (cross-entropy) or per-workgroup (mse) partial
//! losses go to a scratch buffer and one workgroup reduces them in a fixed tree order, so the
//! same inputs give a bit-identical loss on every run.
//!
//! The gradient is seeded: `grad = dloss/dinput · multiplier · seed[0]`, with `seed` a raw
//! buffer whose first word is an f32 (the GradScaler's current scale, or a buffer holding 1.0)
//! and `multiplier` e.g. 1 / accumulation steps. The seed is applied last, so a power-of-two
//! scale multiplies the gradient exactly, and an f16 gradient that overflows becomes ±inf
//! (how the GradScaler sees overflow).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{ShaderDecl, each_like_or_f32};
use crate::tensor::Tensor;

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "loss",
    source: include_str!("../../shaders/loss.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // Every storage combination these kernels may run with: inputs (`logits`, `pred`) in any
    // storage, the gradient in the input's storage or f32, `wanted` (the target) and `loss` in f32.
    variants: |shader| each_like_or_f32(shader, &["logits", "pred"], &["grad"]),
};
const WG: u32 = 256;
const ROW_WG: u32 = 64;

crate::wgsl_struct! {
    struct Params {
        /// cross-entropy / accuracy: N
        rows: u32,
        /// cross-entropy / accuracy: C
        classes: u32,
        /// mse: elements; mean_partials: number of partials
        n: u32,
        /// mse: workgroups of the first pass (1: it writes the loss directly)
        groups: u32,
        /// gradient factor before the seed: multiplier / N (ce), 2 multiplier / n (mse)
        grad_scale: f32,
        /// factor of the summed partials: 1 / N (ce), 1 / n (mse)
        loss_scale: f32,
        /// cross-entropy: PyTorch's label_smoothing, in [0, 1]
        label_smoothing: f32,
        _pad1: u32,
    }
}

/// The gradient output of a loss: the gradient tensor (any storage), the seed buffer
/// (`seed[0]` is an f32 factor, the GradScaler's scale) and a multiplier.
pub type GradOut<'a> = (&'a Tensor, &'a Arc<GpuBuffer>, f32);

fn check_loss_out(op: &'static str, loss_out: &Tensor) -> Result<()> {
    if loss_out.numel() != 1 {
        return Err(Error::shape(
            op,
            format!("loss_out must hold one element, not {:?}", loss_out.shape()),
        ));
    }
    Ok(())
}

fn check_seed(op: &'static str, seed: &GpuBuffer) -> Result<()> {
    if seed.size() < 4 {
        return Err(Error::shape(
            op,
            "the seed buffer must hold at least one f32",
        ));
    }
    Ok(())
}

/// `[N, C]` of a logits tensor and a check that `labels` holds `N` u32 values.
fn rows_classes(op: &'static str, logits: &Tensor, labels: &GpuBuffer) -> Result<(u32, u32)> {
    let &[rows, classes] = logits.shape() else {
        return Err(Error::shape(
            op,
            format!("logits must be [N, C], not {:?}", logits.shape()),
        ));
    };
    if classes == 0 {
        return Err(Error::shape(op, "logits have no classes (C = 0)"));
    }
    if u32::try_from(rows * classes).is_err() {
        return Err(Error::shape(
            op,
            format!("{rows}×{classes} logits is over 2^32"),
        ));
    }
    if labels.size() < 4 * rows as u64 {
        return Err(Error::shape(
            op,
            format!(
                "labels buffer holds {} bytes, fewer than {rows} u32 labels",
                labels.size()
            ),
        ));
    }
    Ok((rows as u32, classes as u32))
}

/// Fused softmax + cross-entropy, mean over the batch, computed in f32 from `logits` [N, C]
/// of any storage with a max-subtracted log-sum-exp. `labels`: N u32 class indices in a raw
/// buffer. `loss_out` (one element, normally f32) receives the mean loss.
///
/// With `grad = Some((grad_logits, seed, multiplier))` it also writes
/// `grad_logits = (softmax − onehot) / N · multiplier · seed[0]` in `grad_logits`' storage.
///
/// A label outside `[0, C)` is never used as an index (it is clamped); instead that row's loss
/// and gradient are NaN, so the mean loss is NaN and the GradScaler skips the step. A NaN
/// logit makes its row's loss and gradient NaN too (PyTorch propagates it the same way).
///
/// Returns two kernels: per-row losses (and gradients), then the fixed-order mean.
pub fn cross_entropy(
    ctx: &GpuContext,
    logits: &Tensor,
    labels: &Arc<GpuBuffer>,
    loss_out: &Tensor,
    grad: Option<GradOut<'_>>,
) -> Result<Vec<Kernel>> {
    cross_entropy_smoothed(ctx, logits, labels, loss_out, grad, 0.0)
}

/// [`cross_entropy`] with PyTorch's `label_smoothing` ε in [0, 1]
/// (`nn.CrossEntropyLoss(label_smoothing=ε)`): each row's target is `(1 − ε)·onehot + ε/C`,
/// so its loss is `(1 − ε)·(−log p_label) + ε/C · Σ_j −log p_j` and its gradient
/// `p − target`. ε = 0 is [`cross_entropy`], bit for bit.
pub fn cross_entropy_smoothed(
    ctx: &GpuContext,
    logits: &Tensor,
    labels: &Arc<GpuBuffer>,
    loss_out: &Tensor,
    grad: Option<GradOut<'_>>,
    label_smoothing: f32,
) -> Result<Vec<Kernel>> {
    let op = "cross_entropy";
    let (rows, classes) = rows_classes(op, logits, labels)?;
    check_loss_out(op, loss_out)?;
    if !(0.0..=1.0).contains(&label_smoothing) {
        return Err(Error::InvalidArgument(format!(
            "{op}: label_smoothing must be in [0, 1], not {label_smoothing}"
        )));
    }
    let multiplier = grad.map_or(1.0, |g| g.2);
    let params = Params {
        rows,
        classes,
        n: rows,
        grad_scale: multiplier / rows as f32,
        loss_scale: 1.0 / rows as f32,
        label_smoothing,
        ..Default::default()
    };
    let per_row = ctx.alloc_storage("cross_entropy row losses", 4 * rows.max(1) as u64);
    let row_grid = if rows == 0 {
        [0, 0, 0]
    } else {
        grid_1d(rows as usize * ROW_WG as usize, ROW_WG)
    };
    let uniform = bytemuck::bytes_of(&params);
    let mut args = vec![
        ("params", Arg::Uniform(uniform)),
        ("logits", logits.arg()),
        ("labels", Arg::Buffer(labels)),
        ("partials", Arg::Buffer(&per_row)),
    ];
    let rows_kernel = match grad {
        None => ctx.kernel(
            &KernelDesc::new(&SHADER, "cross_entropy_rows"),
            &args,
            row_grid,
        )?,
        Some((grad_logits, seed, _)) => {
            if grad_logits.shape() != logits.shape() {
                return Err(Error::shape(
                    op,
                    format!(
                        "grad_logits {:?} differs from logits {:?}",
                        grad_logits.shape(),
                        logits.shape()
                    ),
                ));
            }
            check_seed(op, seed)?;
            args.push(("grad", grad_logits.arg()));
            args.push(("seed", Arg::Buffer(seed)));
            ctx.kernel(
                &KernelDesc::new(&SHADER, "cross_entropy_rows_grad"),
                &args,
                row_grid,
            )?
        }
    };
    let mean_kernel = ctx.kernel(
        &KernelDesc::new(&SHADER, "mean_partials"),
        &[
            ("params", Arg::Uniform(uniform)),
            ("partials", Arg::Buffer(&per_row)),
            ("loss", loss_out.arg()),
        ],
        [1, 1, 1],
    )?;
    Ok(vec![rows_kernel, mean_kernel])
}

/// Mean squared error over all elements, in f32: `loss_out[0] = mean((pred − target)²)`.
/// `pred` any storage, `target` the same shape (normally f32). With `grad` it also writes
/// `grad_pred = 2 (pred − target) / numel · multiplier · seed[0]` in `grad_pred`'s storage.
/// One kernel up to 2048 elements, two above.
pub fn mse(
    ctx: &GpuContext,
    pred: &Tensor,
    target: &Tensor,
    loss_out: &Tensor,
    grad: Option<GradOut<'_>>,
) -> Result<Vec<Kernel>> {
    let op = "mse";
    if pred.shape() != target.shape() {
        return Err(Error::shape(
            op,
            format!(
                "pred {:?} and target {:?} differ in shape",
                pred.shape(),
                target.shape()
            ),
        ));
    }
    check_loss_out(op, loss_out)?;
    let n = pred.numel();
    let n32 =
        u32::try_from(n).map_err(|_| Error::shape(op, format!("{n} elements is over 2^32")))?;
    let groups = super::reduce::first_pass_groups(n);
    let multiplier = grad.map_or(1.0, |g| g.2);
    let mut params = Params {
        n: n32,
        groups: groups as u32,
        grad_scale: 2.0 * multiplier / n as f32,
        loss_scale: 1.0 / n as f32,
        ..Default::default()
    };
    let partials = ctx.alloc_storage("mse partials", 4 * groups as u64);
    let uniform = bytemuck::bytes_of(&params);
    let mut args = vec![
        ("params", Arg::Uniform(uniform)),
        ("pred", pred.arg()),
        ("wanted", target.arg()),
        ("partials", Arg::Buffer(&partials)),
        ("loss", loss_out.arg()),
    ];
    let first = match grad {
        None => ctx.kernel(
            &KernelDesc::new(&SHADER, "mse_partials"),
            &args,
            [groups as u32, 1, 1],
        )?,
        Some((grad_pred, seed, _)) => {
            if grad_pred.shape() != pred.shape() {
                return Err(Error::shape(
                    op,
                    format!(
                        "grad_pred {:?} differs from pred {:?}",
                        grad_pred.shape(),
                        pred.shape()
                    ),
                ));
            }
            check_seed(op, seed)?;
            args.push(("grad", grad_pred.arg()));
            args.push(("seed", Arg::Buffer(seed)));
            ctx.kernel(
                &KernelDesc::new(&SHADER, "mse_partials_grad"),
                &args,
                [groups as u32, 1, 1],
            )?
        }
    };
    if groups == 1 {
        return Ok(vec![first]);
    }
    // The second pass reduces the `groups` partials.
    params.n = groups as u32;
    let second = ctx.kernel(
        &KernelDesc::new(&SHADER, "mean_partials"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("partials", Arg::Buffer(&partials)),
            ("loss", loss_out.arg()),
        ],
        [1, 1, 1],
    )?;
    Ok(vec![first, second])
}

/// `correct[0]` (a raw u32 buffer) += the number of rows of `logits` [N, C] whose argmax
/// equals the label (ties go to the first maximum and NaN counts as the maximum, as in
/// `torch.argmax`). Exact (integer atomics), so the order does not matter.
pub fn count_correct(
    ctx: &GpuContext,
    logits: &Tensor,
    labels: &Arc<GpuBuffer>,
    correct: &Arc<GpuBuffer>,
) -> Result<Kernel> {
    let (rows, classes) = rows_classes("count_correct", logits, labels)?;
    let params = Params {
        rows,
        classes,
        ..Default::default()
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "count_correct"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("logits", logits.arg()),
            ("labels", Arg::Buffer(labels)),
            ("correct", Arg::Buffer(correct)),
        ],
        grid_1d(rows as usize, WG),
    )
}
