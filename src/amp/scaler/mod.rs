//! GradScaler on the GPU (`shaders/scaler.wgsl`).
//!
//! PyTorch semantics with the state in one small GPU buffer, so a step is planned once and
//! replayed with no CPU readback: `begin_step` → (backward seeded with `scale`) → `unscale`
//! (multiply by 1/scale and detect inf/NaN in one pass) → optional clipping → optimizer step
//! (skipped on the GPU when found_inf is set) → `update`; a trainer's step ends with
//! `update_then_begin`, its next begin too, and records `begin_step` only when pending.
//!
//! State buffer layout (10 × 32-bit words; the offsets are `ops::scaler_state`'s, which the
//! shaders take with `#consts scaler_state`):
//!
//! | word | name            | type | meaning                                                   |
//! |------|-----------------|------|-----------------------------------------------------------|
//! | 0    | scale           | f32  | the loss backward's seed (`scale(loss)`)                  |
//! | 1    | growth_tracker  | i32  | clean steps since the last growth or backoff              |
//! | 2    | found_inf       | u32  | 1 when this step's gradients held an inf or NaN           |
//! | 3    | growth_interval | u32  |                                                           |
//! | 4    | inv_scale       | f32  | 1/scale rounded as PyTorch does (`scale.double().reciprocal().float()`) |
//! | 5    | enabled         | u32  | 0 for a disabled scaler: scale stays 1, found_inf stays 0 |
//! | 6, 7 | growth_factor   | f64  | low word first; a double as in PyTorch                    |
//! | 8, 9 | backoff_factor  | f64  | low word first                                            |
//!
//! The factors are doubles, as PyTorch's `_amp_update_scale_` takes them: a new scale is
//! the f32 scale times the f64 factor, rounded to f32 (computed exactly with integers in the
//! shader), so `--backoff-factor 0.3` gives PyTorch's scales to the bit.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

mod config;

pub use config::{ScalerConfig, ScalerSnapshot, ScalerStateDict, inv_scale_of};

use super::{check_flat_f32, f32_piece, in_order};
use crate::error::{Error, Result};
use crate::gpu::{Arg, GpuBuffer, GpuContext, Kernel, KernelDesc, grid_1d};
use crate::ops::scaler_state::SCALER_STATE;
use crate::shader::{ShaderDecl, f32_only};

pub static SHADER: ShaderDecl = ShaderDecl {
    name: "scaler",
    source: include_str!("../../../shaders/scaler.wgsl"),
    structs: &[Sizes::WGSL],
    consts: &[SCALER_STATE],
    // Every variant of the scaler shader (it binds raw f32 buffers only: one variant).
    variants: f32_only,
};
const WG: u32 = 256;
/// Elements per thread (`EPT` in the shaders).
const EPT: usize = 4;

// Words of the state buffer (see the module docs): written once, in `ops::scaler_state`,
// for the shaders that read them (`#consts scaler_state`) and for the Rust here.
pub use crate::ops::scaler_state::{
    STATE_WORDS, WORD_BACKOFF_FACTOR, WORD_ENABLED, WORD_FOUND_INF, WORD_GROWTH_FACTOR,
    WORD_GROWTH_INTERVAL, WORD_GROWTH_TRACKER, WORD_INV_SCALE, WORD_SCALE,
};

crate::wgsl_struct! {
    struct Sizes {
        /// gradient elements
        n: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
    }
}

/// A disabled scaler's kernels are planned (their pipelines compile) but have an empty grid,
/// so recording them dispatches nothing.
fn grid_if(enabled: bool, workgroups: [u32; 3]) -> [u32; 3] {
    if enabled { workgroups } else { [0, 1, 1] }
}

/// Launch geometry of a kernel over `n` elements, EPT per thread (`scaler.wgsl` and
/// `clip.wgsl`): (workgroups, workgroups launched).
pub(super) fn geometry(n: usize) -> ([u32; 3], u32) {
    let groups = n.div_ceil(WG as usize * EPT).max(1);
    let wg = grid_1d(groups * WG as usize, WG);
    (wg, wg[0] * wg[1] * wg[2])
}

