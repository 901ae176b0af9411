//! Neural-network layers and models.
//!
//! - [`layers`]: one file per layer family, JSON form to planned kernels, forward and
//!   backward side by side;
//! - [`model`]: a model as named layers with resolved shapes ([`ModelSpec`]), from JSON or
//!   Rust ([`builder`]); [`presets`]: the tutorials' networks; [`gpt`]: nanoGPT's GPT;
//! - [`params`]: every parameter in flat GPU buffers (master weights, gradients, the
//!   low-precision copy);
//! - [`network`]: a model planned on the GPU for one batch size: the forward and backward
//!   loops ([`plan`] is what they hand each layer), then the [`loss`]; [`precision`] walks
//!   the same layers for the precision map, without the GPU.

mod buffers;
pub mod builder;
pub mod gpt;
pub mod layers;
pub mod loss;
pub mod model;
pub mod network;
pub mod params;
pub mod plan;
pub mod precision;
pub mod presets;

pub use builder::SequentialBuilder;
pub use gpt::GptConfig;
pub use layers::{Layer, LayerConfig, init_bound};
pub use loss::LossKind;
pub use model::{ModelSpec, NamedLayer, ParamSpec};
pub use network::{Network, precision_map};
pub use presets::{PRESETS, preset};
