//! Shared GPU test setup. Tests run on whatever adapter is present (lavapipe on CI); with
//! none, they fail with a message saying how to get one. They never skip.
#![allow(dead_code)]

pub mod attention_ref;
pub mod autorun;
pub mod batched_ref;
pub mod batchnorm_ref;
pub mod checkpoints;
pub mod child;
pub mod cli;
pub mod conv_ref;
pub mod flash_run;
pub mod matmul_ref;
pub mod portability;
pub mod runs;
pub mod trainers;
pub mod values;

use std::sync::OnceLock;

use webgpu_amp::{F16StorageChoice, GpuContext, GpuOptions};

/// A context of its own for the calling test, which then holds the GL lock ([`gl_serial`]).
fn make(f16: F16StorageChoice) -> GpuContext {
    let ctx = open(f16);
    gl_serial(&ctx);
    ctx
}

/// A new context, the GL lock not taken: the shared contexts open inside a `OnceLock`'s
/// initialiser, where waiting for the lock would deadlock (the lock's holder may be waiting
/// for that very initialiser), and take the lock after it.
fn open(f16: F16StorageChoice) -> GpuContext {
    let mut options = GpuOptions::from_env().expect("bad WEBGPU_AMP_* environment");
    options.f16_storage = f16;
    match GpuContext::new(&options) {
        Ok(ctx) => ctx,
        Err(e) => panic!(
            "GPU tests need an adapter and found none: {e}\n\
             (Debian: `apt-get install -y mesa-vulkan-drivers`; select one with WEBGPU_AMP_BACKEND / WEBGPU_AMP_ADAPTER)"
        ),
    }
}

/// Context with the adapter's preferred f16 storage (native where shader-f16 exists).
pub fn ctx() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    let ctx = CTX.get_or_init(|| open(F16StorageChoice::Auto));
    gl_serial(ctx);
    ctx
}

/// On GL, one GPU test at a time, by construction: every context helper here takes a
/// process-wide lock the first time a test thread asks for a context and keeps it until that
/// thread (the test) ends. wgpu's GL backend holds one lock per context and panics when a
/// thread waits more than 6 s for it, which a pipeline compiled cold by Mesa's GLSL path on
/// llvmpipe can take (a fresh-clone CI run failed so). Elsewhere it holds nothing.
fn gl_serial(ctx: &GpuContext) {
    use std::cell::RefCell;
    use std::sync::{Mutex, MutexGuard};
    static SERIAL: Mutex<()> = Mutex::new(());
    thread_local! {
        static HELD: RefCell<Option<MutexGuard<'static, ()>>> = const { RefCell::new(None) };
    }
    if ctx.report.backend != "gl" {
        return;
    }
    HELD.with(|held| {
        let mut held = held.borrow_mut();
        if held.is_none() {
            *held = Some(SERIAL.lock().unwrap_or_else(|e| e.into_inner()));
        }
    });
}

/// A context of its own with the adapter's preferred f16 storage, for code that owns its
/// device (the app's session).
pub fn ctx_owned() -> GpuContext {
    make(F16StorageChoice::Auto)
}

/// A context of its own forced to packed f16 storage.
pub fn ctx_owned_packed() -> GpuContext {
    make(F16StorageChoice::Packed)
}

/// A context of its own with native f16 storage, on the terms of [`ctx_native`]: without
/// shader-f16 it fails, or (WEBGPU_AMP_EXPECT_NO_F16=1) says so and gives a packed one.
pub fn ctx_owned_native() -> GpuContext {
    if ctx_native().f16_storage == webgpu_amp::F16Storage::Native {
        make(F16StorageChoice::Native)
    } else {
        make(F16StorageChoice::Packed)
    }
}

/// Context forced to packed f16 storage, so both paths run on one machine.
pub fn ctx_packed() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    let ctx = CTX.get_or_init(|| open(F16StorageChoice::Packed));
    gl_serial(ctx);
    ctx
}

/// Whether the run was told that the adapter has no shader-f16 (`WEBGPU_AMP_EXPECT_NO_F16=1`,
/// e.g. on GL).
pub fn expect_no_f16() -> bool {
    std::env::var("WEBGPU_AMP_EXPECT_NO_F16").as_deref() == Ok("1")
}

/// Print `line` to stderr once per test (thread), prefixed with the test's name, in capitals
/// where it matters: what a test ran instead of what its name says is never silent.
pub fn say_once(key: &str, line: &str) {
    use std::cell::RefCell;
    use std::collections::HashSet;
    thread_local! {
        static SAID: RefCell<HashSet<String>> = RefCell::new(HashSet::new());
    }
    if SAID.with(|s| s.borrow_mut().insert(key.to_string())) {
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("?");
        eprintln!("*** {test}: {line}");
    }
}