/// A one-thread kernel of the GradScaler state alone (inert when disabled).
fn state_kernel(
    ctx: &GpuContext,
    state: &Arc<GpuBuffer>,
    enabled: bool,
    entry: &'static str,
) -> Result<Kernel> {
    let one = grid_if(enabled, [1, 1, 1]);
    ctx.kernel(
        &KernelDesc::new(&SHADER, entry),
        &[("state", Arg::Buffer(state))],
        one,
    )
}

pub struct GradScaler {
    config: ScalerConfig,
    state: Arc<GpuBuffer>,
    begin_step: Kernel,
    update: Kernel,
    /// Host API bookkeeping: unscale() ran since the last update() (PyTorch's per-optimizer
    /// UNSCALED stage).
    unscaled: bool,
    /// found_inf may be set outside a trainer's step: [`GradScaler::begin_pending`].
    begin_pending: AtomicBool,
}

impl GradScaler {
    pub fn new(ctx: &GpuContext, config: ScalerConfig) -> Result<Self> {
        config.validate()?;
        let state = ctx.alloc_storage("grad_scaler.state", (STATE_WORDS * 4) as u64);
        let begin_step = state_kernel(ctx, &state, config.enabled, "begin_step")?;
        let update = state_kernel(ctx, &state, config.enabled, "update")?;
        let scaler = Self {
            config,
            state,
            begin_step,
            update,
            unscaled: false,
            begin_pending: AtomicBool::new(false),
        };
        let scale = if config.enabled {
            config.init_scale
        } else {
            1.0
        };
        scaler.write_state(ctx, scale, 0, &config);
        Ok(scaler)
    }

    fn write_state(&self, ctx: &GpuContext, scale: f32, tracker: i32, c: &ScalerConfig) {
        let mut words = [0u32; STATE_WORDS];
        words[WORD_SCALE] = scale.to_bits();
        words[WORD_GROWTH_TRACKER] = tracker as u32;
        words[WORD_FOUND_INF] = 0;
        for (word, factor) in [
            (WORD_GROWTH_FACTOR, c.growth_factor),
            (WORD_BACKOFF_FACTOR, c.backoff_factor),
        ] {
            let bits = factor.to_bits();
            words[word] = bits as u32;
            words[word + 1] = (bits >> 32) as u32;
        }
        words[WORD_GROWTH_INTERVAL] = c.growth_interval;
        words[WORD_INV_SCALE] = inv_scale_of(scale).to_bits();
        words[WORD_ENABLED] = c.enabled as u32;
        ctx.write_buffer(&self.state, 0, bytemuck::cast_slice(&words));
    }

    /// The GPU state buffer (layout in the module docs): word [`WORD_SCALE`] is the loss
    /// backward's seed.
    pub fn state_buffer(&self) -> &Arc<GpuBuffer> {
        &self.state
    }

    pub fn enabled(&self) -> bool {
        self.config.enabled
    }

    pub fn config(&self) -> &ScalerConfig {
        &self.config
    }

