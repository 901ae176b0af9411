//! Autorun: train one precision mode without clicks and publish a JSON result. The browser
//! page does this for `index.html?autorun=1&precision=amp-f16&steps=100` (end-to-end tests
//! and demos); nothing here touches the DOM, so the query parsing, the progress line and
//! the result are tested natively on the same [`Session`] the page drives. The page's
//! entry (`web.rs`) only writes what [`AutorunPublisher`] hands it into the page.

use serde::Serialize;

use super::model::dataset_for;
use super::session::{OptimizerKind, Session, SessionConfig, Status};
use crate::amp::policy::Precision;
use crate::error::{Error, Result};
use crate::tensor::Storage;
use crate::train::Setting;

/// What an autorun trains, from the page's query string.
#[derive(Clone, Debug, PartialEq)]
pub struct Autorun {
    pub config: SessionConfig,
    /// Test hook: destroy the training device while this step is in flight
    /// (`lose_device_at=N`), to see the page report a lost device.
    pub lose_device_at: Option<u64>,
}

/// Query keys the page understands (anything else is an error, so a typo is not ignored).
pub const QUERY_KEYS: [&str; 12] = [
    "autorun",
    "precision",
    "steps",
    "model",
    "dataset",
    "batch",
    "lr",
    "optimizer",
    "seed",
    "init_scale",
    "numerics",
    "lose_device_at",
];

impl Autorun {
    /// Parse a query string (`?autorun=1&precision=amp-f16&steps=100`, the `?` optional).
    /// `Ok(None)` when autorun is not asked for; an error names the bad key or value.
    ///
    /// Defaults are the app's ([`SessionConfig::default`]: mlp on the embedded MNIST,
    /// batch 64, Adam at 1e-3), one mode (`precision`, default amp-f16), 100 steps, and no
    /// periodic validation (it would time the validation, not the steps).
    pub fn from_query(query: &str) -> Result<Option<Self>> {
        let pairs = parse_query(query)?;
        for (key, _) in &pairs {
            if !QUERY_KEYS.contains(&key.as_str()) {
                return Err(Error::InvalidArgument(format!(
                    "unknown query parameter `{key}` (expected one of {})",
                    QUERY_KEYS.join(", ")
                )));
            }
        }
        let get = |key: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        match get("autorun") {
            None | Some("0") | Some("false") => return Ok(None),
            Some("1") | Some("true") | Some("") => {}
            Some(other) => {
                return Err(Error::InvalidArgument(format!(
                    "autorun={other}: expected 1 or 0"
                )));
            }
        }
        let mut config = SessionConfig {
            modes: vec![Precision::AmpF16],
            steps: 100,
            // The page publishes no accuracy: a validation would only delay the result.
            eval_every: SessionConfig::NEVER,
            // The staging ring holds 8 steps; 4 a frame keeps the GPU fed at 60 frames/s.
            steps_per_frame: 4,
            ..SessionConfig::default()
        };
        if let Some(p) = get("precision") {
            config.modes = vec![Precision::parse(p)?];
        }
        if let Some(s) = get("steps") {
            config.steps = parse_number("steps", s)?;
        }
        if let Some(m) = get("model") {
            config.model = m.to_string();
        }
        match get("dataset") {
            Some(d) => config.dataset = d.to_string(),
            // A GPT trains on the embedded text unless told otherwise.
            None => config.dataset = dataset_for(&config.model, &config.dataset),
        }
        if let Some(b) = get("batch") {
            config.batch_size = parse_number("batch", b)?;
        }
        if let Some(lr) = get("lr") {
            config.lr = parse_number("lr", lr)?;
        }
        if let Some(o) = get("optimizer") {
            config.optimizer = OptimizerKind::ALL
                .into_iter()
                .find(|k| k.name().eq_ignore_ascii_case(o))
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("optimizer={o}: expected sgd, adam or adamw"))
                })?;
        }
        if let Some(s) = get("seed") {
            config.seed = parse_number("seed", s)?;
        }
        if let Some(s) = get("init_scale") {
            // The GradScaler's first scale (the CLI's --init-scale): a huge one makes the
            // f16 backward overflow, so the page shows steps skipped on inf.
            config.scaler.init_scale = parse_number("init_scale", s)?;
            config
                .scaler
                .validate()
                .map_err(|e| Error::InvalidArgument(format!("init_scale={s}: {e}")))?;
        }
        if let Some(n) = get("numerics") {
            // Count per-layer numerics (`every:N`); the page then opens on the Numerics tab.
            config.numerics = crate::train::numerics::parse_every(n)
                .map_err(|e| Error::InvalidArgument(format!("numerics={n}: {e}")))?;
        }
        config.validate_named(query_key)?;
        let lose_device_at = get("lose_device_at")
            .map(|s| parse_number("lose_device_at", s))
            .transpose()?;
        Ok(Some(Self {
            config,
            lose_device_at,
        }))
    }
}

