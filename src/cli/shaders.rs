//! `webgpu-amp shaders --browser` (hidden): every WGSL variant the browser build can select,
//! specialised, with each entry point's bind-group layout, as JSON. `scripts/tint-check.sh`
//! hands them to Chrome's WebGPU engine (Dawn, whose WGSL compiler is Tint).

use clap::Args;

use super::out::outln;

#[derive(Args)]
pub struct ShadersArgs {
    /// Only the variants a browser can select (every one but the tensor-core kernels).
    #[arg(long)]
    browser: bool,
}

pub fn run(args: &ShadersArgs) -> webgpu_amp::Result<()> {
    let variants = if args.browser {
        webgpu_amp::variants::export_browser()?
    } else {
        webgpu_amp::variants::all()?
            .iter()
            .map(webgpu_amp::variants::export)
            .collect::<webgpu_amp::Result<_>>()?
    };
    let json = serde_json::json!({ "variants": variants });
    outln!("{json}")
}