    /// Clears found_inf: record it at the start of each effective batch, before unscale.
    pub fn begin_step_kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        state_kernel(ctx, &self.state, self.config.enabled, "begin_step")
    }

    /// Whether a step must clear found_inf itself before its unscale, recording
    /// [`GradScaler::begin_step_kernel`]: an unscale ran or was handed out since the last
    /// step's [`GradScaler::update_then_begin_kernel`] cleared it.
    pub fn begin_pending(&self) -> bool {
        self.begin_pending.load(Ordering::Relaxed)
    }

    /// A step recorded [`GradScaler::begin_step_kernel`] where [`GradScaler::begin_pending`].
    pub fn clear_begin_pending(&self) {
        self.begin_pending.store(false, Ordering::Relaxed);
    }

    /// One fused kernel over the flat f32 gradient buffer: `g *= 1/scale` and found_inf |=
    /// any inf or NaN (one dispatch per piece where the buffer passes the binding limit:
    /// [`GpuContext::flat_pieces`]). A disabled scaler gives a kernel that does nothing
    /// (PyTorch's `unscale_` returns at once when disabled).
    pub fn unscale_kernel(
        &self,
        ctx: &GpuContext,
        grads: &Arc<GpuBuffer>,
        n: usize,
    ) -> Result<Kernel> {
        check_flat_f32(ctx, "GradScaler.unscale", grads, n)?;
        // Whoever records it may set found_inf where no update_then_begin clears it.
        self.begin_pending
            .store(self.config.enabled, Ordering::Relaxed);
        let piece_kernel = |piece: Range<usize>| {
            let (wg, _) = geometry(piece.len());
            let sizes = Sizes {
                n: piece.len() as u32,
                ..Default::default()
            };
            ctx.kernel(
                &KernelDesc::new(&SHADER, "unscale"),
                &[
                    ("state", Arg::Buffer(&self.state)),
                    ("grads", f32_piece(grads, &piece)),
                    ("sizes", Arg::Uniform(bytemuck::bytes_of(&sizes))),
                ],
                grid_if(self.config.enabled, wg),
            )
        };
        let kernels = ctx.flat_pieces(n).into_iter().map(piece_kernel);
        in_order(kernels.collect::<Result<_>>()?)
    }

    /// PyTorch's `_amp_update_scale_` in one thread (inert when disabled).
    pub fn update_kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        state_kernel(ctx, &self.state, self.config.enabled, "update")
    }

    /// [`GradScaler::update_kernel`], then found_inf cleared for the next step (what
    /// [`GradScaler::begin_step_kernel`] does): a trainer's step ends with it, after copying
    /// found_inf into its metrics, so the next step needs no begin dispatch.
    pub fn update_then_begin_kernel(&self, ctx: &GpuContext) -> Result<Kernel> {
        state_kernel(ctx, &self.state, self.config.enabled, "update_then_begin")
    }

    /// Eager `scaler.unscale_(optimizer)`: clears found_inf, then unscales and checks `grads`
    /// (one submit, no wait). A second call before [`GradScaler::update`] is an error.
    pub fn unscale(&mut self, ctx: &GpuContext, grads: &Arc<GpuBuffer>, n: usize) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        if self.unscaled {
            return Err(Error::InvalidArgument(
                "unscale_() has already been called on this optimizer since the last update()"
                    .into(),
            ));
        }
        let k = self.unscale_kernel(ctx, grads, n)?;
        ctx.run(&[&self.begin_step, &k]);
        self.unscaled = true;
        Ok(())
    }

    /// Eager `scaler.update()` (one submit, no wait). As in PyTorch, it needs the inf check
    /// of an unscale since the last update.
    pub fn update(&mut self, ctx: &GpuContext) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        if !self.unscaled {
            return Err(Error::InvalidArgument(
                "No inf checks were recorded prior to update() (call unscale first)".into(),
            ));
        }
        ctx.run(&[&self.update]);
        self.unscaled = false;
        Ok(())
    }

    /// Read the state buffer (asynchronous: works on the web; outside the step loop).
    pub async fn snapshot_async(&self, ctx: &GpuContext) -> Result<ScalerSnapshot> {
        let bytes = ctx
            .read_bytes_async(&self.state, 0, (STATE_WORDS * 4) as u64)
            .await?;
        Ok(decode_snapshot(&bytes))
    }

    /// Blocking [`GradScaler::snapshot_async`] (native only; counts as a host wait).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn snapshot(&self, ctx: &GpuContext) -> Result<ScalerSnapshot> {
        let bytes = ctx.read_bytes(&self.state, 0, (STATE_WORDS * 4) as u64)?;
        Ok(decode_snapshot(&bytes))
    }

    /// `scaler.get_scale()`: 1.0 for a disabled scaler, without touching the GPU.
    pub async fn get_scale_async(&self, ctx: &GpuContext) -> Result<f32> {
        if !self.config.enabled {
            return Ok(1.0);
        }
        Ok(self.snapshot_async(ctx).await?.scale)
    }

    /// Blocking `scaler.get_scale()` (native only, outside the step loop).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn get_scale(&self, ctx: &GpuContext) -> Result<f32> {
        if !self.config.enabled {
            return Ok(1.0);
        }
        Ok(self.snapshot(ctx)?.scale)
    }

    fn state_dict_from(&self, s: Option<ScalerSnapshot>) -> ScalerStateDict {
        match s {
            None => ScalerStateDict::default(),
            Some(s) => ScalerStateDict {
                scale: Some(s.scale),
                growth_factor: Some(self.config.growth_factor),
                backoff_factor: Some(self.config.backoff_factor),
                growth_interval: Some(self.config.growth_interval),
                growth_tracker: Some(s.growth_tracker),
            },
        }
    }

    /// `scaler.state_dict()` (empty for a disabled scaler, as in PyTorch).
    pub async fn state_dict_async(&self, ctx: &GpuContext) -> Result<ScalerStateDict> {
        if !self.config.enabled {
            return Ok(ScalerStateDict::default());
        }
        let s = self.snapshot_async(ctx).await?;
        Ok(self.state_dict_from(Some(s)))
    }

    /// Blocking `scaler.state_dict()` (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn state_dict(&self, ctx: &GpuContext) -> Result<ScalerStateDict> {
        if !self.config.enabled {
            return Ok(ScalerStateDict::default());
        }
        let s = self.snapshot(ctx)?;
        Ok(self.state_dict_from(Some(s)))
    }

    /// `scaler.load_state_dict(d)`: restores scale, factors, interval and growth tracker
    /// (queued write, no wait). A no-op for a disabled scaler, as in PyTorch.
    pub fn load_state_dict(&mut self, ctx: &GpuContext, d: &ScalerStateDict) -> Result<()> {
        if !self.config.enabled {
            return Ok(());
        }
        if d.is_empty() {
            return Err(Error::InvalidArgument(
                "The source state dict is empty, possibly because it was saved from a disabled instance of GradScaler."
                    .into(),
            ));
        }
        let missing =
            |key: &str| Error::InvalidArgument(format!("GradScaler state dict has no `{key}`"));
        let config = ScalerConfig {
            init_scale: d.scale.ok_or_else(|| missing("scale"))?,
            growth_factor: d.growth_factor.ok_or_else(|| missing("growth_factor"))?,
            backoff_factor: d.backoff_factor.ok_or_else(|| missing("backoff_factor"))?,
            growth_interval: d
                .growth_interval
                .ok_or_else(|| missing("growth_interval"))?,
            enabled: true,
        };
        let tracker = d.growth_tracker.ok_or_else(|| missing("_growth_tracker"))?;
        config.validate()?;
        if tracker < 0 {
            return Err(Error::InvalidArgument(format!(
                "GradScaler: _growth_tracker must be >= 0, got {tracker}"
            )));
        }
        self.write_state(ctx, config.init_scale, tracker, &config);
        self.config = config;
        Ok(())
    }
}

