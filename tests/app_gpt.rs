//! The app with the families' presets (issue 12's app part; issues 40 and 41's), driven
//! headlessly on a real GPU context: the presets in the model list and the data set that
//! goes with them, every model of the list picked in the setup panel and trained a step (the
//! BatchNorm ResNets and llama-tiny included), the precision map of gpt-tiny (LayerNorm, the
//! attention's softmax and the loss in f32), text sampled on the GPU from the f32 and
//! amp-f16 runs side by side, and the browser's autorun with `model=gpt-tiny`; a Hugging
//! Face folder picked in the app (`hf_folder.rs`).

mod common;
#[path = "app_gpt/hf_folder.rs"]
mod hf_folder;

use std::sync::Arc;

use eframe::egui;
use egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::app::autorun::{Autorun, AutorunResult};
use webgpu_amp::app::model::{MODELS, dataset_for, model_for};
use webgpu_amp::app::probes::sample::SAMPLE_TOKENS;
use webgpu_amp::app::session::{DATASETS, Session, SessionConfig, Status};
use webgpu_amp::app::{App, Tab, precision, samples};
use webgpu_amp::data::DataSource;
use webgpu_amp::nn::{PRESETS, families, preset};
use webgpu_amp::tensor::DType;
use webgpu_amp::train::sample::submit_sample;
use webgpu_amp::train::{Run, SampleOptions, StepConfig};

