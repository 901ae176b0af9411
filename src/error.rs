//! One error type for the library. Every failure a user can cause or meet (no adapter, a
//! shader that does not validate, a shape mismatch, a device limit) ends up here as a
//! readable message; the CLI prints it as one line and exits non-zero.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    #[error(
        "no GPU adapter found (backend {backend}{adapter}); {}", no_adapter_advice(.backend)
    )]
    NoAdapter { backend: String, adapter: String },

    /// Adapters exist, but none is the one asked for (`--adapter`, `WEBGPU_AMP_ADAPTER`):
    /// the message lists those present.
    #[error("{0}")]
    NoMatchingAdapter(String),

    #[error("could not create the GPU device on {adapter}: {reason}")]
    Device { adapter: String, reason: String },

    #[error("unknown backend `{0}` (expected vulkan, metal, dx12, gl, webgpu or auto)")]
    UnknownBackend(String),

    #[error("shader `{name}` failed: {message}")]
    Shader { name: String, message: String },

    #[error("shape error in {op}: {message}")]
    Shape { op: &'static str, message: String },

    #[error("{0}")]
    Unsupported(String),

    #[error("GPU error: {}", once("GPU error: ", .0))]
    Gpu(String),

    /// The GPU device was lost (driver reset, GPU removed, or destroyed).
    #[error("the GPU device was lost: {0}")]
    DeviceLost(String),

    /// A buffer or binding over the device's limits, or out of GPU memory: `needed` and
    /// `limit` in bytes (`limit` 0 when unknown, as for out-of-memory).
    #[error("{message}")]
    Resource {
        message: String,
        needed: u64,
        limit: u64,
    },

    /// Something the caller asked for that cannot be: a value out of its range, settings
    /// that contradict each other, a path that cannot be written. The CLI exits with 2.
    #[error("invalid argument: {}", once("invalid argument: ", .0))]
    InvalidArgument(String),

    /// Writing a stream or a log (standard output, a metrics file) failed; names it.
    #[error("{0}")]
    Output(String),

    /// Training produced a non-finite loss with nothing to absorb it.
    #[error("training diverged: {}", once("training diverged: ", .0))]
    Diverged(String),

    /// A checkpoint or parameter file that cannot be read or written (names the file).
    #[error("checkpoint: {}", once("checkpoint: ", .0))]
    Checkpoint(String),
    /// A data set that cannot be read or does not make sense (the message names the file).
    #[error("data: {}", once("data: ", .0))]
    Data(String),

    /// Data-parallel training across processes (MPI): a rank out of step with the others,
    /// or a collective that failed.
    #[error("distributed training: {}", once("distributed training: ", .0))]
    Distributed(String),

    /// A model description (JSON or preset) that cannot be built.
    #[error("model description: {}", once("model description: ", .0))]
    Model(String),

    /// Stopped by SIGINT or SIGTERM ([`crate::interrupt`]): the one line to print (where it
    /// stopped, what it saved, how to resume). The CLI exits with 130.
    #[error("{0}")]
    Interrupted(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `message` without the kind's own `prefix` where a wrapped error repeats it (at the start,
/// or after `: `, `; ` or `(`): "invalid argument: tuning file t.json: invalid argument: ..."
/// says it once.
fn once(prefix: &str, message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(prefix) {
        let before = &rest[..at];
        let boundary = (out.is_empty() && before.is_empty())
            || [": ", "; ", "("].iter().any(|b| before.ends_with(b));
        out.push_str(before);
        if !boundary {
            out.push_str(prefix);
        }
        rest = &rest[at + prefix.len()..];
    }
    out.push_str(rest);
    out
}

/// What to do where a backend (`vulkan`, `auto`, ...) finds no adapter: advice that works for
/// that backend (the software drivers Debian packages, or where it exists at all).
pub fn no_adapter_advice(backend: &str) -> &'static str {
    match backend {
        "gl" => {
            "on Debian install Mesa's software GL with `apt-get install -y libegl1 libgl1-mesa-dri`"
        }
        "webgpu" => {
            "the webgpu backend is a browser's, and this native build has none; use vulkan, \
             metal, dx12, gl or auto"
        }
        "metal" => "Metal exists on macOS and iOS only; use vulkan, gl or auto here",
        "dx12" => "DX12 exists on Windows only; use vulkan, gl or auto here",
        _ => "on Debian install software Vulkan with `apt-get install -y mesa-vulkan-drivers`",
    }
}

impl Error {
    /// The process exit code the CLI ends with for this error: 130 for an interrupt, 3 when
    /// the GPU failed under a run (device lost, or a GPU error), 2 for a command line that
    /// asks for something invalid (a value out of its range, flags that contradict each
    /// other, a save target that cannot be one), as clap's own parse errors, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Interrupted(_) => crate::interrupt::EXIT_CODE,
            Error::InvalidArgument(_) | Error::UnknownBackend(_) => 2,
            Error::DeviceLost(_) | Error::Gpu(_) => 3,
            _ => 1,
        }
    }

    pub(crate) fn data(message: impl Into<String>) -> Self {
        Error::Data(message.into())
    }

    pub(crate) fn model(message: impl Into<String>) -> Self {
        Error::Model(message.into())
    }

    pub(crate) fn shape(op: &'static str, message: impl Into<String>) -> Self {
        Error::Shape {
            op,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wrapped error says its kind once; words that merely end in a prefix stay.
    #[test]
    fn a_kind_prefix_is_said_once() {
        let inner = Error::InvalidArgument("kernel table: bk = 3".into());
        let outer = Error::InvalidArgument(format!("tuning file t.json: {inner}"));
        assert_eq!(
            outer.to_string(),
            "invalid argument: tuning file t.json: kernel table: bk = 3"
        );
        let e = Error::Data("data: metadata: x (data: y)".into());
        assert_eq!(e.to_string(), "data: metadata: x (y)");
    }
}
