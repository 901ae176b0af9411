//! The ResNet family (`nn::resnet`): `resnet18-cifar` is kuangliu/pytorch-cifar's
//! `ResNet18()` name for name (parameters in `named_parameters()` order, buffers, shapes) and
//! 11,173,962 parameters; He et al.'s CIFAR nets with option-B shortcuts; the small test
//! preset; the name table covers every name both ways; the JSON form round-trips. The
//! counts are PyTorch's for the same definitions (`sum(p.numel() for p in m.parameters())`,
//! PyTorch 2.15).

use webgpu_amp::nn::ModelSpec;
use webgpu_amp::nn::presets::preset;

/// kuangliu's `ResNet` state_dict names, as its modules register them (independent of the
/// builder): per module its parameters, then its buffers.
fn kuangliu_names(widths: &[usize], blocks: &[usize]) -> (Vec<String>, Vec<String>) {
    let (mut params, mut buffers) = (Vec::new(), Vec::new());
    let mut bn = |m: &str, params: &mut Vec<String>| {
        params.push(format!("{m}.weight"));
        params.push(format!("{m}.bias"));
        for b in ["running_mean", "running_var", "num_batches_tracked"] {
            buffers.push(format!("{m}.{b}"));
        }
    };
    params.push("conv1.weight".into());
    bn("bn1", &mut params);
    let mut in_planes = widths[0];
    for (s, (&w, &n)) in widths.iter().zip(blocks).enumerate() {
        for b in 0..n {
            let stride = if s > 0 && b == 0 { 2 } else { 1 };
            let m = format!("layer{}.{b}", s + 1);
            params.push(format!("{m}.conv1.weight"));
            bn(&format!("{m}.bn1"), &mut params);
            params.push(format!("{m}.conv2.weight"));
            bn(&format!("{m}.bn2"), &mut params);
            if stride != 1 || in_planes != w {
                params.push(format!("{m}.shortcut.0.weight"));
                bn(&format!("{m}.shortcut.1"), &mut params);
            }
            in_planes = w;
        }
    }
    params.push("linear.weight".into());
    params.push("linear.bias".into());
    (params, buffers)
}

fn names(spec: &ModelSpec) -> (Vec<String>, Vec<String>) {
    (
        spec.parameters().iter().map(|p| p.name.clone()).collect(),
        spec.buffers().iter().map(|b| b.name.clone()).collect(),
    )
}

#[test]
fn resnet18_cifar_is_kuangliu_resnet18_name_for_name() {
    let spec = preset("resnet18-cifar", &[3, 32, 32], 10).unwrap();
    assert_eq!(spec.num_parameters(), 11_173_962);
    let (params, buffers) = names(&spec);
    let (want_params, want_buffers) = kuangliu_names(&[64, 128, 256, 512], &[2, 2, 2, 2]);
    assert_eq!(params, want_params, "named_parameters() order");
    assert_eq!(buffers, want_buffers, "buffers in registration order");
    assert_eq!(params.len() + buffers.len(), 122, "len(state_dict())");
    let shape = |n: &str| {
        spec.parameters()
            .iter()
            .find(|p| p.name == n)
            .map(|p| p.shape.clone())
            .unwrap()
    };
    assert_eq!(shape("conv1.weight"), [64, 3, 3, 3]);
    assert_eq!(shape("layer2.0.conv1.weight"), [128, 64, 3, 3]);
    assert_eq!(shape("layer4.0.shortcut.0.weight"), [512, 256, 1, 1]);
    assert_eq!(shape("layer4.1.bn2.weight"), [512]);
    assert_eq!(shape("linear.weight"), [10, 512]);
    assert_eq!(spec.output_shape(), [10]);
    // Every name through the table, both ways, to itself.
    for n in params.iter().chain(&buffers) {
        assert_eq!(spec.export_name(n).unwrap(), *n);
        assert_eq!(spec.import_name(n), *n);
    }
    assert!(spec.export_name("layer5.0.conv1.weight").is_err());
}

