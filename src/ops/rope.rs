//! Rotary position embedding (`shaders/rope.wgsl`), Hugging Face's rotate-half layout, forward
//! and backward, applied to q and k before attention (so every attention path takes it:
//! the fused SIMT and tensor-core kernels and the manual one).
//!
//! The cos/sin table ([`RopeTable`], f32 `[positions, head_size / 2, 2]`) is made on the host
//! as transformers' default rope init makes it: `inv_freq = 1 / theta^(2i / d)` and the angle
//! `position · inv_freq` in f32 (transformers computes both in float32, and at position 2000
//! an f32 angle is 1e-4 away from the exact one, so an f64 angle would not match it), then
//! cos and sin of that angle in f64, rounded once to f32. It is a plain tensor: a model keeps
//! it as a buffer (persistent, never trained).
//!
//! Forward `y = x cos + rotate_half(x) sin` per head; backward the rotation by −θ: `dx_i =
//! dy_i cos + dy_{i+h} sin`, `dx_{i+h} = dy_{i+h} cos − dy_i sin` (h = head_size / 2). f32
//! arithmetic, one rounding to the output's storage (under autocast transformers rounds the
//! backward's two products to f16 before adding them: a unit of f16 at most apart). q and k
//! go through one dispatch.

use super::qkv::HeadRows;
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::shader::{Grid, ShaderDecl};
use crate::tensor::{DType, Tensor};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "rope",
    source: include_str!("../../shaders/rope.wgsl"),
    structs: &[Params::WGSL],
    consts: &[],
    // q and k, in and out, in one storage; the table f32.
    variants: |shader| {
        Grid::new()
            .each(&["x", "y", "x2", "y2"])
            .variants(shader, &[])
    },
};

const WG: usize = 64;

crate::wgsl_struct! {
    struct Params {
        /// B · T
        rows: u32,
        /// T: a row's position is first_position + row % T
        t: u32,
        first_position: u32,
        head_size: u32,
        /// heads of x (q) and of x2 (k; 0: none)
        heads: u32,
        heads2: u32,
        x_at: u32,
        x_row: u32,
        y_at: u32,
        y_row: u32,
        x2_at: u32,
        x2_row: u32,
        y2_at: u32,
        y2_row: u32,
        /// 1: forward; -1: backward (rotation by -θ)
        sign: f32,
        _pad: u32,
    }
}

/// cos and sin of every (position, frequency) of one RoPE, f32 `[positions, head_size / 2,
/// 2]` on the GPU.
#[derive(Debug)]
pub struct RopeTable {
    pub tensor: Tensor,
    pub head_size: usize,
    pub positions: usize,
}

impl RopeTable {
    /// The table of `rope_theta` for heads of `head_size` (even) at positions
    /// `0..positions` ([`table_values`]), uploaded.
    pub fn new(ctx: &GpuContext, theta: f64, head_size: usize, positions: usize) -> Result<Self> {
        let values = table_values(theta, head_size, positions)?;
        let shape = [positions, head_size / 2, 2];
        let tensor = Tensor::from_f32(ctx, &values, &shape, DType::F32)?;
        Ok(RopeTable {
            tensor,
            head_size,
            positions,
        })
    }
}

/// transformers' default rope init on the host: for frequency i < d / 2 (d = `head_size`),
/// `inv_freq_i = 1 / theta^(2i / d)` and the angle `p · inv_freq_i` in f32 as transformers
/// computes them, then `(cos, sin)` of that angle in f64 rounded to f32; `[positions, d / 2,
/// 2]` flattened.
pub fn table_values(theta: f64, head_size: usize, positions: usize) -> Result<Vec<f32>> {
    if !(theta.is_finite() && theta > 1.0) {
        return Err(Error::InvalidArgument(format!(
            "rope: rope_theta must be a finite number above 1, not {theta}"
        )));
    }
    if head_size == 0 || !head_size.is_multiple_of(2) {
        return Err(Error::InvalidArgument(format!(
            "rope: the head size must be even (rotate-half pairs channel i with i + d/2), not \
             {head_size}"
        )));
    }
    let half = head_size / 2;
    if positions == 0 || u32::try_from(positions * head_size).is_err() {
        return Err(Error::InvalidArgument(format!(
            "rope: {positions} positions of {head_size} channels: at least one, under 2^32 values"
        )));
    }
    // torch.arange(0, d, 2).float() / d, then base ** that and 1 / it, all float32.
    let inv_freq: Vec<f32> = (0..half)
        .map(|i| {
            let exponent = (2 * i) as f32 / head_size as f32;
            1.0 / theta.powf(exponent as f64) as f32
        })
        .collect();
    let mut values = Vec::with_capacity(positions * head_size);
    for p in 0..positions {
        for &f in &inv_freq {
            let angle = (p as f32 * f) as f64;
            values.push(angle.cos() as f32);
            values.push(angle.sin() as f32);
        }
    }
    Ok(values)
}

