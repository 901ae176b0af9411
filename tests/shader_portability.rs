//! Every WGSL variant the ops can compile is validated by naga and translated to SPIR-V
//! (Vulkan), MSL (Metal) and HLSL (DX12, shader model 6.2 with 16-bit types for f16). This
//! is how Metal and DX12 portability is checked without that hardware.

use naga::back::{hlsl, msl, spv};
use naga::valid::ModuleInfo;
use webgpu_amp::shader::validate;
use webgpu_amp::variants::all as all_variants;

fn to_spirv(module: &naga::Module, info: &ModuleInfo) -> Result<(), String> {
    let options = spv::Options {
        lang_version: (1, 3),
        ..Default::default()
    };
    spv::write_vec(module, info, &options, None)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn to_msl(module: &naga::Module, info: &ModuleInfo) -> Result<(), String> {
    let options = msl::Options {
        lang_version: (2, 4),
        ..Default::default()
    };
    let pipeline = msl::PipelineOptions::default();
    msl::write_string(module, info, &options, &pipeline)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn to_hlsl(module: &naga::Module, info: &ModuleInfo) -> Result<(), String> {
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

#[test]
fn every_variant_validates_and_translates_to_spirv_msl_hlsl() {
    let variants = all_variants().expect("variant list");
    assert!(!variants.is_empty());
    let mut failures = Vec::new();
    let mut shaders = std::collections::BTreeSet::new();
    for v in &variants {
        shaders.insert(v.shader);
        let label = v.label();
        let src = v.specialise().expect("specialise");
        let (module, info) = match validate(&label, &src) {
            Ok(x) => x,
            Err(e) => {
                failures.push(format!("{label}: naga validation: {e}"));
                continue;
            }
        };
        for (target, r) in [
            ("SPIR-V", to_spirv(&module, &info)),
            ("MSL", to_msl(&module, &info)),
            ("HLSL", to_hlsl(&module, &info)),
        ] {
            if let Err(e) = r {
                failures.push(format!("{label}: {target}: {e}"));
            }
        }
    }
    println!(
        "checked {} shader variants of {} shader files ({:?}) on SPIR-V, MSL and HLSL",
        variants.len(),
        shaders.len(),
        shaders
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_shader_file_has_variants() {
    let variants = all_variants().expect("variant list");
    for (name, _) in webgpu_amp::shader::SHADERS {
        assert!(
            variants.iter().any(|v| v.shader == *name),
            "shader {name} has no variants in variants::all(): its portability is untested"
        );
    }
}