/// Clicks Start and steps the app until its session stops (finished or failed), at most
/// 20,000 frames.
fn start_and_wait(harness: &mut Harness<'_, App>) {
    harness.get_by_label("Start").click();
    for _ in 0..20_000 {
        harness.step();
        if !matches!(
            harness.state().session.status(),
            Status::Running | Status::Preparing { .. }
        ) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// gpt-tiny on the embedded text, two modes, a sample every 4 steps.
fn gpt_config() -> SessionConfig {
    SessionConfig {
        model: "gpt-tiny".into(),
        dataset: "hamlet".into(),
        modes: vec![Precision::F32, Precision::AmpF16],
        batch_size: 4,
        steps: 8,
        sample_every: 4,
        eval_every: u64::MAX,
        profile_every: u64::MAX,
        ..Default::default()
    }
}

/// The characters of the embedded text's vocabulary.
fn vocabulary() -> Vec<char> {
    let corpus = DataSource::EmbeddedText
        .load_text()
        .unwrap()
        .expect("hamlet is text");
    corpus.vocab().chars().to_vec()
}

#[test]
fn gpt_presets_are_in_the_model_list_with_the_text_they_train_on() {
    for gpt in ["gpt-tiny", "gpt-char"] {
        assert!(PRESETS.contains(&gpt), "{gpt} missing from {PRESETS:?}");
        // Choosing a GPT on an image data set switches to the embedded text, and back.
        assert_eq!(dataset_for(gpt, "default"), "hamlet");
        assert_eq!(dataset_for(gpt, "hamlet"), "hamlet");
    }
    assert!(DATASETS.contains(&"hamlet"), "{DATASETS:?}");
    assert_eq!(dataset_for("mlp", "hamlet"), "default");
    assert_eq!(model_for("hamlet", "mlp"), "gpt-tiny");
    assert_eq!(model_for("default", "gpt-char"), "mlp");
    assert_eq!(model_for("hamlet", "gpt-char"), "gpt-char");
}

#[test]
fn model_list_offers_the_families_with_the_data_they_train_on() {
    // Every preset of features and every GPT, then the BatchNorm ResNets and llama-tiny.
    for name in PRESETS
        .iter()
        .chain(&["resnet-tiny", "resnet8-fashion", "llama-tiny"])
    {
        assert!(MODELS.contains(name), "{name} missing from {MODELS:?}");
    }
    for name in MODELS {
        assert!(
            PRESETS.contains(&name) || families::of_preset(name).is_some(),
            "{name} is no preset"
        );
    }
    // A ResNet trains on images, a Llama on text: choosing one switches the data set.
    for resnet in ["resnet-tiny", "resnet8-fashion"] {
        assert_eq!(dataset_for(resnet, "hamlet"), "default");
        assert_eq!(dataset_for(resnet, "synthetic:512"), "default");
        assert_eq!(dataset_for(resnet, "fashion-mnist"), "fashion-mnist");
        assert_eq!(model_for("synthetic:512", resnet), "mlp");
        assert_eq!(model_for("mnist", resnet), resnet);
    }
    assert_eq!(dataset_for("llama-tiny", "default"), "hamlet");
    assert_eq!(model_for("hamlet", "llama-tiny"), "llama-tiny");
    assert_eq!(model_for("default", "llama-tiny"), "mlp");
    // So does a CNN preset (it convolves images), where the MLP takes any features.
    assert_eq!(dataset_for("simple-cnn", "synthetic:512"), "default");
    assert_eq!(dataset_for("mlp", "synthetic:512"), "synthetic:512");
    // A ResNet takes the images' channels and size: resnet-tiny (made for 1x28x28) on
    // 3x16x16 images has a 3-channel stem and the same head.
    let spec = preset("resnet-tiny", &[3, 16, 16], 10).unwrap();
    assert_eq!(spec.input_shape, [3, 16, 16]);
    let shape = |spec: &webgpu_amp::nn::ModelSpec, name: &str| {
        let found = spec.parameters().into_iter().find(|p| p.name == name);
        found.unwrap_or_else(|| panic!("no {name}")).shape
    };
    assert_eq!(shape(&spec, "conv1.weight"), [8, 3, 3, 3]);
    let meant = preset("resnet-tiny", &[1, 28, 28], 10).unwrap();
    assert_eq!(shape(&meant, "conv1.weight"), [8, 1, 3, 3]);
    assert_eq!(
        shape(&spec, "linear.weight"),
        shape(&meant, "linear.weight")
    );
    // Features that are no image keep the preset's input, and the data check says so.
    let flat = preset("resnet-tiny", &[10], 1).unwrap();
    assert_eq!(flat.input_shape, [1, 28, 28]);
}

#[test]
fn every_model_in_the_list_is_picked_in_the_setup_panel_and_trains_a_step() {
    // One amp-f16 step of each, small batch, no probes (they are tested elsewhere). The data
    // set starts as one no family model takes, so every pick pairs its data.
    let config = SessionConfig {
        dataset: "synthetic:512".into(),
        model: "linear".into(),
        modes: vec![Precision::AmpF16],
        batch_size: 4,
        steps: 1,
        eval_every: SessionConfig::NEVER,
        profile_every: SessionConfig::NEVER,
        sample_every: SessionConfig::NEVER,
        ..Default::default()
    };
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 820.0))
        .build_ui_state(
            |ui, app: &mut App| app.update(ui),
            App::new(Arc::new(common::ctx_owned()), config),
        );
    harness.step();
    for name in MODELS {
        // A click lands on the next frame and the popup draws on the one after.
        harness
            .get_by_role_and_label(Role::ComboBox, "model")
            .click();
        harness.step();
        harness.step();
        harness
            .get_by_role(Role::ListBox)
            .get_by_label(name)
            .click();
        harness.step();
        harness.step();
        let config = &harness.state().config;
        assert_eq!(config.model, name);
        let want = match name {
            "gpt-tiny" | "gpt-char" | "llama-tiny" => "hamlet",
            "resnet-tiny" | "resnet8-fashion" | "simple-cnn" | "mnist-cnn" => "default",
            // The presets of features keep the data set the previous pick left.
            _ => config.dataset.as_str(),
        };
        assert_eq!(config.dataset, want, "{name}");
        if name == "gpt-char" {
            // Picked, not trained here: one step took 280 s of this test's 298 on lavapipe
            // (2-core machine, load 8), the other eight 17 s together. Its step kernels are
            // in CI's kernel-report gate; the browser e2e trains it with --gpt-char-steps.
            continue;
        }
        let started = std::time::Instant::now();
        start_and_wait(&mut harness);
        let app = harness.state();
        assert_eq!(*app.session.status(), Status::Finished, "{name}");
        let run = &app.session.runs()[0];
        assert_eq!(run.history.len(), 1, "{name}");
        let loss = run.history[0].loss;
        assert!(loss.is_finite() && loss > 0.0, "{name}: loss {loss}");
        eprintln!(
            "{name}: one step, loss {loss:.4}, {:.1?}",
            started.elapsed()
        );
        harness.get_by_label("Reset").click();
        harness.step();
    }
}