/// Context with native f16 storage; fails loudly when the adapter lacks shader-f16, unless
/// the run was told to expect that (WEBGPU_AMP_EXPECT_NO_F16=1, e.g. on GL). Then it checks
/// that native storage is refused with a clear error, and the packed context stands in so
/// the test still runs every kernel; the test says so on stderr (`*** test: ... PACKED`),
/// so a "native" case that ran packed is never mistaken for a native one.
pub fn ctx_native() -> &'static GpuContext {
    let c = ctx();
    if c.f16_storage != webgpu_amp::F16Storage::Native {
        if expect_no_f16() {
            static REFUSED: OnceLock<String> = OnceLock::new();
            let refused = REFUSED.get_or_init(|| {
                let mut options = GpuOptions::from_env().expect("bad WEBGPU_AMP_* environment");
                options.f16_storage = F16StorageChoice::Native;
                match GpuContext::new(&options) {
                    Ok(ctx) => panic!(
                        "WEBGPU_AMP_EXPECT_NO_F16=1, but adapter `{}` gave native f16 storage",
                        ctx.report.name
                    ),
                    Err(e) => e.to_string(),
                }
            });
            assert!(
                refused.contains("shader-f16") || refused.contains("native"),
                "native f16 refused without saying why: {refused}"
            );
            say_once(
                "native->packed",
                &format!(
                    "adapter `{}` has no shader-f16 (WEBGPU_AMP_EXPECT_NO_F16=1; native storage \
                     is refused: {refused}): this test's NATIVE f16 cases run on PACKED storage",
                    c.report.name
                ),
            );
            return ctx_packed();
        }
        panic!(
            "adapter `{}` has no shader-f16, so native f16 storage cannot be tested \
             (set WEBGPU_AMP_EXPECT_NO_F16=1 on adapters known to lack it)",
            c.report.name
        );
    }
    c
}

/// Deterministic pseudo-random values in [-1, 1) (xorshift), for test inputs.
pub fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Assert |a - b| <= atol + rtol * |b| elementwise, with a useful message.
#[track_caller]
pub fn assert_close(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.is_nan() && w.is_nan() || g == w {
            continue;
        }
        let err = (g - w).abs();
        let tol = atol + rtol * w.abs();
        // NaN errors (one side NaN) fail too.
        if err.is_nan() || err > tol {
            panic!("{what}: element {i}: got {g}, want {w} (|err| {err} > tol {tol})");
        }
    }
}

/// Asserts `result` is an error whose message contains every one of `needles`; returns the
/// message. (An `is_err()` alone passes for the wrong error too.)
#[track_caller]
pub fn expect_err<T, E: std::fmt::Display>(result: Result<T, E>, needles: &[&str]) -> String {
    let message = match result {
        Ok(_) => panic!("expected an error containing {needles:?}, got Ok"),
        Err(e) => e.to_string(),
    };
    for needle in needles {
        assert!(
            message.contains(needle),
            "error lacks `{needle}`: {message}"
        );
    }
    message
}

/// Makes [`not_checked`] fail the test instead of passing with a note: for a machine that
/// should run every check (one with a cooperative-matrix GPU, say).
pub const REQUIRE_ALL_CHECKS_ENV: &str = "WEBGPU_AMP_REQUIRE_ALL_CHECKS";
/// Where [`not_checked`] records its notes instead of `target/tmp/NOT_CHECKED` (for
/// `tests/not_checked.rs`, whose self-test must not add to the real list).
pub const NOT_CHECKED_FILE_ENV: &str = "WEBGPU_AMP_NOT_CHECKED_FILE";

