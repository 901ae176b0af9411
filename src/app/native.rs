//! The native entry point: `webgpu-amp gui` opens [`App`] in an eframe window on the wgpu
//! renderer. The renderer's device is requested with the features and limits training
//! wants (shader-f16, timestamp queries), on the backend and adapter the options name, so
//! one device draws and trains. Its twin for the browser is `web.rs`.

use std::sync::Arc;

use eframe::egui;

use super::App;
use super::config::SessionConfig;
use crate::error::{Error, Result};
use crate::gpu::GpuContext;

/// Options of the native window.
#[derive(Clone, Debug, Default)]
pub struct NativeOptions {
    pub gpu: crate::gpu::GpuOptions,
    pub config: SessionConfig,
    pub autostart: bool,
    /// Window size in points.
    pub size: Option<[f32; 2]>,
    /// How the resume command of a run cut short starts (the binary's name).
    pub program: String,
}

/// Open the app in a native window (eframe, wgpu renderer). The renderer's device is
/// requested with the features and limits training wants (shader-f16, timestamp queries),
/// on the backend and adapter the options name, so one device draws and trains. Closing the
/// window mid-run saves the runs and ends with [`Error::Interrupted`] (`app/interrupted.rs`).
pub fn run_native(options: NativeOptions) -> Result<()> {
    use eframe::egui_wgpu::{WgpuConfiguration, WgpuSetup, WgpuSetupCreateNew};

    let mut setup = WgpuSetupCreateNew::without_display_handle();
    if options.gpu.backend != crate::gpu::BackendChoice::Auto {
        setup.instance_descriptor.backends = options.gpu.backend.backends();
    }
    if let Some(want) = options.gpu.adapter.clone() {
        let needle = want.to_lowercase();
        setup.native_adapter_selector = Some(Arc::new(move |adapters, _surface| {
            adapters
                .iter()
                .find(|a| a.get_info().name.to_lowercase().contains(&needle))
                .cloned()
                .ok_or_else(|| format!("no adapter name contains `{want}`"))
        }));
    }
    let tensor_cores = options.gpu.tensor_cores;
    setup.device_descriptor = Arc::new(move |a| GpuContext::device_descriptor(a, tensor_cores));
    let native = eframe::NativeOptions {
        renderer: eframe::Renderer::Wgpu,
        wgpu_options: WgpuConfiguration {
            wgpu_setup: WgpuSetup::CreateNew(setup),
            ..Default::default()
        },
        viewport: egui::ViewportBuilder::default()
            .with_title("webgpu-amp")
            .with_inner_size(options.size.unwrap_or([1280.0, 820.0])),
        ..Default::default()
    };
    let f16 = options.gpu.f16_storage;
    let config = options.config;
    let autostart = options.autostart;
    let program = options.program;
    let closed_mid_run: Arc<std::sync::Mutex<Option<Error>>> = Default::default();
    let slot = closed_mid_run.clone();
    eframe::run_native(
        "webgpu-amp",
        native,
        Box::new(move |cc| {
            let mut app = App::from_creation_context(cc, f16, tensor_cores, config)?;
            app.autostart = autostart;
            app.program = program;
            app.closed_mid_run = slot;
            // Ctrl-C or a kill ends the app as closing its window does.
            app.watch_signals = crate::interrupt::install();
            Ok(Box::new(app))
        }),
    )
    .map_err(|e| Error::Unsupported(format!("the app window failed: {e}")))?;
    match closed_mid_run.lock().ok().and_then(|mut e| e.take()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
