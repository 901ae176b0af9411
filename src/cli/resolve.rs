//! The model and data of `train` and `compare`, resolved from the flags before any GPU work:
//! text and token data train a GPT ([`model_and_data`]); class labels train a preset that
//! keeps its class count (`--num-classes`) or a JSON model whose last layer sets it.

use webgpu_amp::data::file_caps::MODEL_FILE;
use webgpu_amp::data::hf::LlamaConfig;
use webgpu_amp::data::{DataSource, Labels, Split, read_capped};
use webgpu_amp::nn::{LossKind, ModelSpec, preset};
use webgpu_amp::train::{ModelChoice, model_and_data, model_and_tokenized, model_for_split};
use webgpu_amp::{Error, Result};

/// Classes a preset predicts on class labels unless `--num-classes` says otherwise: the
/// tutorials' `SimpleCNN(num_classes=10)`, and MNIST's and Fashion-MNIST's ten.
pub const PRESET_CLASSES: usize = 10;

/// What the flags ask for: `--model`, `--dataset`, `--loss`, `--num-classes` and
/// `--seq-len`.
pub struct Wanted<'a> {
    pub model: Option<&'a str>,
    pub dataset: Option<&'a str>,
    pub loss: Option<&'a str>,
    pub num_classes: Option<usize>,
    pub seq_len: Option<usize>,
    /// `--tokenizer`: a tokenizer.json that encodes a text data set.
    pub tokenizer: Option<&'a std::path::Path>,
    /// A resumed checkpoint's model description (its metadata `model`), the model when
    /// `model` is not given: `--resume` continues the model it saved.
    pub saved_model: Option<&'a str>,
}

/// `--model hf:DIR`: a Hugging Face transformers folder.
pub const HF_PREFIX: &str = "hf:";

/// `--seq-len`: at least one token (the model bounds it by its max_position_embeddings).
pub const SEQ_LEN_RANGE: &str = "1 to 1048576";

/// `--seq-len`'s range check (train, compare, plan and bench step), before anything reads it.
pub fn check_seq_len(seq_len: Option<usize>) -> webgpu_amp::Result<()> {
    match seq_len {
        Some(n) if !(1..=1 << 20).contains(&n) => Err(webgpu_amp::Error::InvalidArgument(format!(
            "--seq-len must be {SEQ_LEN_RANGE}, got {n}"
        ))),
        _ => Ok(()),
    }
}

/// The model `--model` names: a JSON file, a Hugging Face folder (`hf:DIR`: its
/// config.json, as a Llama description) or a preset; trained on windows of `--seq-len`.
fn choose(model: &str, seq_len: Option<usize>) -> Result<ModelChoice> {
    let choice = if let Some(dir) = model.strip_prefix(HF_PREFIX) {
        let path = std::path::Path::new(dir).join(webgpu_amp::data::hf::CONFIG);
        let text = String::from_utf8(read_capped(&path, MODEL_FILE).map_err(Error::Model)?)
            .map_err(|_| Error::Model(format!("{}: not UTF-8 text", path.display())))?;
        let config = LlamaConfig::from_json(&text, &path.display().to_string())?;
        ModelChoice::hf(config)
    } else if model.ends_with(".json") {
        ModelChoice::Json(read_model_file(model)?)
    } else {
        ModelChoice::Preset(model.to_string())
    };
    Ok(windowed(choice, seq_len))
}

/// `choice` trained on windows of `--seq-len` tokens when given.
fn windowed(choice: ModelChoice, seq_len: Option<usize>) -> ModelChoice {
    match seq_len {
        None => choice,
        Some(seq_len) => ModelChoice::Windowed {
            model: Box::new(choice),
            seq_len,
        },
    }
}

/// What [`resolve`] found: the data, the model, its loss, the model's name for messages
/// (the preset or the JSON file) and the data set's name.
pub struct ModelAndData {
    pub split: Split,
    pub spec: ModelSpec,
    pub loss: LossKind,
    pub what: String,
    pub dataset: String,
}