/// A run setting as the query string names it.
fn query_key(setting: Setting) -> &'static str {
    match setting {
        Setting::Steps => "steps",
        Setting::BatchSize => "batch",
        other => other.words(),
    }
}

fn parse_number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value
        .parse()
        .map_err(|_| Error::InvalidArgument(format!("{key}={value}: not a valid number")))
}

/// `a=1&b=x%20y` → [(a, 1), (b, x y)]: `+` is a space, `%XX` a byte.
fn parse_query(query: &str) -> Result<Vec<(String, String)>> {
    let query = query.strip_prefix('?').unwrap_or(query);
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(k)?, decode(v)?))
        })
        .collect()
}

fn decode(s: &str) -> Result<String> {
    let bad = || Error::InvalidArgument(format!("bad percent-encoding in `{s}`"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3).ok_or_else(bad)?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// What an autorun publishes (`window.webgpuAmpResult` and `#result` in the page).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutorunResult {
    /// Finished every step without an error.
    pub ok: bool,
    pub error: Option<String>,
    pub adapter: String,
    pub backend: String,
    /// `native` (`array<f16>`, shader-f16) or `packed` (two halves per u32).
    pub f16_storage: crate::F16Storage,
    /// The storage the run's trainer really keeps its low-precision copy of the weights in:
    /// `f32` (no copy), `native` or `packed` f16, `bf16`. For f16 modes it must equal
    /// `f16_storage`; the end-to-end test checks that.
    pub trained_storage: String,
    pub precision: String,
    pub model: String,
    pub dataset: String,
    pub batch_size: usize,
    /// Optimizer steps whose stats came back.
    pub steps: usize,
    pub first_loss: Option<f32>,
    pub last_loss: Option<f32>,
    /// The GradScaler's scale after the last step (1 when the mode has no scaler).
    pub final_scale: Option<f32>,
    pub skipped_steps: usize,
    /// A GPT's last sampled text (the prompt, a newline, then what it wrote) and the step it
    /// was sampled at; `None` for other models.
    pub sample: Option<String>,
    pub sample_step: Option<u64>,
    /// Wall-clock seconds that sample took once the training steps queued before it had
    /// landed (or from its submission, if later) to its text landing.
    pub sample_secs: Option<f64>,
    /// Wall-clock milliseconds per optimizer step while running (frames included: it is
    /// what a user of the page sees, not GPU time).
    pub ms_per_step: Option<f64>,
    /// With `numerics=every:N`: what the Numerics panel had and drew.
    pub numerics: Option<AutorunNumerics>,
}

/// The AMP doctor's part of an autorun's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AutorunNumerics {
    /// Steps whose per-layer numerics came back.
    pub counted_steps: usize,
    /// The heat map's rows: the layers as the precision map names them.
    pub layers: Vec<String>,
    /// Cells of the heat map the panel drew in its latest frame (0: never drawn).
    pub heat_map_cells: usize,
    /// The cause of the first skipped step that was counted, as the CLI's metrics say it.
    pub first_skip_cause: Option<String>,
}

