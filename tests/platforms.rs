//! Portability: f16 storage resolution, the per-adapter precision-mode report, and the packed
//! path on whatever adapter is present (Vulkan/lavapipe with shader-f16, GL/llvmpipe without).

mod common;

use common::{assert_close, ctx, ctx_packed, rand_vec};
use webgpu_amp::amp::AdapterReport;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::gpu::{AdapterClass, Capabilities, KernelLimits, KernelTable};
use webgpu_amp::ops::elementwise;
use webgpu_amp::{DType, Error, F16Storage, F16StorageChoice, Storage, Tensor};

/// The precision modes `info` lists, in order: the trainer's.
fn precision_modes() -> Vec<&'static str> {
    Precision::ALL.iter().map(|p| p.name()).collect()
}

fn expect_no_f16() -> bool {
    std::env::var("WEBGPU_AMP_EXPECT_NO_F16").as_deref() == Ok("1")
}

/// This adapter's capabilities with shader-f16 switched on or off.
fn caps_with_f16(shader_f16: bool) -> Capabilities {
    let mut caps = ctx().caps.clone();
    caps.shader_f16 = shader_f16;
    caps
}

#[test]
fn without_shader_f16_auto_and_packed_pick_packed_and_native_is_a_clear_error() {
    let caps = caps_with_f16(false);
    assert_eq!(
        caps.resolve_f16_storage(F16StorageChoice::Auto).unwrap(),
        F16Storage::Packed
    );
    assert_eq!(
        caps.resolve_f16_storage(F16StorageChoice::Packed).unwrap(),
        F16Storage::Packed
    );
    match caps.resolve_f16_storage(F16StorageChoice::Native) {
        Err(Error::Unsupported(msg)) => {
            assert!(
                msg.contains("shader-f16"),
                "message names the feature: {msg}"
            );
            assert!(msg.contains("packed"), "message names the way out: {msg}");
        }
        other => panic!("native without shader-f16 must be Unsupported, got {other:?}"),
    }
}

#[test]
fn with_shader_f16_auto_picks_native_and_packed_stays_packed() {
    let caps = caps_with_f16(true);
    assert_eq!(
        caps.resolve_f16_storage(F16StorageChoice::Auto).unwrap(),
        F16Storage::Native
    );
    assert_eq!(
        caps.resolve_f16_storage(F16StorageChoice::Native).unwrap(),
        F16Storage::Native
    );
    assert_eq!(
        caps.resolve_f16_storage(F16StorageChoice::Packed).unwrap(),
        F16Storage::Packed
    );
}

#[test]
fn the_real_adapter_resolves_as_its_features_say() {
    let c = ctx();
    let has_f16 = c.adapter.features().contains(wgpu::Features::SHADER_F16);
    assert_eq!(c.caps.shader_f16, has_f16);
    let want = if has_f16 {
        F16Storage::Native
    } else {
        F16Storage::Packed
    };
    assert_eq!(c.f16_storage, want, "auto on `{}`", c.report.name);
    if expect_no_f16() {
        assert!(
            !has_f16,
            "WEBGPU_AMP_EXPECT_NO_F16=1 but `{}` ({}) has shader-f16",
            c.report.name, c.report.backend
        );
        assert!(
            c.report.notes.iter().any(|n| n.contains("no shader-f16")),
            "the report says why f16 is packed: {:?}",
            c.report.notes
        );
    }
    // The device got shader-f16 exactly when the adapter offered it.
    assert_eq!(
        c.device.features().contains(wgpu::Features::SHADER_F16),
        has_f16
    );
}

