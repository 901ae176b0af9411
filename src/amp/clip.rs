//! Gradient clipping by global L2 norm on the GPU (`shaders/clip.wgsl`), PyTorch's
//! `clip_grad_norm_`, run after the GradScaler's unscale and before the optimizer step.

use std::sync::Arc;

use super::scaler::geometry;
use super::{check_flat_f32, f32_piece, in_order};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc};
use crate::shader::{ShaderDecl, f32_only};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "clip",
    source: include_str!("../../shaders/clip.wgsl"),
    structs: &[Sizes::WGSL],
    consts: &[],
    // Every variant of the clipping shader (raw f32 buffers only: one variant).
    variants: f32_only,
};

crate::wgsl_struct! {
    struct Sizes {
        /// gradient elements
        n: u32,
        /// partial sums: workgroups launched by clip_partial
        groups: u32,
        /// clipping threshold
        max_norm: f32,
        /// where this piece's partial sums start (clip_partial over one piece of the
        /// gradients: `GpuContext::flat_pieces`)
        first_group: u32,
    }
}

/// Gradient clipping by global L2 norm on the GPU, after unscale (PyTorch's
/// `clip_grad_norm_`: coef = max_norm / (total_norm + 1e-6), clamped to 1, grads *= coef).
/// The reduction is deterministic (fixed tree, no float atomics). Its norm buffer holds the
/// total norm (f32, read by [`GradClipper::total_norm_async`]) and the coefficient applied.
pub struct GradClipper {
    kernels: Vec<Kernel>,
    norm: Arc<GpuBuffer>,
    max_norm: f32,
    n: usize,
}

impl GradClipper {
    pub fn new(ctx: &GpuContext, grads: &Arc<GpuBuffer>, n: usize, max_norm: f32) -> Result<Self> {
        check_flat_f32(ctx, "GradClipper", grads, n)?;
        if !(max_norm.is_finite() && max_norm > 0.0) {
            return Err(Error::InvalidArgument(format!(
                "clip_grad_norm: max_norm must be finite and > 0, got {max_norm}"
            )));
        }
        // One partial sum per workgroup, the pieces' one after another: where no piece is
        // past 65535 workgroups (no 2-D fold) they sit where one dispatch over the whole
        // buffer puts them, so the norm has the same bits however many pieces there are.
        let pieces: Vec<_> = ctx
            .flat_pieces(n)
            .into_iter()
            .map(|piece| {
                let (wg, launched) = geometry(piece.len());
                (piece, wg, launched)
            })
            .collect();
        let launched: u32 = pieces.iter().map(|(_, _, l)| l).sum();
        let partials = ctx.alloc_storage("clip.partials", 4 * launched as u64);
        let norm = ctx.alloc_storage("clip.norm", 8);
        let per_piece = |entry: &'static str| {
            let mut first_group = 0;
            let kernels = pieces.iter().map(|(piece, wg, piece_launched)| {
                let sizes = Sizes {
                    n: piece.len() as u32,
                    groups: *piece_launched,
                    max_norm,
                    first_group,
                };
                first_group += piece_launched;
                let args = [
                    ("grads", f32_piece(grads, piece)),
                    ("sizes", Arg::Uniform(bytemuck::bytes_of(&sizes))),
                    ("partials", Arg::Buffer(&partials)),
                    ("norm", Arg::Buffer(&norm)),
                ];
                ctx.kernel(&KernelDesc::new(&SHADER, entry), &args, *wg)
            });
            in_order(kernels.collect::<Result<_>>()?)
        };
        let sizes = Sizes {
            n: n as u32,
            groups: launched,
            max_norm,
            first_group: 0,
        };
        // The reduce reads the partials alone; its gradient binding is the first piece
        // (bound by every entry point of the shader, read by this one not at all).
        let first = ctx.flat_pieces(n).swap_remove(0);
        let reduce_args = [
            ("grads", f32_piece(grads, &first)),
            ("sizes", Arg::Uniform(bytemuck::bytes_of(&sizes))),
            ("partials", Arg::Buffer(&partials)),
            ("norm", Arg::Buffer(&norm)),
        ];
        let kernels = vec![
            per_piece("clip_partial")?,
            ctx.kernel(
                &KernelDesc::new(&SHADER, "clip_reduce"),
                &reduce_args,
                [1, 1, 1],
            )?,
            per_piece("clip_apply")?,
        ];
        Ok(Self {
            kernels,
            norm,
            max_norm,
            n,
        })
    }

    /// Record these in order, after unscale and before the optimizer step.
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    /// The total norm and the clip coefficient, without applying it: what a step records
    /// when its optimizer multiplies the gradients by the coefficient itself
    /// (`Optimizer::clip_first`).
    pub fn norm_kernels(&self) -> &[Kernel] {
        &self.kernels[..2]
    }

    /// `[total_norm, clip_coef]` (f32), written by [`GradClipper::norm_kernels`].
    pub fn norm_buffer(&self) -> &Arc<GpuBuffer> {
        &self.norm
    }

    /// The gradients clipped.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn max_norm(&self) -> f32 {
        self.max_norm
    }

    /// Eager `clip_grad_norm_`: record and submit the three kernels (no wait).
    pub fn clip(&self, ctx: &GpuContext) {
        let ks: Vec<&Kernel> = self.kernels.iter().collect();
        ctx.run(&ks);
    }

    /// The last total norm (asynchronous readback).
    pub async fn total_norm_async(&self, ctx: &GpuContext) -> Result<f32> {
        let b = ctx.read_bytes_async(&self.norm, 0, 4).await?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// The last total norm (blocking; native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn total_norm(&self, ctx: &GpuContext) -> Result<f32> {
        let b = ctx.read_bytes(&self.norm, 0, 4)?;
        Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}