/// Says loudly that a check did not run on this machine, and why, three ways:
/// - on the test process's stdout, written past the test harness's capture (which hides
///   `println!` and `eprintln!` of passing tests), so plain `cargo test` shows
///   `NOT CHECKED: <test file>: <what>`;
/// - appended to `target/tmp/NOT_CHECKED`, which `scripts/test.sh` prints at the end of
///   every run, so a long log cannot bury it;
/// - with `WEBGPU_AMP_REQUIRE_ALL_CHECKS=1`, as a failure of the test.
pub fn not_checked(what: &str) {
    use std::io::Write;
    let line = format!("{}: {what}", env!("CARGO_CRATE_NAME"));
    // On a line of its own, not after the harness's `test name ... `.
    show(&format!("\nNOT CHECKED: {line}"));
    let path = match std::env::var_os(NOT_CHECKED_FILE_ENV) {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("NOT_CHECKED"),
    };
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        // One write per line: test threads append at the same time.
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = appended {
        panic!(
            "could not record a NOT CHECKED note in {}: {e}",
            path.display()
        );
    }
    if std::env::var_os(REQUIRE_ALL_CHECKS_ENV).is_some_and(|v| v == "1") {
        panic!("NOT CHECKED: {line} ({REQUIRE_ALL_CHECKS_ENV}=1 requires every check)");
    }
}

/// Writes `text` (and a newline) to the process's stdout directly: the test harness
/// captures only the `print!` family, so this shows under plain `cargo test` even when the
/// test passes. For what a passing test must not hide.
pub fn show(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(format!("{text}\n").as_bytes());
    let _ = out.flush();
}

/// The names of the files in `dir` that `keep` accepts, sorted.
pub fn file_names(dir: &std::path::Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| keep(n))
        .collect();
    names.sort();
    names
}

/// `ctx` with a kernel table that takes the wide and large tensor-core tiles where a GPU's
/// defaults do (a side of 512 or more): a CPU adapter's own table takes the 64×64 tile at
/// every size, so that each kernel compiles once on lavapipe.
pub fn every_tile_ctx(ctx: &GpuContext) -> GpuContext {
    let mut table = ctx.caps.kernels.table.clone();
    for tiles in [&mut table.coop_8, &mut table.coop_16] {
        tiles.large_from = 512;
    }
    ctx.with_kernel_table(table, "tests: every tile size")
        .expect("the table with every tile size fits the adapter")
}

/// A context whose f16 kernels run on tensor cores with `edge`×`edge` fragments
/// (`--tensor-cores on:8x8` / `on:16x16`, native f16 storage), one per shape per test process;
/// `None` where the adapter has no f16 cooperative matrices (Mesa 22's lavapipe, GL), after
/// saying so loudly (`[tensor cores]` marks the note: scripts/test.sh runs these tests again on
/// Mesa 26's lavapipe, scripts/lavapipe-coop.sh, where they must run). Any other failure to
/// create it fails the test.
pub fn coop_ctx(edge: u32, what: &str) -> Option<&'static GpuContext> {
    static CTX8: OnceLock<Result<GpuContext, String>> = OnceLock::new();
    static CTX16: OnceLock<Result<GpuContext, String>> = OnceLock::new();
    let cell = match edge {
        8 => &CTX8,
        16 => &CTX16,
        _ => panic!("fragment edge {edge}: 8 or 16"),
    };
    let made = cell.get_or_init(|| {
        let mut options = GpuOptions::from_env().expect("bad WEBGPU_AMP_* environment");
        options.f16_storage = F16StorageChoice::Native;
        options.tensor_cores = webgpu_amp::TensorCoreChoice::On(Some(edge));
        GpuContext::new(&options).map_err(|e| e.to_string())
    });
    match made {
        Ok(ctx) => {
            gl_serial(ctx);
            let config = ctx.caps.tensor_cores.config().expect("on: used");
            assert_eq!(config.edge, edge, "forced fragment shape");
            Some(ctx)
        }
        Err(e) if e.contains("cooperative") || e.contains("shader-f16") => {
            not_checked(&format!(
                "[tensor cores] {what}, {edge}x{edge} fragments: the adapter cannot run them ({e})"
            ));
            None
        }
        Err(e) => panic!("tensor-core context ({edge}x{edge}): {e}"),
    }
}

/// The bits of `values`, to compare two runs exactly.
pub fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// A context of its own on the test adapter whose device has a browser's default limits
/// (WebGPU's: 256 MiB per buffer, 128 MiB per storage binding).
pub fn ctx_with_browser_limits() -> webgpu_amp::GpuContext {
    let adapter = ctx_owned().adapter;
    let tensor_cores = webgpu_amp::TensorCoreChoice::Auto;
    let mut desc = webgpu_amp::GpuContext::device_descriptor(&adapter, tensor_cores);
    desc.required_limits.max_buffer_size = 256 << 20;
    desc.required_limits.max_storage_buffer_binding_size = 128 << 20;
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).expect("device");
    let f16 = webgpu_amp::F16StorageChoice::Auto;
    webgpu_amp::GpuContext::from_device(adapter, device, queue, f16, tensor_cores).unwrap()
}