#[test]
fn precision_map_of_gpt_tiny_keeps_layernorm_softmax_and_the_loss_in_f32() {
    let mut session = Session::new(Arc::new(common::ctx_owned()));
    let rows = session
        .precision_map(&gpt_config(), Precision::AmpF16)
        .unwrap();
    let of = |op: &str| -> Vec<_> { rows.iter().filter(|r| r.op.name == op).collect() };
    let layernorms = of("LayerNorm");
    // Two blocks of two LayerNorms each, and the final one.
    assert_eq!(layernorms.len(), 5, "{rows:#?}");
    for r in layernorms.iter().chain(&of("CrossEntropyLoss")) {
        assert_eq!(
            r.compute_dtype,
            DType::F32,
            "{} computes in f32: {r:?}",
            r.op.name
        );
    }
    let attention = of("Attention");
    assert_eq!(attention.len(), 2, "{rows:#?}");
    for r in attention {
        assert_eq!(
            r.compute_dtype,
            DType::F16,
            "attention matmuls in f16: {r:?}"
        );
        assert!(precision::notes(r).contains("softmax in f32"), "{r:?}");
    }
    assert!(
        of("Linear").iter().all(|r| r.compute_dtype == DType::F16),
        "{rows:#?}"
    );
    // The panel shows it.
    let mut app = App::new(Arc::new(common::ctx_owned()), gpt_config());
    app.map_mode = Precision::AmpF16;
    app.tab = Tab::Precision;
    app.refresh_precision_map();
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1100.0, 900.0))
        .build_ui_state(|ui, app: &mut App| precision::show(ui, app), app);
    harness.step();
    assert_eq!(harness.query_all_by_label("LayerNorm").count(), 5);
    assert_eq!(
        harness
            .query_all_by_label_contains("softmax in f32")
            .count(),
        2
    );
}

#[test]
fn sampled_text_panel_shows_f32_and_amp_f16_side_by_side() {
    let mut config = gpt_config();
    config.sample_every = 4;
    let mut app = App::new(Arc::new(common::ctx_owned()), config);
    app.tab = Tab::Samples;
    let mut harness = Harness::builder()
        .with_size(egui::vec2(1280.0, 820.0))
        .build_ui_state(|ui, app: &mut App| app.update(ui), app);
    harness.step();
    harness.get_by_label_contains("Sampled text needs a language model");
    start_and_wait(&mut harness);
    let app = harness.state();
    assert_eq!(*app.session.status(), Status::Finished);
    let vocab = vocabulary();
    let latest = samples::latest(app.session.runs());
    assert_eq!(latest.len(), 2);
    let mut texts = Vec::new();
    for (run, (mode, sample)) in app.session.runs().iter().zip(&latest) {
        // Step 4, then the last step, 8.
        let steps: Vec<u64> = run.samples.iter().map(|s| s.0).collect();
        assert_eq!(steps, [4, 8], "{mode}");
        let (_, text) = sample.as_ref().expect("a sample");
        // The prompt (a newline) and the sampled characters, all from the text's vocabulary.
        assert_eq!(text.chars().count(), 1 + SAMPLE_TOKENS, "{mode}: {text:?}");
        assert!(text.starts_with('\n'), "{mode}: {text:?}");
        assert!(text.chars().all(|c| vocab.contains(&c)), "{mode}: {text:?}");
        // Sampled, not the newlines a zero temperature or NaN weights gave.
        assert!(text.chars().skip(1).any(|c| c != '\n'), "{mode}: {text:?}");
        texts.push(text.clone());
    }
    harness.step();
    // Each run's text in its column (two equal texts are two labels with that text).
    for text in &texts {
        let same = texts.iter().filter(|t| *t == text).count();
        assert_eq!(harness.query_all_by_label(text).count(), same, "{text:?}");
    }
    assert_eq!(harness.query_all_by_label("step 8").count(), 2);
}

#[test]
fn gpt_autorun_trains_on_the_embedded_text_and_publishes_sampled_text() {
    let run = Autorun::from_query("autorun=1&model=gpt-tiny&precision=amp-f16&steps=12&batch=8")
        .unwrap()
        .expect("autorun asked for");
    assert_eq!(run.config.dataset, "hamlet");
    let mut session = Session::new(Arc::new(common::ctx_owned()));
    session.start(run.config);
    let result = common::autorun::drive(&mut session, 3600.0);
    assert!(result.ok, "{result:?}");
    assert_eq!(
        (result.model.as_str(), result.dataset.as_str()),
        ("gpt-tiny", "hamlet")
    );
    assert_eq!(result.steps, 12);
    let (first, last) = (result.first_loss.unwrap(), result.last_loss.unwrap());
    // ln(vocabulary) at the start; Adam at 1e-3 takes it down within a few steps.
    assert!(last < 0.95 * first, "loss {first} -> {last}");
    assert_eq!(result.sample_step, Some(12));
    // Timed on the session's clock (here one tick is 1/60 s): at least a tick after it left.
    let secs = result.sample_secs.expect("the last sample is timed");
    assert!(secs > 0.9 / 60.0, "sample_secs {secs}");
    // The autorun validates nothing (`eval_every` NEVER): no validation at the last step
    // either, which on a CPU adapter took minutes and delayed the result.
    assert!(
        session.runs()[0].val_accuracy.is_empty(),
        "the autorun validated: {:?}",
        session.runs()[0].val_accuracy
    );
    let text = result.sample.expect("a sample");
    let vocab = vocabulary();
    assert!(text.chars().count() > 1, "{text:?}");
    assert!(text.chars().all(|c| vocab.contains(&c)), "{text:?}");
    // Sampled, not the newlines a zero temperature or NaN weights gave.
    assert!(text.chars().skip(1).any(|c| c != '\n'), "{text:?}");
    let json: serde_json::Value = serde_json::from_str(&AutorunResult::to_json(
        &AutorunResult::from_session(&session).unwrap(),
    ))
    .unwrap();
    assert_eq!(json["sample"].as_str(), Some(text.as_str()));
}