fn decode_snapshot(bytes: &[u8]) -> ScalerSnapshot {
    let w: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
    ScalerSnapshot {
        scale: f32::from_bits(w[WORD_SCALE]),
        growth_tracker: w[WORD_GROWTH_TRACKER] as i32,
        found_inf: w[WORD_FOUND_INF] != 0,
        inv_scale: f32::from_bits(w[WORD_INV_SCALE]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scaler shader's `#consts scaler_state` names the same words as the WORD_* constants
    /// (read back from the specialised WGSL, as the GPU gets it).
    #[test]
    fn shader_state_words_match_the_rust_constants() {
        let wgsl = SHADER.variants().unwrap()[0].specialise().unwrap();
        let word = |name: &str| -> usize {
            let line = wgsl
                .lines()
                .find(|l| l.starts_with(&format!("const {name}: u32 = ")))
                .unwrap_or_else(|| panic!("no {name} in the scaler shader"));
            line.rsplit(' ')
                .next()
                .unwrap()
                .trim_end_matches("u;")
                .parse()
                .unwrap()
        };
        assert_eq!(word("STATE_WORDS"), STATE_WORDS);
        assert_eq!(word("SCALE"), WORD_SCALE);
        assert_eq!(word("GROWTH_TRACKER"), WORD_GROWTH_TRACKER);
        assert_eq!(word("FOUND_INF"), WORD_FOUND_INF);
        assert_eq!(word("GROWTH_FACTOR"), WORD_GROWTH_FACTOR);
        assert_eq!(word("BACKOFF_FACTOR"), WORD_BACKOFF_FACTOR);
        assert_eq!(word("GROWTH_INTERVAL"), WORD_GROWTH_INTERVAL);
        assert_eq!(word("INV_SCALE"), WORD_INV_SCALE);
        assert_eq!(word("ENABLED"), WORD_ENABLED);
    }
}