impl AutorunResult {
    /// The result once the session has finished or failed; `None` while it is still going.
    pub fn from_session(session: &Session) -> Option<Self> {
        let error = match session.status() {
            Status::Finished => None,
            Status::Failed(e) => Some(e.clone()),
            Status::Stopped => Some("stopped before the last step".into()),
            _ => return None,
        };
        let ctx = session.ctx();
        let run = session.runs().first();
        let history = run.map(|r| r.history.as_slice()).unwrap_or_default();
        let steps = history.len();
        let secs = session.running_secs();
        Some(Self {
            ok: error.is_none() && steps > 0,
            error,
            adapter: ctx.report.name.clone(),
            backend: ctx.report.backend.clone(),
            f16_storage: ctx.f16_storage,
            trained_storage: run.map_or_else(String::new, |r| {
                match r.trainer().store.low.as_ref().map(|(_, storage)| *storage) {
                    None | Some(Storage::F32 | Storage::U32) => "f32",
                    Some(Storage::F16) => "native",
                    Some(Storage::F16Packed) => "packed",
                    Some(Storage::BF16) => "bf16",
                }
                .to_string()
            }),
            precision: session
                .config
                .modes
                .first()
                .map_or_else(String::new, |p| p.name().to_string()),
            model: session.config.model.clone(),
            dataset: session.config.dataset.clone(),
            batch_size: session.config.batch_size,
            steps,
            first_loss: history.first().map(|s| s.loss),
            last_loss: history.last().map(|s| s.loss),
            final_scale: run.and_then(|r| r.final_scale()),
            skipped_steps: history.iter().filter(|s| s.skipped).count(),
            sample: run.and_then(|r| r.samples.last()).map(|(_, t)| t.clone()),
            sample_step: run.and_then(|r| r.samples.last()).map(|&(s, _)| s),
            sample_secs: run.and_then(|r| r.sample_secs()),
            ms_per_step: (steps > 0 && secs > 0.0).then(|| secs * 1000.0 / steps as f64),
            numerics: run
                .filter(|_| session.config.numerics.is_some())
                .map(|r| AutorunNumerics {
                    counted_steps: r.numerics.steps.len(),
                    layers: r.numerics.layers.iter().map(|l| l.name.clone()).collect(),
                    heat_map_cells: r.numerics.cells_drawn,
                    first_skip_cause: r
                        .numerics
                        .steps
                        .iter()
                        .find_map(|s| s.cause.as_ref().map(|c| c.to_string())),
                }),
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("plain data serializes")
    }
}

/// What the page shows for an autorun after a frame.
#[derive(Clone, Debug, PartialEq)]
pub enum AutorunUpdate {
    /// Still going: one line of progress for `#status`.
    Progress(String),
    /// Ended: the last status line and the result to publish (once).
    Finished {
        status: String,
        result: Box<AutorunResult>,
    },
}

/// Publishes an autorun's progress every frame and its result exactly once.
#[derive(Clone, Debug, Default)]
pub struct AutorunPublisher {
    published: bool,
}

impl AutorunPublisher {
    /// What to show after this frame; `None` once the result has been published.
    pub fn update(&mut self, session: &Session) -> Option<AutorunUpdate> {
        if self.published {
            return None;
        }
        if let Some(result) = AutorunResult::from_session(session) {
            self.published = true;
            let status = format!("autorun done: {}", session.status().label());
            return Some(AutorunUpdate::Finished {
                status,
                result: Box::new(result),
            });
        }
        let done = session.runs().first().map_or(0, |r| r.history.len());
        let sampling = if session.sampling() {
            ", sampling text"
        } else {
            ""
        };
        Some(AutorunUpdate::Progress(match session.status() {
            Status::Running => format!(
                "autorun {}: step {done}/{}{sampling}",
                session.config.modes[0], session.config.steps
            ),
            other => format!("autorun: {}", other.label()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_autorun_without_the_key_or_when_off() {
        assert_eq!(Autorun::from_query("").unwrap(), None);
        assert_eq!(Autorun::from_query("?precision=f32").unwrap(), None);
        assert_eq!(Autorun::from_query("?autorun=0").unwrap(), None);
    }

    #[test]
    fn the_e2e_query_parses() {
        let a = Autorun::from_query("?autorun=1&precision=amp-f16&steps=100")
            .unwrap()
            .unwrap();
        assert_eq!(a.config.modes, vec![Precision::AmpF16]);
        assert_eq!(a.config.steps, 100);
        assert_eq!(a.config.model, "mlp");
        let a = Autorun::from_query(
            "autorun=1&precision=f32&steps=7&batch=32&lr=0.01&optimizer=sgd&model=linear&seed=3",
        )
        .unwrap()
        .unwrap();
        assert_eq!(a.config.modes, vec![Precision::F32]);
        assert_eq!(
            (a.config.steps, a.config.batch_size, a.config.seed),
            (7, 32, 3)
        );
        assert_eq!(a.config.lr, 0.01);
        assert_eq!(a.config.optimizer, OptimizerKind::Sgd);
        assert_eq!(a.config.model, "linear");
    }

    #[test]
    fn percent_and_plus_decode() {
        let a = Autorun::from_query("?autorun=1&dataset=synthetic%3A512")
            .unwrap()
            .unwrap();
        assert_eq!(a.config.dataset, "synthetic:512");
        assert_eq!(decode("a+b%20c").unwrap(), "a b c");
        for bad in ["%zz", "%4"] {
            let e = decode(bad).unwrap_err().to_string();
            assert!(e.contains("bad percent-encoding") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn bad_values_and_keys_are_errors_that_say_what() {
        let err = |q: &str| Autorun::from_query(q).unwrap_err().to_string();
        assert!(err("?autorun=1&precision=f64").contains("unknown precision `f64`"));
        assert!(err("?autorun=1&steps=ten").contains("steps=ten"));
        assert!(err("?autorun=1&steps=0").contains("steps must be 1 to 2^53, got 0"));
        assert!(err("?autorun=1&optimizer=lbfgs").contains("optimizer=lbfgs"));
        assert!(err("?autorun=1&step=10").contains("unknown query parameter `step`"));
        assert!(err("?autorun=yes").contains("autorun=yes"));
        assert!(err("?autorun=1&init_scale=-2").contains("init_scale=-2"));
        assert!(err("?autorun=1&init_scale=big").contains("init_scale=big"));
        assert!(err("?autorun=1&numerics=every:0").contains("numerics=every:0"));
        let a = Autorun::from_query("?autorun=1&numerics=every:2")
            .unwrap()
            .unwrap();
        assert_eq!(a.config.numerics, Some(2));
    }
}
