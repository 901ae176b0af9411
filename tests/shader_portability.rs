//! Every WGSL variant the ops can compile is validated by naga and translated to SPIR-V
//! (Vulkan), MSL (Metal) and HLSL (DX12, shader model 6.2 with 16-bit types for f16). This
//! is how Metal and DX12 portability is checked without that hardware.
//!
//! Cooperative-matrix variants (`enable wgpu_cooperative_matrix;`, tensor cores) go to SPIR-V
//! 1.4 and MSL only: wgpu 30 offers cooperative matrices on Vulkan and Metal, and naga's HLSL
//! writer has no cooperative types. Running them needs such an adapter (tests/matmul_coop.rs).

use naga::back::{hlsl, msl, spv};
use naga::valid::ModuleInfo;
use webgpu_amp::shader::validate;
use webgpu_amp::variants::all as all_variants;

fn to_spirv(module: &naga::Module, info: &ModuleInfo, version: (u8, u8)) -> Result<(), String> {
    let options = spv::Options {
        lang_version: version,
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
    let mut cooperative = 0;
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
        let targets = if src.contains("enable wgpu_cooperative_matrix;") {
            cooperative += 1;
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
        for (target, r) in targets {
            if let Err(e) = r {
                failures.push(format!("{label}: {target}: {e}"));
            }
        }
    }
    println!(
        "checked {} shader variants of {} shader files ({:?}) on SPIR-V, MSL and HLSL \
         ({cooperative} cooperative-matrix variants on SPIR-V 1.4 and MSL only)",
        variants.len(),
        shaders.len(),
        shaders
    );
    assert!(
        cooperative > 0,
        "no cooperative-matrix variant was checked: the tensor-core matmul is untested"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// naga 30's SPIR-V writer must see a cooperative store's matrix and pointer already emitted;
/// the kernel computes both into `let`s first. Check that the SPIR-V of the tensor-core
/// kernel really holds the cooperative-matrix instructions (not an empty translation).
#[test]
fn cooperative_matmul_spirv_uses_cooperative_matrix_instructions() {
    let variants = all_variants().expect("variant list");
    let v = variants
        .iter()
        .find(|v| v.shader == "matmul_coop")
        .expect("a matmul_coop variant");
    let src = v.specialise().unwrap();
    assert!(
        src.starts_with("enable f16;\nenable wgpu_cooperative_matrix;\n"),
        "{}",
        &src[..80]
    );
    let (module, info) = validate(&v.label(), &src).expect("validates");
    let options = spv::Options {
        lang_version: (1, 4),
        ..Default::default()
    };
    let words = spv::write_vec(&module, &info, &options, None).expect("SPIR-V");
    // OpCooperativeMatrixMulAddKHR = 4459, OpCooperativeMatrixLoadKHR = 4457,
    // OpCooperativeMatrixStoreKHR = 4458 (SPV_KHR_cooperative_matrix).
    let ops: std::collections::BTreeSet<u32> = {
        let mut ops = std::collections::BTreeSet::new();
        let mut i = 5; // header
        while i < words.len() {
            let (count, op) = (words[i] >> 16, words[i] & 0xffff);
            ops.insert(op);
            i += count.max(1) as usize;
        }
        ops
    };
    for (op, name) in [(4457, "load"), (4458, "store"), (4459, "multiply-add")] {
        assert!(
            ops.contains(&op),
            "no cooperative {name} (opcode {op}) in the SPIR-V"
        );
    }
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
