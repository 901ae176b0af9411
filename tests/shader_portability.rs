//! Every WGSL variant the ops can compile is validated by naga and translated to SPIR-V
//! (Vulkan), MSL (Metal) and HLSL (DX12, shader model 6.2 with 16-bit types for f16). This
//! is how Metal and DX12 portability is checked without that hardware.
//!
//! Cooperative-matrix variants (`enable wgpu_cooperative_matrix;`, tensor cores) go to SPIR-V
//! 1.4 and MSL only: wgpu 30 offers cooperative matrices on Vulkan and Metal, and naga's HLSL
//! writer has no cooperative types. Running them needs such an adapter (tests/matmul_coop.rs).

mod common;

use common::portability::check_variant;
use naga::back::spv;
use webgpu_amp::shader::validate;
use webgpu_amp::variants::all as all_variants;

#[test]
fn every_variant_validates_and_translates_to_spirv_msl_hlsl() {
    // naga's validation and translation open no adapter: the GL pass would repeat the Vulkan
    // pass's work exactly (~190 s of CI on 2 cores).
    if std::env::var("WEBGPU_AMP_BACKEND").is_ok_and(|b| b == "gl") {
        common::not_checked(
            "every variant through naga to SPIR-V, MSL and HLSL, again under GL: it opens no \
             adapter; the Vulkan pass runs it",
        );
        return;
    }
    let variants = all_variants().expect("variant list");
    assert!(!variants.is_empty());
    let mut failures = Vec::new();
    let mut shaders = std::collections::BTreeSet::new();
    let mut cooperative = 0;
    for v in &variants {
        shaders.insert(v.shader);
        let (failed, coop) = check_variant(v);
        failures.extend(failed);
        cooperative += usize::from(coop);
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

/// Every WGSL file in `shaders/` is the source of exactly one declared shader, and every
/// declaration has variants: a kernel added without its declaration in `ops::SHADERS` (or
/// `amp::SHADERS`, `optim::SHADERS`) would otherwise go untested here.
#[test]
fn every_shader_file_is_declared_once_with_variants() {
    let shaders: Vec<_> = webgpu_amp::variants::shaders().collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).expect("read shaders/") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_none_or(|e| e != "wgsl") || path.ends_with("prelude.wgsl") {
            continue;
        }
        files += 1;
        let text = std::fs::read_to_string(&path).expect("read shader");
        // The file's text, or that text with generated WGSL after it (the unary table's rows).
        let declared: Vec<_> = shaders
            .iter()
            .filter(|s| s.source.starts_with(text.as_str()))
            .collect();
        assert_eq!(
            declared.len(),
            1,
            "{} is the source of {} declared shaders (want 1: a `ShaderDecl` in its op file, \
             listed in ops::SHADERS)",
            path.display(),
            declared.len()
        );
    }
    assert_eq!(
        files,
        shaders.len(),
        "a declared shader has no file in shaders/"
    );
    let mut names = std::collections::BTreeSet::new();
    for shader in shaders {
        assert!(
            names.insert(shader.name),
            "two shaders are named {}",
            shader.name
        );
        let variants = shader.variants().expect("variants");
        assert!(
            !variants.is_empty(),
            "shader {} has no variants: its portability is untested",
            shader.name
        );
    }
}

#[test]
fn every_include_is_used_by_some_shader() {
    // Reached from a shader's source, directly or through includes it reaches
    // (include/invocation.wgsl is included by coop_gemm and flash_coop).
    let includes = webgpu_amp::shader::INCLUDES;
    let mut reached: Vec<&str> = webgpu_amp::variants::shaders().map(|s| s.source).collect();
    let mut used = vec![false; includes.len()];
    while let Some(text) = reached.pop() {
        for (i, (name, source)) in includes.iter().enumerate() {
            if !used[i] && text.contains(&format!("#include {name}")) {
                used[i] = true;
                reached.push(source);
            }
        }
    }
    for ((name, _), used) in includes.iter().zip(used) {
        assert!(used, "shaders/include/{name}.wgsl is included by no shader");
    }
}
