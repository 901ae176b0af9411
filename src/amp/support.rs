//! Which precision modes run on an adapter, and with which storage: the per-mode half of
//! `webgpu-amp info`. The modes are [`Precision::ALL`]; the adapter side (capabilities, f16
//! storage, notes) comes from [`crate::gpu`].

use super::policy::Precision;
use crate::dtype::{DType, F16Storage, Storage};
use crate::gpu::{AdapterDescription, Capabilities, F16StorageChoice, TensorCoreChoice};
use crate::ops::bodies;
use crate::ops::flash_attention::{COOP_MAX_HEAD_SIZE, FlashBody};
use crate::ops::matmul::MatmulKernel;

/// Whether one precision mode runs on an adapter, and how its low-precision tensors are stored.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModeSupport {
    /// [`Precision::name`]: `f32`, `amp-f16`, `amp-bf16` or `f16`.
    pub mode: &'static str,
    /// False only when the f16 storage asked for cannot be had (native without shader-f16).
    pub runs: bool,
    /// [`Storage::name`] of the mode's low-precision tensors: `f32`, `f16` (`array<f16>`),
    /// `f16packed` or `bf16` (both two per `u32`).
    pub storage: &'static str,
    /// One line for people.
    pub detail: String,
    /// The matmul body the mode's low-precision products run on here
    /// ([`MatmulKernel::name`]: `direct`, `tiled` or `coop`), with the tensor-core
    /// configuration when it is `coop`.
    pub matmul: String,
    /// The fused attention's body for the mode's tensors here ([`FlashBody::name`]: `coop`
    /// up to the largest head size the tensor-core body takes, else `tiled` or `rowwise`).
    pub attention: String,
    /// The convolutions' body ([`bodies::ConvBody::name`]: `coop` or `simt`).
    pub conv: String,
}

impl ModeSupport {
    /// What `precision` would do on an adapter with `caps` under the f16 storage `choice`.
    pub fn of(precision: Precision, caps: &Capabilities, choice: F16StorageChoice) -> Self {
        let mode = precision.name();
        let dtype = precision.low_dtype();
        let storage = match (dtype, caps.resolve_f16_storage(choice)) {
            (DType::F16, Err(e)) => {
                return Self {
                    mode,
                    runs: false,
                    storage: Storage::F16.name(),
                    detail: e.to_string(),
                    matmul: "-".to_string(),
                    attention: "-".to_string(),
                    conv: "-".to_string(),
                };
            }
            (_, Ok(f16)) => Storage::for_dtype(dtype, f16),
            (_, Err(_)) => Storage::for_dtype(dtype, F16Storage::Packed),
        };
        Self {
            mode,
            runs: true,
            storage: storage.name(),
            detail: format!("{}: {}", precision.low_dtype_scope(), storage.layout()),
            matmul: matmul_path(caps, storage),
            attention: attention_path(caps, storage),
            conv: bodies::conv(caps, &[storage, storage]).name().to_string(),
        }
    }

    /// Every precision mode, in [`Precision::ALL`]'s order.
    pub fn all(caps: &Capabilities, choice: F16StorageChoice) -> Vec<Self> {
        Precision::ALL
            .into_iter()
            .map(|p| Self::of(p, caps, choice))
            .collect()
    }
}

/// The matmul body `Auto` picks for inputs of `storage` on an adapter with `caps`.
fn matmul_path(caps: &Capabilities, storage: Storage) -> String {
    let body = MatmulKernel::Auto.resolve_for(caps, storage, storage);
    match (body, caps.tensor_cores.config()) {
        (MatmulKernel::Coop, Some(c)) => format!("coop (tensor cores {})", c.describe()),
        (MatmulKernel::Tiled, _) if storage == Storage::BF16 => {
            "tiled SIMT (bf16 has no cooperative-matrix type in naga 30)".to_string()
        }
        (MatmulKernel::Tiled, _) => "tiled SIMT".to_string(),
        (MatmulKernel::Direct, _) => "direct (CPU adapter: no workgroup memory)".to_string(),
        (body, _) => body.name().to_string(),
    }
}

/// The fused attention's body `Auto` picks for tensors of `storage` on an adapter with
/// `caps` (`--attention fused`, the default).
fn attention_path(caps: &Capabilities, storage: Storage) -> String {
    // f32 never runs on tensor cores: the SIMT body of this adapter.
    let simt = FlashBody::Auto.resolve(caps, &[Storage::F32], 1).name();
    let coop_up_to = (1..=COOP_MAX_HEAD_SIZE)
        .rev()
        .find(|&hs| FlashBody::Auto.resolve(caps, &[storage], hs) == FlashBody::Coop);
    match coop_up_to {
        Some(hs) => {
            // The blocks the largest head gets (workgroup memory decides them).
            let blocks = FlashBody::coop_blocks(caps, None, hs).unwrap_or_default();
            format!(
                "coop (tensor cores) for head sizes up to {hs} ({blocks} at head size {hs}), \
                 {simt} SIMT above"
            )
        }
        None => format!("{simt} SIMT"),
    }
}

/// One adapter for `webgpu-amp info`: its description and, for an f16-storage request, what
/// each precision mode would do there.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AdapterReport {
    /// Name, backend, driver, capabilities, automatic f16 storage and notes (their JSON keys
    /// sit at the top level of the report).
    #[serde(flatten)]
    pub adapter: AdapterDescription,
    /// The f16 storage request that [`Self::modes`] answers.
    pub f16_storage_requested: F16StorageChoice,
    /// Every precision mode ([`Precision::ALL`]): whether it runs and with which storage.
    pub modes: Vec<ModeSupport>,
}

impl AdapterReport {
    /// The report, with [`Self::modes`] answering for the f16 storage `choice` (tensor cores
    /// as `auto` decides).
    pub fn with_f16_choice(adapter: &wgpu::Adapter, choice: F16StorageChoice) -> Self {
        Self::with_choices(adapter, choice, TensorCoreChoice::Auto)
    }

    /// The report for an f16 storage and a tensor-core choice (`info --tensor-cores`).
    pub fn with_choices(
        adapter: &wgpu::Adapter,
        choice: F16StorageChoice,
        tensor_cores: TensorCoreChoice,
    ) -> Self {
        Self::new(AdapterDescription::new(adapter, tensor_cores), choice)
    }

    /// The report from what an adapter says about itself (separate from the adapter so the
    /// reasoning for other backends can be checked on this machine).
    pub fn from_parts(
        info: wgpu::AdapterInfo,
        capabilities: Capabilities,
        choice: F16StorageChoice,
    ) -> Self {
        Self::new(AdapterDescription::from_parts(info, capabilities), choice)
    }

    pub fn new(adapter: AdapterDescription, choice: F16StorageChoice) -> Self {
        Self {
            modes: ModeSupport::all(&adapter.capabilities, choice),
            adapter,
            f16_storage_requested: choice,
        }
    }
}