/// A data error with a hint appended (what sets the class count).
fn with_hint(e: Error, hint: &str) -> Error {
    match e {
        Error::Data(m) => Error::Data(format!("{m}; {hint}")),
        other => other,
    }
}

/// from_json's messages start with "json: "; name the file instead.
fn name_file(e: Error, file: &str) -> Error {
    match e {
        Error::Model(m) => Error::Model(format!(
            "{file}: {}",
            m.strip_prefix("json: ").unwrap_or(&m)
        )),
        other => other,
    }
}

/// Data, model and loss from the flags, without the GPU and without parameters.
pub fn resolve(args: &Wanted) -> Result<ModelAndData> {
    check_seq_len(args.seq_len)?;
    let file = args.model.filter(|m| m.ends_with(".json"));
    let saved = args.saved_model.filter(|_| args.model.is_none());
    let choice = match (args.model, saved) {
        (Some(m), _) => Some(choose(m, args.seq_len)?),
        (None, Some(json)) => Some(windowed(ModelChoice::Json(json.into()), args.seq_len)),
        (None, None) => None,
    };
    if let (None, None, Some(n)) = (args.model, saved, args.seq_len) {
        return Err(Error::InvalidArgument(format!(
            "--seq-len {n} sets a Llama's training window: give --model (llama-tiny, \
             smollm2-135m, hf:DIR or a JSON file)"
        )));
    }
    let tokens = choice.as_ref().is_some_and(ModelChoice::takes_tokens);
    // The embedded MNIST set unless the model is a language model (a GPT), which trains on
    // the embedded text.
    let dataset = args.dataset.map(str::to_string).unwrap_or_else(|| {
        if tokens {
            DataSource::EMBEDDED_TEXT.into()
        } else {
            "default".into()
        }
    });
    let source = dataset.parse::<DataSource>()?;
    let named = |e: Error| match (file, saved) {
        (Some(f), _) => name_file(e, f),
        (None, Some(_)) => saved_error(e, SAVED),
        (None, None) => e,
    };
    let hf_folder = args.model.and_then(|m| m.strip_prefix(HF_PREFIX));
    let tokenizer =
        super::text_tokens::tokenizer_for(args.tokenizer, hf_folder, &source, &dataset)?;
    let (spec, split) = if let Some(path) = tokenizer {
        let (text, vocab) = super::text_tokens::tokenized_text(&source, &path)?;
        model_and_tokenized(choice.as_ref(), &text, vocab).map_err(named)?
    } else if source.is_text() {
        model_and_data(choice.as_ref(), &source, true).map_err(named)?
    } else {
        let split = source.load(true)?;
        if tokens || split.train.is_tokens() {
            model_for_split(choice.as_ref(), split).map_err(named)?
        } else if let Some(json) = saved {
            let spec = ModelSpec::from_json(json).map_err(|e| saved_error(e, SAVED))?;
            described_class_model(args, split, spec, SAVED)?
        } else {
            let model = args.model.map(str::to_string).unwrap_or_else(|| {
                if split.train.y.is_classification() {
                    "mlp"
                } else {
                    "linear"
                }
                .into()
            });
            class_model(args, split, &model)?
        }
    };
    let what = args.model.map_or_else(|| spec.name.clone(), str::to_string);
    let loss = match args.loss {
        Some(l) => LossKind::parse(l)?,
        None => LossKind::default_for(&split.train.y),
    };
    let name = &split.train.name;
    match (&split.train.y, loss) {
        (Labels::Targets { .. }, LossKind::CrossEntropy) => {
            return Err(Error::InvalidArgument(format!(
                "--loss cross-entropy needs integer class labels; {name} has float targets (use --loss mse)"
            )));
        }
        (Labels::Classes { .. } | Labels::Tokens { .. }, LossKind::Mse) => {
            return Err(Error::InvalidArgument(format!(
                "--loss mse needs float targets; {name} has integer class labels (use --loss cross-entropy)"
            )));
        }
        _ => {}
    }
    if let (Some(n), false) = (
        args.num_classes,
        matches!(split.train.y, Labels::Classes { .. }),
    ) {
        return Err(Error::InvalidArgument(format!(
            "--num-classes {n} is for class labels; {name} has {}, which set the model's outputs",
            if split.train.is_tokens() {
                "tokens"
            } else {
                "float targets"
            }
        )));
    }
    Ok(ModelAndData {
        split,
        spec,
        loss,
        what,
        dataset,
    })
}