/// One tensor's rotation: the heads of `x` (at `x_at`) into the same heads of `y` (at
/// `y_at`, a tensor of its own).
#[derive(Clone, Copy, Debug)]
pub struct Rotate<'t> {
    pub x: &'t Tensor,
    pub x_at: HeadRows,
    pub y: &'t Tensor,
    pub y_at: HeadRows,
    pub heads: usize,
}

impl<'t> Rotate<'t> {
    /// `x` and `y` both `[B, T, heads · head_size]`.
    pub fn dense(x: &'t Tensor, y: &'t Tensor, heads: usize, head_size: usize) -> Self {
        let at = HeadRows {
            offset: 0,
            row: heads * head_size,
        };
        Rotate {
            x,
            x_at: at,
            y,
            y_at: at,
            heads,
        }
    }
}

/// Which positions the rows hold: `batch` sequences of `t`, from `first_position` (0 when
/// training on whole windows).
#[derive(Clone, Copy, Debug)]
pub struct Positions {
    pub batch: usize,
    pub t: usize,
    pub first_position: usize,
}

/// `q` (and `k`) rotated by their positions' angles: one kernel.
pub fn forward(
    ctx: &GpuContext,
    table: &RopeTable,
    at: Positions,
    q: Rotate,
    k: Option<Rotate>,
) -> Result<Kernel> {
    launch(ctx, "rope_forward", 1.0, (table, at), q, k)
}

/// Backward of [`forward`]: `dq` (and `dk`) from `dy` of q (and k), the rotation by −θ
/// (`Rotate::x` is the output's gradient, `Rotate::y` the input's). One kernel.
pub fn backward(
    ctx: &GpuContext,
    table: &RopeTable,
    at: Positions,
    dq: Rotate,
    dk: Option<Rotate>,
) -> Result<Kernel> {
    launch(ctx, "rope_backward", -1.0, (table, at), dq, dk)
}

