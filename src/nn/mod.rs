//! Neural-network layers and models.
//!
//! - [`layers`]: one file per layer family, JSON form to planned kernels, forward and
//!   backward side by side; the layer traits, [`NamedLayer`], compositions (forks and
//!   joins, [`layers::graph`]), the forward a layer is planned in ([`layers::plan`]), the
//!   tape the backward replays ([`layers::tape`]) and the precision map's walk
//!   ([`layers::precision`]);
//! - [`model`]: a model as named layers with resolved shapes ([`ModelSpec`]), from JSON or
//!   Rust ([`builder`]); [`presets`]: the tutorials' networks; model families
//!   ([`family`]: the traits; [`families`]: the list), one module each: [`gpt`], nanoGPT's
//!   GPT, and [`resnet`], the CIFAR ResNets (`ModelSpec::of_family` makes a family's model a
//!   `ModelSpec`);
//! - [`params`]: every parameter in flat GPU buffers (master weights, gradients, the
//!   low-precision copy); [`buffers`]: the layers' persistent state that is not a parameter
//!   (running statistics, counters), committed by each applied step;
//! - [`inference`]: the forward loop planned for one batch size (text generation);
//!   [`network`]: that forward, then the [`loss`] and the backward loop (training);
//!   `transient`: activations no backward keeps share buffers; [`keep_f32`]: layers kept in
//!   f32 by name (the policy's per-layer overrides); [`frozen`]: parameters that do not train;
//!   [`probes`]: where each
//!   layer's output and gradients are complete, for the AMP doctor.
//!
//! Files import one way: `layers` (traits, plan, then each layer file) → `family` → `gpt` →
//! `families` → `model` → `builder`/`presets` → `inference` → `network`.

mod arena;
pub mod buffers;
pub mod builder;
pub mod families;
pub mod family;
pub mod frozen;
pub mod gpt;
pub mod inference;
mod json_syntax;
pub mod keep_f32;
pub mod layers;
pub mod llama;
pub mod loss;
pub mod model;
pub mod network;
pub mod params;
pub mod presets;
pub mod probes;
pub mod resnet;
mod transient;

/// The most layers a model description may list: 4096 (a ResNet-152 is about 500). Planning
/// a step walks every layer, so this bounds its time (seconds) before anything is built.
pub const MAX_LAYERS: usize = 4096;

/// The most parameters one model may have: 2^31 (GPT-2 XL has 1.5·10^9). With f32 master
/// weights, gradients and Adam's two moments that is 32 GiB of GPU memory already; the
/// device's own limits are checked after this, before anything is allocated.
pub const MAX_PARAMETERS: u64 = 1 << 31;

pub use builder::SequentialBuilder;
pub use gpt::GptConfig;
pub use layers::attention_kernel::AttentionKernel;
pub use layers::{Layer, LayerConfig, NamedLayer, ParamSpec, init_bound};
pub use loss::LossKind;
pub use model::ModelSpec;
pub use network::{Network, NetworkInputs, precision_map};
pub use presets::{PRESETS, preset};