/// A preset or JSON model on class labels or float targets (not tokens).
fn class_model(args: &Wanted, mut split: Split, model: &str) -> Result<(ModelSpec, Split)> {
    let classes = matches!(split.train.y, Labels::Classes { .. });
    if !classes {
        // --num-classes on float targets is refused by the caller.
        let spec = if model.ends_with(".json") {
            json_model(model)?
        } else {
            preset(model, &split.train.sample_shape, split.train.output_dim())?
        };
        check(&spec, &split, model)?;
        return Ok((spec, split));
    }
    let spec = if model.ends_with(".json") {
        return described_class_model(args, split, json_model(model)?, model);
    } else {
        // A preset keeps its class count whatever the labels say; a label outside it is an
        // error, not a bigger model.
        let n = args.num_classes.unwrap_or(PRESET_CLASSES);
        split.set_num_classes(n).map_err(|e| {
            with_hint(
                e,
                &format!("the {model} preset has {n} outputs; --num-classes N changes that"),
            )
        })?;
        preset(model, &split.train.sample_shape, n)?
    };
    check(&spec, &split, model)?;
    Ok((spec, split))
}

/// The model's shapes against the data's, naming a JSON model's file.
fn check(spec: &ModelSpec, split: &Split, model: &str) -> Result<()> {
    spec.check_dataset(&split.train).map_err(|e| {
        if model.ends_with(".json") {
            name_file(e, model)
        } else {
            e
        }
    })
}

/// A described model (a JSON file, or a resumed checkpoint's) on class labels: its last
/// layer sets the class count, and every label must be below it.
fn described_class_model(
    args: &Wanted,
    mut split: Split,
    spec: ModelSpec,
    model: &str,
) -> Result<(ModelSpec, Split)> {
    if let [outputs] = *spec.output_shape() {
        if let Some(n) = args.num_classes.filter(|&n| n != outputs) {
            return Err(Error::InvalidArgument(format!(
                "--num-classes {n}, but the model {model} has {outputs} outputs"
            )));
        }
        split
            .set_num_classes(outputs)
            .map_err(|e| with_hint(e, &format!("the model {model} has {outputs} outputs")))?;
    }
    check(&spec, &split, model)?;
    Ok((spec, split))
}

/// How messages name a resumed checkpoint's own model.
const SAVED: &str = "the checkpoint's model (metadata `model`)";

/// A resumed checkpoint's model that does not parse: a damaged or foreign checkpoint.
fn saved_error(e: Error, what: &str) -> Error {
    match e {
        Error::Model(m) => Error::Checkpoint(format!(
            "{what}: {}; give --model",
            m.strip_prefix("json: ").unwrap_or(&m)
        )),
        other => other,
    }
}

fn json_model(model: &str) -> Result<ModelSpec> {
    ModelSpec::from_json(&read_model_file(model)?).map_err(|e| name_file(e, model))
}

/// The text of a JSON model file (at most [`MODEL_FILE`]), naming it in errors. Read once
/// per process: the flags' checks and the run read the same text, and a FIFO is read once,
/// not waited on again by each reader.
pub fn read_model_file(path: &str) -> Result<String> {
    type Read = Option<(String, std::result::Result<String, String>)>;
    static READ: std::sync::Mutex<Read> = std::sync::Mutex::new(None);
    let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((p, text)) = &*read
        && p == path
    {
        return text.clone().map_err(Error::Model);
    }
    let text = read_capped(std::path::Path::new(path), MODEL_FILE).and_then(|bytes| {
        String::from_utf8(bytes).map_err(|e| {
            format!(
                "{path}: not UTF-8 text (byte {})",
                e.utf8_error().valid_up_to()
            )
        })
    });
    *read = Some((path.to_string(), text.clone()));
    text.map_err(Error::Model)
}
