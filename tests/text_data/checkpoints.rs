//! The vocabulary and model in checkpoints and runs (a run refuses another vocabulary on
//! resume), and token ids uploaded to the GPU as raw u32 words.

use safetensors::tensor::TensorView;
use webgpu_amp::Error;
use webgpu_amp::data::{TextCorpus, Vocab};
use webgpu_amp::train::batch::write_batch;
use webgpu_amp::train::checkpoint::{Checkpoint, NamedTensor};
use webgpu_amp::train::evaluate::predict;

use super::common;

#[test]
fn checkpoint_vocab_and_model_round_trip() {
    let vocab = Vocab::from_text("To be, or not to be\n");
    let ck = Checkpoint {
        params: vec![NamedTensor {
            name: "transformer.wte.weight".into(),
            shape: vec![vocab.len(), 2],
            values: vec![0.5; vocab.len() * 2],
        }],
        vocab: Some(vocab.clone()),
        model: Some(serde_json::json!({"preset": "gpt-tiny", "block_size": 64})),
        ..Default::default()
    };
    let bytes = ck.to_bytes().unwrap();
    let back = Checkpoint::from_bytes(&bytes, "ck").unwrap();
    assert_eq!(back, ck);
    assert_eq!(back.vocab(), Some(&vocab));
    // In the file: `vocab` is a JSON array of one-character strings, `model` JSON.
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().unwrap();
    assert_eq!(
        meta["vocab"],
        r#"["\n"," ",",","T","b","e","n","o","r","t"]"#
    );
    let model: serde_json::Value = serde_json::from_str(&meta["model"]).unwrap();
    assert_eq!(model["block_size"], 64);

    // Without them: None.
    let plain = Checkpoint {
        params: ck.params.clone(),
        ..Default::default()
    };
    let back = Checkpoint::from_bytes(&plain.to_bytes().unwrap(), "plain").unwrap();
    assert_eq!((back.vocab(), &back.model), (None, &None));

    // A broken vocabulary names the file and the key.
    let mut meta = std::collections::HashMap::new();
    meta.insert("vocab".to_string(), r#"["a","a"]"#.to_string());
    let bytes = safetensors::serialize(Vec::<(&str, TensorView<'_>)>::new(), Some(meta)).unwrap();
    match Checkpoint::from_bytes(&bytes, "bad.safetensors") {
        Err(Error::Checkpoint(msg)) => assert!(
            msg.contains("bad.safetensors") && msg.contains("`vocab`") && msg.contains("twice"),
            "{msg}"
        ),
        other => panic!("expected a checkpoint error, got {other:?}"),
    }
}

// ---------------------------------------------------------------- GPU upload

#[test]
fn token_ids_upload_as_raw_u32_words() {
    use webgpu_amp::amp::policy::Precision;

    use webgpu_amp::nn::{LossKind, preset};
    use webgpu_amp::optim::OptimizerConfig;
    use webgpu_amp::train::{BatchTargets, StepConfig, Trainer};

    let ctx = common::ctx();
    // gpt-tiny over sequences of 4 tokens and a vocabulary of 8: its input buffer holds B·T
    // u32 words, and ids go in as they are (the embedding checks nothing on upload).
    let spec = preset("gpt-tiny", &[4], 8).unwrap();
    let init = spec.init_params(0);
    let config = StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.1),
    )
    .scaler_enabled(false);
    let mut trainer = Trainer::new(ctx, spec, config, 8, &init).unwrap();
    let net = trainer.network(ctx, 2).unwrap();
    let ids: Vec<u32> = vec![7, 0, 3, 0x7fc0_0001, 1, 2, 65, 4_000_000_000];
    let labels: Vec<u32> = (0..8).collect();
    write_batch(ctx, net, &ids, &BatchTargets::Classes(&labels)).unwrap();
    let bytes = ctx
        .read_bytes(
            net.input.buffer(),
            net.input.byte_offset(),
            4 * ids.len() as u64,
        )
        .unwrap();
    let words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(words, ids, "every id bit for bit, even NaN-looking ones");

    // Wrong counts are errors, not GPU validation failures.
    match write_batch(ctx, net, &ids[..6], &BatchTargets::Classes(&labels)) {
        Err(Error::Shape { message, .. }) => {
            assert!(
                message.contains("6 token ids") && message.contains("[2, 4]"),
                "{message}"
            )
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    // One label per loss row: a GPT has one row per token, so B labels are refused.
    match write_batch(ctx, net, &ids, &BatchTargets::Classes(&[1, 2])) {
        Err(Error::Shape { message, .. }) => assert!(
            message.contains("2 class labels for 8 loss rows"),
            "{message}"
        ),
        other => panic!("expected a shape error, got {other:?}"),
    }
    // Inference takes token ids the same way.
    match predict(ctx, &mut trainer, 2, &ids[..7]) {
        Err(Error::Shape { message, .. }) => {
            assert!(message.contains("7 token ids"), "{message}")
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
    ctx.check().unwrap();
}

#[test]
fn runs_save_the_vocabulary_and_refuse_another_on_resume() {
    use webgpu_amp::amp::policy::Precision;

    use webgpu_amp::nn::{LossKind, preset};
    use webgpu_amp::optim::OptimizerConfig;
    use webgpu_amp::train::{Run, RunConfig, StepConfig};

    let ctx = common::ctx();
    let corpus = TextCorpus::from_text("abc", &"abcabcab".repeat(10)).unwrap();
    let split = corpus.split(4).unwrap();
    let train = &split.train;
    // A model that takes f32 features is refused token data with a clear error.
    let linear = preset("linear", &[4], 3).unwrap();
    let linear_init = linear.init_params(0);
    let refused = |config: RunConfig| {
        Run::new(ctx, linear.clone(), config, train, &linear_init, None).map(|_| ())
    };
    let spec = preset("gpt-tiny", &[4], 3).unwrap();
    let init = spec.init_params(0);
    let step = StepConfig::new(
        Precision::F32,
        LossKind::CrossEntropy,
        OptimizerConfig::sgd(0.1),
    );
    let config = common::runs::steps_run(step, 2, 1);
    let mut run = Run::new(ctx, spec.clone(), config.clone(), train, &init, None).unwrap();
    assert_eq!(run.vocab.as_ref(), Some(corpus.vocab().as_ref()));
    let ck = run.checkpoint(ctx).unwrap();
    assert_eq!(ck.vocab(), Some(corpus.vocab().as_ref()));
    let ck = Checkpoint::from_bytes(&ck.to_bytes().unwrap(), "run").unwrap();
    assert_eq!(ck.vocab(), Some(corpus.vocab().as_ref()));

    // Token batches reach the trainer as B·T ids and B·T labels, and train.
    run.advance(ctx, train, 1).unwrap();
    match refused(config.clone()) {
        Err(Error::Model(message)) => assert!(
            message.contains("takes f32 features but abc/train holds token ids"),
            "{message}"
        ),
        other => panic!("expected a model error, got {other:?}"),
    }

    // Resuming with a text of another vocabulary is refused; the same one is accepted.
    let other = TextCorpus::from_text("xyz", &"xyzxyzxy".repeat(10))
        .unwrap()
        .split(4)
        .unwrap();
    match Run::new(
        ctx,
        spec.clone(),
        config.clone(),
        &other.train,
        &init,
        Some(&ck),
    ) {
        Err(Error::Checkpoint(msg)) => assert!(
            msg.contains("vocabulary") && msg.contains("xyz/train"),
            "{msg}"
        ),
        Err(other) => panic!("expected a checkpoint error, got {other}"),
        Ok(_) => panic!("resumed with another vocabulary"),
    }
    let resumed = Run::new(ctx, spec, config, train, &init, Some(&ck)).unwrap();
    assert_eq!(resumed.vocab.as_ref(), Some(corpus.vocab().as_ref()));
    ctx.check().unwrap();
}
