//! The egui app: f16 and f32 shader paths trained side by side, with the numerics made
//! visible. The same app runs natively (`webgpu-amp gui`, eframe on wgpu) and in the
//! browser (WebGPU), from two thin, symmetric entry points: `native.rs` (`run_native`) and
//! `web.rs` (`start(canvas_id)`, wasm32 only).
//!
//! Split the way egui's demo app is: [`App`] holds all UI state in one struct and draws one
//! small function per panel (`setup`, `runs`, `scaling`, `numerics`, `precision`,
//! `kernels`, `samples`); the
//! UI-free [`session::Session`] owns the GPU and one [`crate::train::Run`] per mode and
//! advances them inside frames through [`crate::train::Run::advance`], the training loop
//! the CLI uses too, without ever waiting on the GPU. [`probes`] are the app's own
//! asynchronous read-backs (validation, kernel profile, gradient histogram);
//! [`autorun`] is the browser's click-free run and its published result.

pub mod autorun;
pub mod config;
#[cfg(target_arch = "wasm32")]
mod dom;
pub mod folder;
#[cfg(not(target_arch = "wasm32"))]
pub mod interrupted;
pub mod kernels;
mod mode_run;
pub mod model;
#[cfg(not(target_arch = "wasm32"))]
pub mod native;
pub mod numerics;
pub mod numerics_history;
mod panels;
pub mod precision;
pub mod probes;
pub mod runs;
pub mod samples;
pub mod scaling;
pub mod session;
pub mod setup;
#[cfg(target_arch = "wasm32")]
pub mod web;

use std::sync::Arc;

use eframe::egui;

use crate::amp::policy::{Precision, PrecisionRow};
use crate::error::{Error, Result};
use crate::gpu::{F16StorageChoice, GpuContext, TensorCoreChoice};
use session::{Session, SessionConfig, Status};

/// The panels of the central area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Runs,
    Scaling,
    Precision,
    Kernels,
    Samples,
    Numerics,
}

impl Tab {
    pub const ALL: [Tab; 6] = [
        Tab::Runs,
        Tab::Scaling,
        Tab::Numerics,
        Tab::Precision,
        Tab::Kernels,
        Tab::Samples,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Runs => "Runs side by side",
            Tab::Scaling => "Why scaling matters",
            Tab::Precision => "Precision map",
            Tab::Kernels => "Kernels",
            Tab::Samples => "Sampled text",
            Tab::Numerics => "Numerics",
        }
    }
}

/// The precision map shown, with what it was computed for.
struct PrecisionMapCache {
    key: (String, String, Precision),
    rows: std::result::Result<Vec<PrecisionRow>, String>,
}

/// All UI state, in one struct.
pub struct App {
    pub session: Session,
    /// The setup panel's edits; Start hands a copy to the session.
    pub config: SessionConfig,
    pub tab: Tab,
    /// Histogram: which mode (index into the session's runs; None: the first mode with a
    /// GradScaler) and which parameter (None: the first weight).
    pub hist_mode: Option<usize>,
    pub hist_param: Option<String>,
    /// Precision map: which mode.
    pub map_mode: Precision,
    /// Numerics: the layer (precision-map row) whose exponent histogram is shown.
    pub numerics_layer: Option<usize>,
    /// Start a run on the first frame (`webgpu-amp gui --autostart`).
    pub autostart: bool,
    /// How the resume command of a run cut short by closing the window starts (the
    /// binary's name as it was started), and the folder it is saved in (empty: the working
    /// directory).
    pub program: String,
    pub save_dir: std::path::PathBuf,
    /// What closing the window mid-run ended with ([`Error::Interrupted`] and its line, or
    /// the save's error), for `run_native` to report after the window is gone.
    pub closed_mid_run: Arc<std::sync::Mutex<Option<Error>>>,
    /// Close the window on SIGINT or SIGTERM ([`crate::interrupt`], installed by the native
    /// entry): the runs are then saved as when the window is closed, and `gui` exits 130.
    pub watch_signals: bool,
    precision_map: Option<PrecisionMapCache>,
    /// The setup panel's Hugging Face folder path (native), and what picking the last one
    /// said (a summary, or why it was refused).
    pub folder_path: String,
    pub folder_note: Option<std::result::Result<String, String>>,
}

impl App {
    pub fn new(ctx: Arc<GpuContext>, config: SessionConfig) -> Self {
        Self {
            session: Session::new(ctx),
            config,
            tab: Tab::Runs,
            hist_mode: None,
            hist_param: None,
            map_mode: Precision::AmpF16,
            numerics_layer: None,
            autostart: false,
            program: "webgpu-amp".into(),
            save_dir: Default::default(),
            closed_mid_run: Default::default(),
            watch_signals: false,
            precision_map: None,
            folder_path: String::new(),
            folder_note: None,
        }
    }

    /// The app on the device eframe's wgpu renderer made (native and web): one device
    /// draws the UI and trains. Native f16 needs the renderer's device to have been created
    /// with `shader-f16` ([`GpuContext::device_descriptor`] asks for it); otherwise f16 runs
    /// packed.
    pub fn from_creation_context(
        cc: &eframe::CreationContext<'_>,
        f16: F16StorageChoice,
        tensor_cores: TensorCoreChoice,
        config: SessionConfig,
    ) -> Result<Self> {
        let rs = cc
            .wgpu_render_state
            .as_ref()
            .ok_or_else(|| Error::Unsupported("the app needs eframe's wgpu renderer".into()))?;
        let ctx = GpuContext::from_device(
            rs.adapter.clone(),
            rs.device.clone(),
            rs.queue.clone(),
            f16,
            tensor_cores,
        )?;
        Ok(Self::new(Arc::new(ctx), config))
    }