#[test]
fn report_lists_all_four_modes_with_their_storage() {
    let c = ctx();
    let report = &AdapterReport::with_f16_choice(&c.adapter, F16StorageChoice::Auto);
    let modes: Vec<&str> = report.modes.iter().map(|m| m.mode).collect();
    assert_eq!(modes, precision_modes());
    assert_eq!(report.f16_storage_requested, F16StorageChoice::Auto);
    let f16_name = Storage::for_dtype(DType::F16, report.adapter.f16_storage).name();
    for m in &report.modes {
        assert!(m.runs, "{} runs on every adapter with auto storage", m.mode);
        let want = match m.mode {
            "f32" => "f32",
            "amp-bf16" => "bf16",
            _ => f16_name,
        };
        assert_eq!(m.storage, want, "{}", m.mode);
    }
    let json = serde_json::to_value(report).unwrap();
    let json_modes: Vec<&str> = json["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(json_modes, precision_modes());
    assert_eq!(json["f16_storage_requested"], "auto");
    // The description's keys stand at the top level, beside the modes.
    assert_eq!(json["name"], report.adapter.name.as_str());
    assert_eq!(
        json["f16_storage"],
        serde_json::to_value(report.adapter.f16_storage).unwrap()
    );
}

#[test]
fn report_for_native_request_without_shader_f16_says_which_modes_fail() {
    let info = ctx().adapter.get_info();
    let report = AdapterReport::from_parts(info, caps_with_f16(false), F16StorageChoice::Native);
    let runs: Vec<(&str, bool)> = report.modes.iter().map(|m| (m.mode, m.runs)).collect();
    assert_eq!(
        runs,
        [
            ("f32", true),
            ("amp-f16", false),
            ("amp-bf16", true),
            ("f16", false)
        ]
    );
    let failing = &report.modes[1];
    assert!(failing.detail.contains("shader-f16"), "{}", failing.detail);
    assert_eq!(report.adapter.f16_storage, F16Storage::Packed);
    // With packed requested everything runs, f16 packed and bf16 packed.
    let report = AdapterReport::from_parts(
        ctx().adapter.get_info(),
        caps_with_f16(true),
        F16StorageChoice::Packed,
    );
    let storages: Vec<&str> = report.modes.iter().map(|m| m.storage).collect();
    assert_eq!(storages, ["f32", "f16packed", "bf16", "f16packed"]);
    assert!(report.modes.iter().all(|m| m.runs));
}

#[test]
fn dx12_without_shader_f16_explains_dxc() {
    let mut info = ctx().adapter.get_info();
    info.backend = wgpu::Backend::Dx12;
    let report =
        AdapterReport::from_parts(info.clone(), caps_with_f16(false), F16StorageChoice::Auto);
    assert_eq!(report.adapter.f16_storage, F16Storage::Packed);
    assert!(
        report
            .adapter
            .notes
            .iter()
            .any(|n| n.contains("dxcompiler.dll") && n.contains("FXC")),
        "DX12 notes explain DXC: {:?}",
        report.adapter.notes
    );
    // With shader-f16 (DXC loaded) there is nothing to explain about DXC.
    let report = AdapterReport::from_parts(info, caps_with_f16(true), F16StorageChoice::Auto);
    assert_eq!(report.adapter.f16_storage, F16Storage::Native);
    assert!(
        !report
            .adapter
            .notes
            .iter()
            .any(|n| n.contains("dxcompiler"))
    );
}

#[test]
fn gl_without_shader_f16_says_so() {
    let mut info = ctx().adapter.get_info();
    info.backend = wgpu::Backend::Gl;
    let report = AdapterReport::from_parts(info, caps_with_f16(false), F16StorageChoice::Auto);
    assert!(
        report
            .adapter
            .notes
            .iter()
            .any(|n| n.contains("GL backend")),
        "{:?}",
        report.adapter.notes
    );
}

#[test]
fn forced_packed_storage_runs_on_this_adapter() {
    let c = ctx_packed();
    assert_eq!(c.f16_storage, F16Storage::Packed);
    assert_eq!(c.storage_for(DType::F16), Storage::F16Packed);
    assert_eq!(c.storage_for(DType::BF16), Storage::BF16);
    // Odd length: the last u32 holds one real half.
    let n = 1001;
    let a = rand_vec(n, 11);
    let b = rand_vec(n, 12);
    for dtype in [DType::F16, DType::BF16] {
        let x = Tensor::from_f32(c, &a, &[n], dtype).unwrap();
        let y = Tensor::from_f32(c, &b, &[n], dtype).unwrap();
        let out = Tensor::zeros(c, &[n], dtype);
        assert_eq!(out.storage(), c.storage_for(dtype));
        let k = elementwise::add(c, &x, &y, &out).unwrap();
        c.run(&[&k]);
        let got = out.read_f32(c).unwrap();
        let want: Vec<f32> = a
            .iter()
            .zip(&b)
            .map(|(&p, &q)| dtype.round(dtype.round(p) + dtype.round(q)))
            .collect();
        // One unit in the last place: the kernel adds in f32 and rounds once, the reference
        // may round twice where an f32 sum of two bf16 values is itself inexact.
        let ulp = if dtype == DType::F16 {
            1.0 / 1024.0
        } else {
            1.0 / 128.0
        };
        assert_close(&format!("packed {dtype} add"), &got, &want, 1e-6, ulp);
    }
}

#[test]
fn info_command_json_lists_every_adapter_with_four_modes() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_webgpu-amp"))
        .args(["info", "--json", "--backend"])
        .arg(std::env::var("WEBGPU_AMP_BACKEND").unwrap_or_else(|_| "auto".into()))
        .output()
        .expect("run webgpu-amp info");
    assert!(
        out.status.success(),
        "info failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = reports.as_array().expect("a list of adapters");
    assert!(!reports.is_empty(), "info found no adapter");
    for r in reports {
        let modes: Vec<&str> = r["modes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mode"].as_str().unwrap())
            .collect();
        assert_eq!(modes, precision_modes(), "{}", r["name"]);
        let f16 = if r["capabilities"]["shader_f16"] == true {
            "f16"
        } else {
            "f16packed"
        };
        assert_eq!(r["modes"][1]["storage"], f16, "{}", r["name"]);
        assert_eq!(r["modes"][2]["storage"], "bf16", "{}", r["name"]);
        // The fused attention's body per mode; f32 and bf16 never on tensor cores.
        for m in r["modes"].as_array().unwrap() {
            let body = m["attention"].as_str().expect("an attention body per mode");
            assert!(body.contains("SIMT"), "{}: {body}", m["mode"]);
        }
        for i in [0, 2] {
            let body = r["modes"][i]["attention"].as_str().unwrap();
            assert!(!body.contains("coop"), "{}: {body}", r["modes"][i]["mode"]);
        }
    }
}