fn launch(
    ctx: &GpuContext,
    op: &'static str,
    sign: f32,
    (table, at): (&RopeTable, Positions),
    q: Rotate,
    k: Option<Rotate>,
) -> Result<Kernel> {
    let hs = table.head_size;
    let rows = at.batch * at.t;
    if at.first_position + at.t > table.positions {
        return Err(Error::shape(
            op,
            format!(
                "positions {}..{} are past the table's {} (max_position_embeddings)",
                at.first_position,
                at.first_position + at.t,
                table.positions
            ),
        ));
    }
    if table.tensor.storage() != Storage::F32 || table.tensor.numel() != table.positions * hs {
        return Err(Error::shape(
            op,
            format!(
                "the table must be f32 [{}, {}, 2], got {} {:?}",
                table.positions,
                hs / 2,
                table.tensor.storage().name(),
                table.tensor.shape()
            ),
        ));
    }
    for (name, r) in [("q", Some(q)), ("k", k)] {
        let Some(r) = r else { continue };
        for (what, t, place) in [("x", r.x, r.x_at), ("y", r.y, r.y_at)] {
            check_heads(
                op,
                &format!("{name}'s {what}"),
                t,
                place,
                (rows, r.heads, hs),
            )?;
        }
        if r.x.storage() != q.x.storage() || r.y.storage() != q.x.storage() {
            return Err(Error::shape(
                op,
                "q and k, in and out, share one storage".to_string(),
            ));
        }
    }
    let heads2 = k.map_or(0, |k| k.heads);
    let threads = rows * (q.heads + heads2) * (hs / 4 + 1);
    if u32::try_from(threads).is_err() {
        return Err(Error::shape(op, format!("{threads} threads exceed 2^32")));
    }
    // Without k, x2 reads q's input and y2 writes a word of its own (never touched: no
    // thread has heads2 heads), as WebGPU refuses two writable bindings of one range.
    let unused;
    let k = match k {
        Some(k) => k,
        None => {
            unused = Tensor::zeros(ctx, &[2], q.y.dtype());
            Rotate {
                y: &unused,
                heads: 0,
                ..q
            }
        }
    };
    let u32_of = |n: usize| n as u32;
    let params = Params {
        rows: u32_of(rows),
        t: u32_of(at.t),
        first_position: u32_of(at.first_position),
        head_size: u32_of(hs),
        heads: u32_of(q.heads),
        heads2: u32_of(heads2),
        x_at: u32_of(q.x_at.offset),
        x_row: u32_of(q.x_at.row),
        y_at: u32_of(q.y_at.offset),
        y_row: u32_of(q.y_at.row),
        x2_at: u32_of(k.x_at.offset),
        x2_row: u32_of(k.x_at.row),
        y2_at: u32_of(k.y_at.offset),
        y2_row: u32_of(k.y_at.row),
        sign,
        _pad: 0,
    };
    ctx.kernel(
        &KernelDesc::new(&SHADER, "rope"),
        &[
            ("params", Arg::Uniform(bytemuck::bytes_of(&params))),
            ("x", q.x.arg()),
            ("y", q.y.arg()),
            ("x2", k.x.arg()),
            ("y2", k.y.arg()),
            ("table", table.tensor.arg()),
        ],
        grid_1d(threads, WG as u32),
    )
}

/// Every head of `rows` rows inside `t` at `place`, in 32-bit indices.
fn check_heads(
    op: &'static str,
    what: &str,
    t: &Tensor,
    place: HeadRows,
    (rows, heads, hs): (usize, usize, usize),
) -> Result<()> {
    if heads == 0 || place.row < heads * hs {
        return Err(Error::shape(
            op,
            format!(
                "{what}: {heads} heads of {hs} in rows of {} elements",
                place.row
            ),
        ));
    }
    let end = rows
        .saturating_sub(1)
        .checked_mul(place.row)
        .and_then(|n| n.checked_add(place.offset + heads * hs));
    match end {
        Some(end) if rows == 0 || end <= t.numel() && u32::try_from(end).is_ok() => Ok(()),
        _ => Err(Error::shape(
            op,
            format!(
                "{what} {:?} must hold {rows} rows of {heads} heads of {hs}, rows {} apart from \
                 element {}",
                t.shape(),
                place.row,
                place.offset
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_transformers_default_rope_init() {
        // head_dim 4, theta 10000: inv_freq = [1, 0.01].
        let t = table_values(10_000.0, 4, 3).unwrap();
        assert_eq!(t.len(), 3 * 2 * 2);
        assert_eq!(&t[..4], &[1.0, 0.0, 1.0, 0.0]); // position 0
        assert_eq!(t[4], 1f64.cos() as f32);
        assert_eq!(t[5], 1f64.sin() as f32);
        assert_eq!(t[6], (0.01f32 as f64).cos() as f32);
        // The angle is f32's: position 2000 at SmolLM2's theta 100000, head_dim 64, i = 1.
        let big = table_values(100_000.0, 64, 2001).unwrap();
        let inv = 1.0 / 100_000f64.powf((2.0f32 / 64.0) as f64) as f32;
        let angle = (2000.0 * inv) as f64;
        assert_eq!(big[(2000 * 32 + 1) * 2], angle.cos() as f32);
        assert!(table_values(10_000.0, 5, 3).is_err());
        assert!(table_values(0.5, 4, 3).is_err());
    }
}
