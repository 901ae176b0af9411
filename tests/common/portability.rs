//! naga's translations of a shader variant, as the portability tests check them: validation,
//! then SPIR-V (Vulkan), MSL (Metal) and HLSL (DX12, shader model 6.2 with 16-bit types).
//! Cooperative-matrix variants go to SPIR-V 1.4 and MSL only (naga's HLSL writer has none).

use naga::back::{hlsl, msl, spv};
use naga::valid::ModuleInfo;
use webgpu_amp::shader::{Variant, validate};

pub fn to_spirv(module: &naga::Module, info: &ModuleInfo, version: (u8, u8)) -> Result<(), String> {
    let options = spv::Options {
        lang_version: version,
        ..Default::default()
    };
    spv::write_vec(module, info, &options, None)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub fn to_msl(module: &naga::Module, info: &ModuleInfo) -> Result<(), String> {
    let options = msl::Options {
        lang_version: (2, 4),
        ..Default::default()
    };
    let pipeline = msl::PipelineOptions::default();
    msl::write_string(module, info, &options, &pipeline)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub fn to_hlsl(module: &naga::Module, info: &ModuleInfo) -> Result<(), String> {
    let options = hlsl::Options {
        shader_model: hlsl::ShaderModel::V6_2,
        ..Default::default()
    };
    let mut out = String::new();
    let pipeline = hlsl::PipelineOptions::default();
    hlsl::Writer::new(&mut out, &options, &pipeline)
        .write(module, info, None)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// What is wrong with one variant on any target (empty: it validates and translates), and
/// whether it is a cooperative-matrix variant.
pub fn check_variant(v: &Variant) -> (Vec<String>, bool) {
    let label = v.label();
    let src = match v.specialise() {
        Ok(src) => src,
        Err(e) => return (vec![format!("{label}: specialise: {e}")], false),
    };
    let (module, info) = match validate(&label, &src) {
        Ok(x) => x,
        Err(e) => return (vec![format!("{label}: naga validation: {e}")], false),
    };
    let cooperative = src.contains("enable wgpu_cooperative_matrix;");
    let targets = if cooperative {
        vec![
            ("SPIR-V 1.4", to_spirv(&module, &info, (1, 4))),
            ("MSL", to_msl(&module, &info)),
        ]
    } else {
        vec![
            ("SPIR-V", to_spirv(&module, &info, (1, 3))),
            ("MSL", to_msl(&module, &info)),
            ("HLSL", to_hlsl(&module, &info)),
        ]
    };
    let failures = targets
        .into_iter()
        .filter_map(|(target, r)| r.err().map(|e| format!("{label}: {target}: {e}")))
        .collect();
    (failures, cooperative)
}