    /// Per-frame logic, no drawing: advance training, keep derived views current.
    pub fn tick(&mut self, ctx: &egui::Context) {
        if self.watch_signals {
            if crate::interrupt::requested() {
                ctx.send_viewport_cmd(egui::ViewportCommand::Close);
            } else {
                // An idle window draws no frame: wake now and then to notice a signal.
                ctx.request_repaint_after(std::time::Duration::from_millis(250));
            }
        }
        let now = ctx.input(|i| i.time);
        if self.tick_at(now) {
            ctx.request_repaint();
        }
    }

    /// The logic of [`App::tick`] without egui, at time `now` (seconds): also what the
    /// browser entry calls from a timer, so training never waits for a frame to be
    /// presented. Returns whether more ticks are wanted soon.
    pub fn tick_at(&mut self, now: f64) -> bool {
        // An autorun of a picked folder's model (`model=hf:`) waits for the folder.
        if self.autostart
            && *self.session.status() == Status::Idle
            && self.session.can_start(&self.config)
        {
            self.autostart = false;
            self.session.start(self.config.clone());
        }
        let busy = self.session.tick(now);
        self.sync_histogram_selection();
        if self.tab == Tab::Precision {
            self.refresh_precision_map();
        }
        busy
    }

    /// Per-frame logic then drawing, for hosts that give one `Ui` (tests).
    pub fn update(&mut self, ui: &mut egui::Ui) {
        self.tick(ui.ctx());
        self.show(ui);
    }

    /// Point the session's histogram at the chosen mode and parameter (default: the first
    /// mode with a GradScaler, the first weight).
    fn sync_histogram_selection(&mut self) {
        let runs = self.session.runs();
        if runs.is_empty() {
            return;
        }
        let mode = self
            .hist_mode
            .filter(|&m| m < runs.len())
            .unwrap_or_else(|| runs.iter().position(|r| r.scaler_enabled).unwrap_or(0));
        let entries = &runs[mode].trainer().store.layout.entries;
        let valid = self
            .hist_param
            .as_ref()
            .is_some_and(|p| entries.iter().any(|e| &e.name == p));
        if !valid {
            self.hist_param = entries
                .iter()
                .find(|e| e.name.ends_with("weight"))
                .or(entries.first())
                .map(|e| e.name.clone());
        }
        if let Some(param) = self.hist_param.clone()
            && let Err(e) = self.session.select_histogram(mode, &param)
        {
            self.hist_param = None;
            log_error(&e);
        }
    }

    /// Recompute the precision map when the model, data set or mode changed.
    pub fn refresh_precision_map(&mut self) {
        let key = (
            self.config.model.clone(),
            self.config.dataset.clone(),
            self.map_mode,
        );
        if self.precision_map.as_ref().is_some_and(|c| c.key == key) {
            return;
        }
        let rows = self
            .session
            .precision_map(&self.config, self.map_mode)
            .map_err(|e| e.to_string());
        self.precision_map = Some(PrecisionMapCache { key, rows });
    }

    /// Fine-tune the Hugging Face folder `source` holds, named `name` (the page's folder
    /// input, the setup panel's path): the model becomes `hf:NAME`, on the embedded text
    /// unless a text is selected. Returns a line on what was picked; a folder that is not a
    /// Llama one (or has no tokenizer.json) is an error naming the file, and changes nothing.
    pub fn pick_folder(
        &mut self,
        name: &str,
        source: Box<dyn crate::data::hf::FolderSource>,
    ) -> Result<String> {
        Ok(self.use_folder(folder::PickedFolder::new(name, source)?))
    }

    /// Fine-tune `folder` (read already): [`App::pick_folder`]'s second half.
    pub fn use_folder(&mut self, folder: folder::PickedFolder) -> String {
        let summary = folder.summary();
        self.config.model = folder.model_name();
        self.config.dataset = model::dataset_for(&self.config.model, &self.config.dataset);
        self.session.set_folder(folder);
        self.precision_map = None;
        summary
    }

    /// The precision map last computed (by [`App::refresh_precision_map`]).
    pub fn precision_rows(&self) -> Option<&std::result::Result<Vec<PrecisionRow>, String>> {
        self.precision_map.as_ref().map(|c| &c.rows)
    }
}

fn log_error(e: &Error) {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "webgpu-amp app: {e}");
    }
    #[cfg(target_arch = "wasm32")]
    let _ = e;
}

impl eframe::App for App {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.tick(ctx);
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }

    /// The window closed: a run cut short is saved in the working directory
    /// ([`interrupted`]).
    #[cfg(not(target_arch = "wasm32"))]
    fn on_exit(&mut self) {
        let outcome = match self.session.save_interrupted(&self.save_dir, &self.program) {
            Ok(None) => return,
            Ok(Some(line)) => Error::Interrupted(line),
            Err(e) => e,
        };
        if let Ok(mut slot) = self.closed_mid_run.lock() {
            *slot = Some(outcome);
        }
    }
}

/// A color per precision mode, the same in every plot.
pub fn mode_color(p: Precision) -> egui::Color32 {
    match p {
        Precision::F32 => egui::Color32::from_rgb(66, 133, 244),
        Precision::AmpF16 => egui::Color32::from_rgb(244, 140, 36),
        Precision::AmpBf16 => egui::Color32::from_rgb(52, 168, 83),
        Precision::F16 => egui::Color32::from_rgb(219, 68, 55),
    }
}
