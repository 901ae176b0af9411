//! Unary ops (activations) from one table (`shaders/unary.wgsl`). A row is everything an
//! activation is: its JSON key, PyTorch's repr, its autocast op, and its forward and backward
//! as WGSL expressions. The shader's entry points, the layer (`nn::layers::unary`) and its
//! registry entry all come from the row, so adding an activation is one row here (and, when
//! its expressions call a helper, that helper in `shaders/unary.wgsl`).
//!
//! Math is f32 whatever the storages; the input and its gradient share one storage, the output
//! may have any.
//!
//! Beside the table, the shader holds Llama's SwiGLU over the table's SiLU ([`swiglu_forward`],
//! [`swiglu_backward`], [`swiglu_forward_backward`]): `y = silu(gate) · up` as one kernel each
//! way, rounding where transformers' `LlamaMLP` rounds in a low dtype.

use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::Tensor;

/// One unary op.
#[derive(Debug, PartialEq, Eq)]
pub struct UnaryOp {
    /// The JSON key: `{"relu": {}}`.
    pub name: &'static str,
    /// PyTorch's repr of the module, which is also the `torch.nn` expression that makes it
    /// (`GELU(approximate='tanh')`): `scripts/activation_compat.py` builds it from this.
    pub repr: &'static str,
    /// The op as the precision policy names it. Autocast lists no activation, so each runs in
    /// its input's dtype.
    pub autocast: &'static str,
    /// `y = f(v)`: a WGSL f32 expression in the input `v`.
    pub forward: &'static str,
    /// `dx = f'(v) · g`: a WGSL f32 expression in the input `v` and the upstream gradient `g`.
    pub backward: &'static str,
    forward_entry: &'static str,
    backward_entry: &'static str,
    forward_backward_entry: &'static str,
}