/// DX12 without DXC compiles with FXC at shader model 5.1 and never gets shader-f16, so every
/// variant that does not store native f16 must translate to HLSL 5.1. (shader_portability
/// checks shader model 6.2, what DXC gets, for every variant.)
#[test]
fn variants_without_native_f16_translate_to_hlsl_for_fxc() {
    use naga::back::hlsl;
    let variants = webgpu_amp::variants::all().expect("variant list");
    let mut checked = 0;
    let mut failures = Vec::new();
    for v in variants
        .iter()
        .filter(|v| v.storages.iter().all(|(_, s)| *s != Storage::F16))
    {
        let label = v.label();
        let src = v.specialise().expect("specialise");
        let (module, info) = webgpu_amp::shader::validate(&label, &src).expect("validates");
        let options = hlsl::Options {
            shader_model: hlsl::ShaderModel::V5_1,
            ..Default::default()
        };
        let mut out = String::new();
        let pipeline = hlsl::PipelineOptions::default();
        if let Err(e) = hlsl::Writer::new(&mut out, &options, &pipeline).write(&module, &info, None)
        {
            failures.push(format!("{label}: {e}"));
        }
        checked += 1;
    }
    assert!(checked > 0);
    assert!(
        failures.is_empty(),
        "{} of {checked} variants fail HLSL 5.1:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The most workgroup memory a class's tiled SIMT matmul tile takes.
fn most_simt_table_bytes() -> u32 {
    AdapterClass::ALL
        .iter()
        .map(|&c| {
            let t = KernelTable::defaults(c);
            t.simt_f32
                .workgroup_bytes()
                .max(t.simt_16.workgroup_bytes())
        })
        .max()
        .map(|b| u32::try_from(b).expect("a class default's workgroup memory fits u32"))
        .unwrap()
}

/// Every kernel fits WebGPU's default limits, which wgpu gives on Vulkan, Metal, DX12 and in
/// browsers: 8 storage buffers per stage, 16 KiB of workgroup memory, 256 invocations per
/// workgroup. So no adapter needs more than the defaults to train. The exceptions are the
/// tensor-core kernels (up to COOP_WORKGROUP_BYTES), which run only where the adapter's limit
/// holds them (the largest of them must need exactly that: the bound is not loose), and the
/// tiled SIMT matmul's deeper tiles of classes whose GPUs give more (the kernel table falls
/// back to the `other` class's, within the defaults, where an adapter's limit is lower). The
/// tensor-core attention picks its blocks by the adapter's limit and declares exactly what
/// its layout counted.
#[test]
fn every_kernel_fits_webgpus_default_limits() {
    let defaults = wgpu::Limits::default();
    let (mut most_buffers, mut most_shared, mut most_threads) = (0, 0, 0);
    let mut most_coop_shared = 0;
    for v in webgpu_amp::variants::all().expect("variant list") {
        let label = v.label();
        let src = v.specialise().expect("specialise");
        let (module, info) = webgpu_amp::shader::validate(&label, &src).expect("validates");
        for (i, e) in module.entry_points.iter().enumerate() {
            let name = format!("{label}::{}", e.name);
            let buffers =
                webgpu_amp::shader::storage_buffers_used(&module, &info, &e.name).unwrap();
            assert!(
                buffers <= defaults.max_storage_buffers_per_shader_stage,
                "{name} binds {buffers} storage buffers"
            );
            let fi = info.get_entry_point(i);
            let shared: u32 = module
                .global_variables
                .iter()
                .filter(|(h, g)| !fi[*h].is_empty() && g.space == naga::AddressSpace::WorkGroup)
                .map(|(_, g)| module.types[g.ty].inner.size(module.to_ctx()))
                .sum();
            if v.shader.starts_with("flash_coop") {
                // The tensor-core attention sizes its blocks to the adapter's own limit
                // (ops::flash_attention's layouts): each variant declares exactly the bytes
                // its layout counted against that limit.
                let counted = v
                    .consts
                    .iter()
                    .find(|(name, _)| *name == "WORKGROUP_BYTES")
                    .map(|(_, value)| value.trim_end_matches('u').parse::<u32>().unwrap())
                    .expect("flash_coop variants carry WORKGROUP_BYTES");
                assert_eq!(
                    shared, counted,
                    "{name}: declared vs counted workgroup bytes"
                );
                continue;
            }
            if v.shader.ends_with("_coop") {
                // Tensor cores are native-only and chosen only where the adapter's own limit
                // holds the most any cooperative kernel declares (gpu::TensorCores::choose).
                assert!(
                    shared <= webgpu_amp::gpu::COOP_WORKGROUP_BYTES,
                    "{name}: {shared} bytes, over COOP_WORKGROUP_BYTES"
                );
                most_coop_shared = most_coop_shared.max(shared);
                continue;
            }
            // The tiled SIMT matmul takes its tile from the adapter's kernel table: classes
            // whose GPUs give more workgroup memory stage deeper slices, and an adapter whose
            // limit holds less than its class's table gets the `other` class's, which fits
            // WebGPU's defaults (gpu::AdapterKernels::builtin; checked below).
            let limit = if v.shader == "matmul" {
                most_simt_table_bytes()
            } else {
                defaults.max_compute_workgroup_storage_size
            };
            assert!(
                shared <= limit,
                "{name} uses {shared} bytes of workgroup memory"
            );
            let threads: u32 = e.workgroup_size.iter().product();
            assert!(
                threads <= defaults.max_compute_invocations_per_workgroup,
                "{name} has {threads} invocations per workgroup"
            );
            most_buffers = most_buffers.max(buffers);
            most_shared = most_shared.max(shared);
            most_threads = most_threads.max(threads);
        }
    }
    assert!(most_buffers > 0 && most_threads > 0);
    assert_eq!(most_coop_shared, webgpu_amp::gpu::COOP_WORKGROUP_BYTES);
    let fallback = KernelTable::defaults(AdapterClass::Other);
    let webgpu = KernelLimits::of(&defaults, 0);
    fallback
        .check(&webgpu)
        .expect("the `other` class's table fits WebGPU's defaults");
    println!(
        "largest kernel needs: {most_buffers} storage buffers, {most_shared} bytes workgroup memory, {most_threads} invocations"
    );
}

/// A native-f16 tensor on a device without shader-f16 is a clear error from `kernel`, not a
/// wgpu validation panic; with shader-f16 the same kernel builds.
#[test]
fn native_f16_tensor_without_shader_f16_is_an_error() {
    let c = ctx();
    let x = Tensor::zeros_with_storage(c, &[4], Storage::F16);
    let y = Tensor::zeros_with_storage(c, &[4], Storage::F32);
    let result = elementwise::cast(c, &x, &y);
    if c.device.features().contains(wgpu::Features::SHADER_F16) {
        result.expect("native f16 kernel builds where shader-f16 exists");
    } else {
        match result {
            Err(Error::Unsupported(msg)) => assert!(msg.contains("shader-f16"), "{msg}"),
            Err(e) => panic!("expected Unsupported, got {e}"),
            Ok(_) => panic!("a native f16 kernel built without shader-f16"),
        }
    }
}

#[test]
fn info_modes_are_the_precision_modes_the_trainer_accepts() {
    let report = AdapterReport::with_f16_choice(&ctx().adapter, F16StorageChoice::Auto);
    for (m, precision) in report.modes.iter().zip(Precision::ALL) {
        assert_eq!(Precision::parse(m.mode).unwrap(), precision);
    }
    assert_eq!(report.modes.len(), Precision::ALL.len());
}
