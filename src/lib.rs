//! webgpu-amp: mixed-precision (AMP) neural-network training on WebGPU.
//!
//! The user guide is `docs/guide/` (README.md links every chapter);
//! `docs/architecture.md` walks the layers from the CLI down to the WGSL, follows one
//! training step through the files in reading order, and shows what adding a layer (one Rust
//! file and one registry line; `tests/custom_layer.rs` adds one from outside the crate), an
//! activation (one row of [`ops::unary`]'s table), an op with its own kernel (its WGSL and
//! its dispatcher, which declares the shader, its uniform block and its variants once;
//! `tests/custom_op.rs` adds one from outside the crate) and a kernel of the step's own
//! phases (`train/stepping/step.rs`'s `StepKernels`) take.
//!
//! # Module map
//!
//! This list is the one map of the code; the guide and `docs/architecture.md` link here.
//!
//! - [`dtype`]: dtypes (f32, f16, bf16), f16 storage (native, packed), storages (f32, native
//!   f16, packed f16, bf16): plain data
//! - [`shader`]: a shader's one declaration (`ShaderDecl`: name, source, uniform structs,
//!   variant grid), WGSL specialisation per storage (`#tensor`, `#include`, `#struct`
//!   directives, `#workgroup_builtins` in an entry point's parameters, `#map` and `#unary`
//!   entry points), uniform structs written once in Rust (`wgsl_struct!`), variant grids
//!   (`Grid`), naga validation
//! - [`gpu`]: adapter choice (`adapter.rs`), capabilities and adapter description
//!   (`capabilities.rs`), tensor cores and their fragment shape (`tensor_cores.rs`), GPU errors
//!   and device loss (`faults.rs`), the context (`context.rs`), counting allocator, pipeline
//!   cache, readbacks
//! - [`tensor`]: GPU tensors: a dtype, a shape and a view of a counted buffer
//! - [`ops`]: one dispatcher per WGSL file, forward and backward together: matmul (incl.
//!   strided batches), conv, pool, avgpool, elementwise, the unary ops (activations) from one
//!   table, SwiGLU over its SiLU, reduce, loss, histogram, layernorm (and Llama's RMSNorm: its
//!   `RMS` variant), batchnorm, RoPE (`rope.rs`), embedding, augmentation, where attention's q,
//!   k and v sit (`qkv.rs`: packed or separate, grouped-query heads), the causal attention
//!   softmax and the manual attention around it, fused attention (`flash_attention/` ↔
//!   `flash_forward.wgsl`, `flash_backward.wgsl`, the tensor-core body `flash_coop_forward.wgsl`,
//!   `flash_coop_backward.wgsl`, `flash_coop_dq.wgsl`), dropout, sampling
//! - [`amp`]: the precision policy and which modes run on an adapter, the GPU GradScaler,
//!   gradient clipping, rounding to f16/bf16
//! - [`optim`]: fused SGD, Adam and AdamW over flat parameter buffers
//! - [`variants`]: every declared shader and its variants (from `ops::SHADERS`,
//!   `amp::SHADERS`, `optim::SHADERS`), for the portability tests, and the ones a browser can
//!   select exported with their bind-group layouts (for Tint: `scripts/tint-check.sh`)
//! - [`selftest`]: `webgpu-amp selftest`, every op family forward and backward on the adapter
//!   against CPU references (`reference.rs`, `cnn.rs`), in f32, native and packed f16 and bf16
//! - [`data`]: data sets (embedded MNIST and Hamlet, IDX, Fashion-MNIST, CIFAR-10, text, safetensors,
//!   synthetic), batching (`loader.rs`), a gathered batch and the one pair of batch types
//!   the trainer takes (`batch.rs`: `Batch`, `BatchInput`, `BatchTargets`), Hugging Face
//!   `tokenizer.json` files (`tokenizer.rs`) and transformers folders (`hf/`: `config.json`
//!   as a `LlamaConfig`, safetensors weights, sharded or not, read and written)
//! - [`nn`]: `layers/`: one file per layer family (JSON form, shapes and parameters, autocast
//!   op, forward and backward planning side by side; `unary.rs` is every activation's), the
//!   layer traits and `NamedLayer` (`layer.rs`), `registry.rs` (the JSON layer kinds), `graph.rs`
//!   (compositions: forks and joins), `plan/` and `tape.rs` (the forward, recorded on a
//!   tape; the backward, the tape replayed in reverse, fork gradients summed in one place),
//!   `recompute.rs` (activation outputs the backward recomputes instead of keeping) and
//!   `precision.rs` (the precision map's walk); `model.rs` (a model as named layers, from
//!   JSON or Rust), `presets.rs`, `family.rs` and `families.rs` (model families: the traits,
//!   the list), `gpt/` (nanoGPT's GPT: config, presets, recipe, builder, names), `params.rs`
//!   (flat parameter store), `buffers.rs` (the layers' state that is not a parameter), `inference.rs` (the forward pass alone, for text generation),
//!   `network.rs` (forward, loss and backward), `transient.rs` (activations no backward keeps
//!   share buffers), `loss.rs`
//! - [`dist`]: data-parallel collectives: the `Collective` trait, Open MPI through the `mpi`
//!   crate (`mpi.rs`, feature `mpi`), PyTorch's `DistributedSampler` (`sampler.rs`)
//! - [`interrupt`]: the SIGINT/SIGTERM handler (an interrupted run saves, then exits)
//! - [`train`]: the one run builder and its validation (`config.rs`), a model and its data
//!   resolved together (`prepare.rs`), one step in order with the kernels of each phase
//!   (`step.rs`) on the planned trainer (`trainer.rs`) with its batch upload (`batch.rs`),
//!   the steps in flight (`in_flight.rs`) and their stats ring (`stats.rs`), its memory
//!   planned without allocating it (`memory.rs`), validation (`evaluate.rs`), loss estimates
//!   (`estimate.rs`), the one sampling core (`sample.rs`), step profiles (`profile.rs`), the
//!   one training loop `Run` with `advance` (`run.rs`) and its blocking CLI form
//!   (`run_blocking.rs`) with periodic work on one schedule (`periodic.rs`), checkpoints, text
//!   generation from a GPT checkpoint (`generate.rs`), a process's place in a data-parallel
//!   run (`rank.rs`, the gradient all-reduce inside the step in `rank/exchange.rs`; joining a
//!   job: `distributed.rs`)
//! - [`app`]: the egui app: `App` (all UI state) with one file per panel; `session.rs`, the
//!   UI-free controller that advances one `train::Run` per mode inside frames; `model.rs`
//!   (model and data resolved as the CLI does); `probes/` (asynchronous validation, kernel
//!   profile, gradient histogram, sampled text); `autorun.rs` (the page's query string and
//!   JSON result); the thin entries `native.rs` (`webgpu-amp gui`) and `web.rs`
//!   (`start(canvas_id)`, wasm32 only, with `web/driver.rs`: timer-driven training,
//!   `web/fallback.rs`: the canvas fallback, `web/page.rs`: the page's lines)
//!
//! Beside the library, in the repository:
//!
//! - `src/cli/`: the `webgpu-amp` command (the binary)
//! - `shaders/`: every WGSL kernel, one file per dispatcher, named like it (`conv.wgsl` ↔
//!   `src/ops/conv/`, `round.wgsl` ↔ `src/amp/round.rs`), each declared once by it
//!   (`ShaderDecl`); `prelude.wgsl` holds the portable rounding and launch indices,
//!   `include/` what some shaders share (the workgroup reductions and the final pass over
//!   partial sums, the matmul uniform block, tile staging and epilogue, the convolutions'
//!   index math and epilogues, the tensor-core tile loop `coop_gemm.wgsl`, the fused
//!   attention's SIMT tiles and fragment products `flash_tiles.wgsl`, `flash_coop.wgsl`, `flash_coop_grads.wgsl`);
//!   `matmul_coop.wgsl`, `conv_coop.wgsl` and `flash_coop_*.wgsl` are the tensor-core kernels
//!   (`docs/architecture.md`, "Matmul paths")
//! - `web/`: `index.html`, the build output `pkg/` (ignored by git) and the end-to-end test
//!   `e2e/`
//! - `examples/`: the tutorials' programs (linear regression, SimpleCNN FP32 vs AMP, MNIST);
//!   `gpt_grads`, one forward and backward written out for the nanoGPT cross-check;
//!   `unary_values`, every activation of the table for the PyTorch cross-check
//! - `tests/`: GPU tests (run on any adapter, lavapipe included; no adapter is a failure,
//!   never a skip)
//! - `docs/`: the guide (`docs/guide/`) and `architecture.md`
//!
//! Imports run one way, down the layers: `cli`/`app` → `train` → `nn`/`amp`/`optim` → `ops`
//! → `tensor` → `gpu` → `shader` → `dtype` (`variants` sits above the dispatchers; `data`
//! builds on `error` only, `error` on `interrupt` only, `interrupt` on nothing).
//! `tests/layering.rs` checks every `crate::` path.

pub mod amp;
pub mod app;
pub mod data;
pub mod dist;
pub mod dtype;
pub mod error;
pub mod gpu;
pub mod interrupt;
pub mod nn;
pub mod ops;
pub mod optim;
// Blocking read-backs: the CLI's `selftest` (the browser has no blocking reads).
#[cfg(not(target_arch = "wasm32"))]
pub mod selftest;
pub mod shader;
pub mod tensor;
pub mod train;
pub mod variants;

pub use dtype::{DType, F16Storage, Storage};
pub use error::{Error, Result};
pub use gpu::{BackendChoice, F16StorageChoice, GpuContext, GpuOptions, TensorCoreChoice};
pub use tensor::Tensor;