/// The table: each row a `pub static`, [`UNARY_OPS`] listing them, and the shader's source
/// with each row's scalar pair and `#unary` line appended (`concat!`, so it stays one
/// `&'static str` for [`ShaderDecl`]).
macro_rules! unary_ops {
    ($(
        $(#[$doc:meta])*
        $id:ident: $name:literal, $repr:literal, $autocast:literal,
            forward $forward:literal,
            backward $backward:literal;
    )*) => {
        $(
            $(#[$doc])*
            pub static $id: UnaryOp = UnaryOp {
                name: $name,
                repr: $repr,
                autocast: $autocast,
                forward: $forward,
                backward: $backward,
                forward_entry: concat!($name, "_forward"),
                backward_entry: concat!($name, "_backward"),
                forward_backward_entry: concat!($name, "_forward_backward"),
            };
        )*

        /// Every unary op, in the order the layer registry lists them.
        pub static UNARY_OPS: &[&UnaryOp] = &[$(&$id),*];

        pub static SHADER: ShaderDecl = ShaderDecl {
            name: "unary",
            source: concat!(
                include_str!("../../shaders/unary.wgsl"),
                $(
                    "\n// ", $repr, "\n",
                    "fn ", $name, "(v: f32) -> f32 {\n    return ", $forward, ";\n}\n",
                    "fn ", $name, "_grad(v: f32, g: f32) -> f32 {\n    return ", $backward,
                    ";\n}\n",
                    "#unary ", $name, "\n",
                )*
            ),
            structs: &[Params::WGSL],
            consts: &[],
            // The input and the upstream gradient in one storage, the output and the input
            // gradient in one (any) storage: the pairs the fused entry point binds too
            // ([`fuses`]).
            variants: |shader| {
                Grid::new()
                    .each(&["x", "dy"])
                    .each(&["y", "dx"])
                    // SwiGLU: gate, up, the product and their gradients in one storage.
                    .or(Grid::new().each(&["x", "up", "dy", "y", "dx", "dup"]))
                    .variants(shader, &[])
            },
        };
    };
}

unary_ops! {
    /// `nn.ReLU()`: `max(x, 0)`, NaN kept; its gradient is PyTorch's
    /// `threshold_backward(dy, y, 0)` (a NaN input passes its gradient).
    RELU: "relu", "ReLU()", "Relu",
        forward "select(v, 0.0, is_non_positive(v))",
        backward "select(g, 0.0, is_non_positive(v))";

    /// `nn.GELU()`: the exact form `x Φ(x)` (nanoGPT's current model), with erf from a
    /// Chebyshev fit accurate to 1.2e-7 relative in erfc (absolute error ≤ 1e-6 for
    /// |x| ≤ 10); `dx = dy · (Φ(x) + x φ(x))`.
    GELU: "gelu", "GELU(approximate='none')", "Gelu",
        forward "gelu_by_erf(v)",
        backward "gelu_by_erf_grad(v, g)";

    /// `nn.GELU(approximate='tanh')`, GPT-2's approximation:
    /// `x/2 · (1 + tanh(√(2/π) · (x + 0.044715 x³)))`.
    GELU_TANH: "gelu_tanh", "GELU(approximate='tanh')", "GeluTanh",
        forward "gelu_by_tanh(v)",
        backward "gelu_by_tanh_grad(v, g)";

    /// `nn.SiLU()` (swish): `x σ(x)`; `dx = dy · σ(x) (1 + x (1 − σ(x)))`, PyTorch's
    /// `silu_backward`. As in PyTorch, ±inf give NaN gradients and -inf a NaN output.
    SILU: "silu", "SiLU()", "Silu",
        forward "v * sigmoid(v)",
        backward "g * sigmoid(v) * (1.0 + v * (1.0 - sigmoid(v)))";
}

const WG: u32 = 256;

crate::wgsl_struct! {
    struct Params {
        /// number of elements
        n: u32,
        /// SwiGLU: the gate's dtype, which silu(gate) and the gradients are rounded to
        /// (round_grad's code: 0 f32, 1 f16, 2 bf16)
        round: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// The op whose JSON key is `name`.
pub fn by_name(name: &str) -> Option<&'static UnaryOp> {
    UNARY_OPS.iter().copied().find(|op| op.name == name)
}

fn launch(
    ctx: &GpuContext,
    entry: &'static str,
    outputs: &[(&'static str, &Tensor)],
    inputs: &[(&'static str, &Tensor)],
) -> Result<Kernel> {
    launch_rounding(ctx, entry, outputs, inputs, 0)
}

fn launch_rounding(
    ctx: &GpuContext,
    entry: &'static str,
    outputs: &[(&'static str, &Tensor)],
    inputs: &[(&'static str, &Tensor)],
    round: u32,
) -> Result<Kernel> {
    let (_, out) = outputs[0];
    for (_, t) in outputs.iter().chain(inputs) {
        if t.numel() != out.numel() {
            return Err(Error::shape(
                entry,
                format!("{:?} and {:?} differ in length", t.shape(), out.shape()),
            ));
        }
    }
    let n = u32::try_from(out.numel())
        .map_err(|_| Error::shape(entry, format!("{:?} has over 2^32 elements", out.shape())))?;
    let params = Params {
        n,
        round,
        ..Default::default()
    };
    let mut args = vec![("params", Arg::Uniform(bytemuck::bytes_of(&params)))];
    args.extend(outputs.iter().chain(inputs).map(|(n, t)| (*n, t.arg())));
    ctx.kernel(
        &KernelDesc::new(&SHADER, entry),
        &args,
        grid_1d(out.numel().div_ceil(2), WG),
    )
}

/// `y = op(x)`.
pub fn forward(ctx: &GpuContext, op: &'static UnaryOp, x: &Tensor, y: &Tensor) -> Result<Kernel> {
    launch(ctx, op.forward_entry, &[("y", y)], &[("x", x)])
}

/// `dx = dy · op'(x)`, `x` the forward's input.
pub fn backward(
    ctx: &GpuContext,
    op: &'static UnaryOp,
    x: &Tensor,
    dy: &Tensor,
    dx: &Tensor,
) -> Result<Kernel> {
    launch(
        ctx,
        op.backward_entry,
        &[("dx", dx)],
        &[("x", x), ("dy", dy)],
    )
}

/// Whether [`forward_backward`] takes tensors of these storages: the upstream gradient in
/// the input's, the input gradient in the output's (the pairs of the shader's variant grid).
pub fn fuses(x: &Tensor, dy: &Tensor, y: &Tensor, dx: &Tensor) -> bool {
    x.storage() == dy.storage() && y.storage() == dx.storage()
}

/// [`forward`] and [`backward`] in one dispatch: `y = op(x)` and `dx = dy · op'(x)`, each
/// element by the same expressions as those kernels, so the same bits. For a backward that
/// recomputes `y` and needs `dx` too ([`crate::nn::layers::recompute`]).
pub fn forward_backward(
    ctx: &GpuContext,
    op: &'static UnaryOp,
    x: &Tensor,
    dy: &Tensor,
    y: &Tensor,
    dx: &Tensor,
) -> Result<Kernel> {
    if !fuses(x, dy, y, dx) {
        return Err(Error::shape(
            op.forward_backward_entry,
            format!(
                "storages x {}, dy {}, y {}, dx {}: want dy in the storage of x, dx in that of y",
                x.storage().name(),
                dy.storage().name(),
                y.storage().name(),
                dx.storage().name()
            ),
        ));
    }
    launch(
        ctx,
        op.forward_backward_entry,
        &[("y", y), ("dx", dx)],
        &[("x", x), ("dy", dy)],
    )
}

/// Llama's gated MLP activation, transformers' `act_fn(gate) * up` with SiLU: `y = silu(gate)
/// · up` in one kernel, `silu(gate)` rounded to gate's dtype first as transformers stores it.
/// Every tensor the same shape and storage.
pub fn swiglu_forward(ctx: &GpuContext, gate: &Tensor, up: &Tensor, y: &Tensor) -> Result<Kernel> {
    swiglu(
        "swiglu_forward",
        ctx,
        &[("y", y)],
        &[("x", gate), ("up", up)],
    )
}

/// Backward of [`swiglu_forward`]: `dgate = silu'(gate) · (dy · up)` and `dup = dy ·
/// silu(gate)` in one kernel, rounded as autograd rounds them in gate's dtype.
pub fn swiglu_backward(
    ctx: &GpuContext,
    (gate, up): (&Tensor, &Tensor),
    dy: &Tensor,
    (dgate, dup): (&Tensor, &Tensor),
) -> Result<Kernel> {
    let inputs = [("x", gate), ("up", up), ("dy", dy)];
    swiglu(
        "swiglu_backward",
        ctx,
        &[("dx", dgate), ("dup", dup)],
        &inputs,
    )
}

/// [`swiglu_forward`] and [`swiglu_backward`] in one dispatch, by the same expressions (the
/// same bits): the backward that recomputes `y` for the Linear reading it
/// ([`crate::nn::layers::recompute`]) and needs the gradients too.
pub fn swiglu_forward_backward(
    ctx: &GpuContext,
    (gate, up): (&Tensor, &Tensor),
    dy: &Tensor,
    (y, dgate, dup): (&Tensor, &Tensor, &Tensor),
) -> Result<Kernel> {
    let inputs = [("x", gate), ("up", up), ("dy", dy)];
    let outputs = [("y", y), ("dx", dgate), ("dup", dup)];
    swiglu("swiglu_forward_backward", ctx, &outputs, &inputs)
}

fn swiglu(
    entry: &'static str,
    ctx: &GpuContext,
    outputs: &[(&'static str, &Tensor)],
    inputs: &[(&'static str, &Tensor)],
) -> Result<Kernel> {
    let gate = inputs[0].1;
    if let Some((name, t)) = outputs
        .iter()
        .chain(inputs)
        .find(|(_, t)| t.storage() != gate.storage())
    {
        let name = match *name {
            "x" => "gate",
            "dx" => "dgate",
            other => other,
        };
        return Err(Error::shape(
            entry,
            format!(
                "{name} is {} but gate is {}: SwiGLU's tensors share one storage",
                t.storage().name(),
                gate.storage().name()
            ),
        ));
    }
    let round = super::round_code(Some(gate.dtype()));
    launch_rounding(ctx, entry, outputs, inputs, round)
}