#[test]
fn sampling_needs_a_gpt_and_a_prompt_in_its_vocabulary() {
    let ctx = common::ctx_owned();
    let run_config = |precision| {
        let step = StepConfig::new(
            precision,
            webgpu_amp::nn::LossKind::CrossEntropy,
            webgpu_amp::optim::OptimizerConfig::adam(1e-3),
        );
        common::runs::steps_run(step.scaler_enabled(true), 4, 1).shuffle(false)
    };
    let request = SampleOptions {
        tokens: 4,
        temperature: 1.0,
        top_k: None,
        seed: 0,
    };
    let out = ctx.alloc_storage("test.sample.out", 16);
    let model = |name: &str, data: &str| {
        webgpu_amp::train::model_and_data(
            Some(&webgpu_amp::train::ModelChoice::Preset(name.into())),
            &data.parse().unwrap(),
            true,
        )
        .unwrap()
    };
    let (spec, split) = model("mlp", "default");
    let init = spec.init_params(0);
    let mut mlp = Run::new(
        &ctx,
        spec,
        run_config(Precision::F32),
        &split.train,
        &init,
        None,
    )
    .unwrap();
    common::expect_err(
        submit_sample(&ctx, &mut mlp.trainer, &[0], &request, &out),
        &["sample", "no language model"],
    );
    let (spec, split) = model("gpt-tiny", "hamlet");
    let vocab = split.train.output_dim() as u32;
    let init = spec.init_params(0);
    let mut gpt = Run::new(
        &ctx,
        spec,
        run_config(Precision::AmpF16),
        &split.train,
        &init,
        None,
    )
    .unwrap();
    let t = &mut gpt.trainer;
    common::expect_err(
        submit_sample(&ctx, t, &[], &request, &out),
        &["prompt has 0 tokens"],
    );
    common::expect_err(
        submit_sample(&ctx, t, &[vocab], &request, &out),
        &[&format!(
            "prompt token {vocab} at position 0 is outside the vocabulary"
        )],
    );
    common::expect_err(
        submit_sample(&ctx, t, &[0; 65], &request, &out),
        &["prompt has 65 tokens", "block size 64"],
    );
    let big = SampleOptions {
        tokens: 5,
        ..request
    };
    common::expect_err(
        submit_sample(&ctx, t, &[0], &big, &out),
        &["fewer than 5 tokens"],
    );
    let zero = SampleOptions {
        tokens: 0,
        ..request
    };
    common::expect_err(
        submit_sample(&ctx, t, &[0], &zero, &out),
        &["0 tokens requested"],
    );
    // A good request: the same seed draws the same tokens, each in the vocabulary. The
    // output starts as a sentinel (no token id), so a sampler that writes nothing fails.
    let read = |t: &mut webgpu_amp::train::Trainer| -> Vec<u32> {
        ctx.queue
            .write_buffer(out.raw(), 0, bytemuck::cast_slice(&[u32::MAX; 4]));
        submit_sample(&ctx, t, &[0, 1], &request, &out).unwrap();
        bytemuck::cast_slice(&ctx.read_bytes(&out, 0, 16).unwrap()).to_vec()
    };
    let a = read(t);
    assert!(a.iter().all(|&id| id < vocab), "{a:?}");
    // Untrained, at temperature 1 and no top-k, the draws spread over the 65 characters;
    // all four the newline (id 0), as a zero temperature gave, is (1/65)^4 for this seed.
    assert!(a.iter().any(|&id| id != 0), "only newlines: {a:?}");
    assert_eq!(a, read(t));
}