#[test]
fn he_et_al_nets_and_the_tiny_preset_count_as_pytorch_does() {
    for (name, input, widths, blocks, count) in [
        (
            "resnet20-cifar",
            [3, 32, 32],
            &[16, 32, 64][..],
            &[3, 3, 3][..],
            272_474,
        ),
        (
            "resnet56-cifar",
            [3, 32, 32],
            &[16, 32, 64],
            &[9, 9, 9],
            855_770,
        ),
        ("resnet-tiny", [1, 28, 28], &[8, 16], &[1, 1], 5_122),
        (
            "resnet8-fashion",
            [1, 28, 28],
            &[16, 32, 64],
            &[1, 1, 1],
            77_754,
        ),
    ] {
        let spec = preset(name, &input, 10).unwrap();
        assert_eq!(spec.num_parameters(), count, "{name}");
        assert_eq!(names(&spec), kuangliu_names(widths, blocks), "{name}");
        for n in names(&spec).0.iter().chain(&names(&spec).1) {
            assert_eq!(spec.export_name(n).unwrap(), *n, "{name}");
        }
    }
}

#[test]
fn the_json_form_round_trips_and_bad_fields_are_refused() {
    let spec = ModelSpec::from_json(r#"{"resnet": {}}"#).unwrap();
    assert_eq!(
        spec.num_parameters(),
        11_173_962,
        "the defaults are ResNet18()"
    );
    let tiny = preset("resnet-tiny", &[1, 28, 28], 10).unwrap();
    let json = tiny.description().unwrap().to_string();
    assert!(!json.contains("stem_pool"), "{json}");
    let back = ModelSpec::from_json(&json).unwrap();
    assert_eq!(names(&back), names(&tiny));
    assert_eq!(back.num_parameters(), tiny.num_parameters());
    // `stem_pool`: the stem's 28×28 pooled to 14×14 before the first stage.
    let fashion = preset("resnet8-fashion", &[1, 28, 28], 10).unwrap();
    let json = fashion.description().unwrap().to_string();
    assert!(json.contains(r#""stem_pool":2"#), "{json}");
    let back = ModelSpec::from_json(&json).unwrap();
    assert_eq!(back.num_parameters(), 77_754);
    let pooled = back
        .layers
        .iter()
        .position(|l| l.name == "maxpool")
        .unwrap();
    assert_eq!(back.layers[pooled].output_shape, [16, 14, 14]);
    for (json, want) in [
        (r#"{"resnet": {"depth": 18}}"#, "unknown field `depth`"),
        (
            r#"{"resnet": {"widths": [16, 32], "blocks": [3]}}"#,
            "must name the same stages",
        ),
        (
            r#"{"resnet": {"blocks": [2, 0, 2, 2]}}"#,
            "a stage's blocks must be at least 1",
        ),
        (r#"{"resnet": {"blocks": [2000, 2, 2, 2]}}"#, "at most 1024"),
    ] {
        let err = match ModelSpec::from_json(json) {
            Ok(_) => panic!("{json}: accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(want), "{json}: {err}");
    }
}

/// `--init` with a ResNet's state_dict (`Checkpoint::init_buffers_for_model`): its running
/// statistics are the model's (a trained net's, which evaluation uses), a file of parameters
/// only leaves the initial values, and a file with some buffers but not all is refused,
/// naming the missing ones.
#[test]
fn init_files_bring_their_running_statistics() {
    use webgpu_amp::train::checkpoint::{Checkpoint, NamedTensor};
    let spec = preset("resnet-tiny", &[1, 28, 28], 10).unwrap();
    let params: Vec<NamedTensor> = (spec.init_params(0).into_iter())
        .map(|(name, values)| NamedTensor {
            shape: vec![values.len()],
            name: spec.export_name(&name).unwrap(),
            values,
        })
        .collect();
    let only_params = Checkpoint {
        params: params.clone(),
        ..Checkpoint::default()
    };
    let none = only_params.init_buffers_for_model(&spec, "init.safetensors");
    assert!(none.unwrap().is_empty());
    let mean = NamedTensor {
        name: "bn1.running_mean".into(),
        shape: vec![8],
        values: vec![0.5; 8],
    };
    let partial = Checkpoint {
        params: [params, vec![mean]].concat(),
        ..Checkpoint::default()
    };
    let e = partial
        .init_buffers_for_model(&spec, "init.safetensors")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("init.safetensors") && e.contains("running_var"),
        "{e}"
    );
}
