//! Neural-network layers and models.
//!
//! - [`layers`]: one file per layer family, JSON form to planned kernels, forward and
//!   backward side by side; the layer traits, [`NamedLayer`], the two loops a layer is
//!   planned in ([`layers::plan`]) and the precision map's walk ([`layers::precision`]);
//! - [`model`]: a model as named layers with resolved shapes ([`ModelSpec`]), from JSON or
//!   Rust ([`builder`]); [`presets`]: the tutorials' networks; [`gpt`]: nanoGPT's GPT as
//!   layer configs (`GptConfig::model_for` in `model.rs` makes it a `ModelSpec`);
//! - [`params`]: every parameter in flat GPU buffers (master weights, gradients, the
//!   low-precision copy);
//! - [`inference`]: the forward loop planned for one batch size (text generation);
//!   [`network`]: that forward, then the [`loss`] and the backward loop (training);
//!   `transient`: activations no backward keeps share buffers; [`keep_f32`]: layers kept in
//!   f32 by name (the policy's per-layer overrides); [`probes`]: where each
//!   layer's output and gradients are complete, for the AMP doctor.
//!
//! Files import one way: `layers` (traits, plan, then each layer file) → `gpt` → `model` →
//! `builder`/`presets` → `inference` → `network`.

mod buffers;
pub mod builder;
pub mod gpt;
pub mod inference;
pub mod keep_f32;
pub mod layers;
pub mod loss;
pub mod model;
pub mod network;
pub mod params;
pub mod presets;
pub mod probes;
mod transient;

pub use builder::SequentialBuilder;
pub use gpt::GptConfig;
pub use layers::attention_kernel::AttentionKernel;
pub use layers::{Layer, LayerConfig, NamedLayer, ParamSpec, init_bound};
pub use loss::LossKind;
pub use model::ModelSpec;
pub use network::{Network, NetworkInputs, precision_map};
pub use presets::{PRESETS, preset};
