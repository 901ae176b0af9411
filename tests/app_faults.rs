//! The app when things go wrong, driven headlessly on a real GPU context:
//!
//! - its window closes mid-run: every mode's run is saved (`interrupted-<mode>.safetensors`)
//!   and one line gives the `train --resume` command of each, which continues that mode's
//!   run bit for bit (against `train` run straight through with the same flags);
//! - its device is lost mid-run (the page's `lose_device_at=N` test hook, which destroys the
//!   device while step N is in flight): the session fails with the line the CLI prints,
//!   naming the step and the checkpoint, which the page shows and publishes.

mod common;

use std::sync::Arc;

use common::checkpoints::assert_same_checkpoint;
use common::cli::{BIN, fresh_dir};
use webgpu_amp::Error;
use webgpu_amp::amp::policy::Precision;
use webgpu_amp::app::App;
use webgpu_amp::app::autorun::Autorun;
use webgpu_amp::app::session::{Session, SessionConfig, Status};
use webgpu_amp::train::checkpoint::Checkpoint;
use webgpu_amp::train::fault_hooks::FaultHooks;

/// Runs `command` (a shell command line) in `dir`; panics with its output on failure.
fn shell(dir: &std::path::Path, command: &str) {
    let out = std::process::Command::new("sh")
        .args(["-c", command])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn closing_the_window_mid_run_saves_and_the_printed_commands_resume_bit_for_bit() {
    let dir = fresh_dir("close");
    let config = SessionConfig {
        modes: vec![Precision::F32, Precision::AmpF16],
        steps: 12,
        batch_size: 32,
        seed: 3,
        ..Default::default()
    };
    let mut app = App::new(Arc::new(common::ctx_owned()), config.clone());
    app.program = BIN.into();
    app.save_dir = dir.clone();
    app.session.start(config);
    let mut now = 0.0;
    while app.session.runs().len() < 2 || app.session.runs().iter().any(|r| r.submitted() < 5) {
        now += 1.0 / 60.0;
        app.tick_at(now);
        assert!(now < 600.0, "status {}", app.session.status().label());
    }
    assert!(app.session.mid_run());
    let submitted: Vec<u64> = app.session.runs().iter().map(|r| r.submitted()).collect();

    // The window closes.
    eframe::App::on_exit(&mut app);
    let line = match app.closed_mid_run.lock().unwrap().take() {
        Some(Error::Interrupted(line)) => line,
        other => panic!("closing mid-run ended with {other:?}"),
    };
    eprintln!("{line}");
    assert!(!line.contains('\n'), "one line: {line}");
    assert!(
        line.starts_with(&format!(
            "the window closed mid-run: saved step {} in interrupted-f32.safetensors, step {} in \
             interrupted-amp-f16.safetensors; resume with: {BIN} train --model mlp",
            submitted[0], submitted[1]
        )),
        "{line}"
    );
    assert_eq!(*app.session.status(), Status::Stopped);
    let commands: Vec<&str> = line
        .split_once("resume with: ")
        .unwrap()
        .1
        .split(" ; ")
        .collect();
    assert_eq!(commands.len(), 2, "{line}");
    for ((command, precision), steps) in commands.iter().zip(["f32", "amp-f16"]).zip(&submitted) {
        let saved = dir.join(format!("interrupted-{precision}.safetensors"));
        let ck = Checkpoint::load(&saved).expect("the saved run loads");
        assert_eq!(ck.progress.step, *steps, "{precision}");
        assert!(ck.optimizer.is_some() && ck.scaler.is_some());
        // Resumed to the end, against the same flags run straight through.
        let resume = format!(" --resume {}", saved.display());
        assert!(command.ends_with(&resume), "{command}");
        let straight = command.replace(&resume, "");
        shell(&dir, &format!("{command} --save resumed.safetensors"));
        shell(&dir, &format!("{straight} --save straight.safetensors"));
        let a = Checkpoint::load(&dir.join("resumed.safetensors")).unwrap();
        let b = Checkpoint::load(&dir.join("straight.safetensors")).unwrap();
        assert_eq!(a.progress.step, 12);
        assert_same_checkpoint(precision, &a, &b);
    }

    // A finished (or never started) session saves nothing.
    let mut idle = App::new(Arc::new(common::ctx_owned()), SessionConfig::default());
    idle.save_dir = dir.join("idle");
    eframe::App::on_exit(&mut idle);
    assert!(idle.closed_mid_run.lock().unwrap().is_none());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_lost_device_fails_the_session_with_the_step_and_the_checkpoint() {
    let query = "?autorun=1&precision=f32&steps=20&lose_device_at=3";
    let autorun = Autorun::from_query(query).unwrap().unwrap();
    assert_eq!(autorun.lose_device_at, Some(3));
    // A context of its own: the hook destroys its device.
    let mut session = Session::new(Arc::new(common::ctx_owned()));
    session.fault_hooks = Some(FaultHooks {
        lose_device_at: autorun.lose_device_at,
        ..Default::default()
    });
    session.start(autorun.config);
    let result = common::autorun::drive(&mut session, 600.0);
    let error = result.error.clone().unwrap_or_default();
    eprintln!("{error}");
    assert!(!result.ok);
    assert!(matches!(session.status(), Status::Failed(_)));
    for needle in [
        "the GPU device was lost: Destroyed",
        "the run stopped at step 3",
        "no checkpoint was asked for",
    ] {
        assert!(error.contains(needle), "lacks `{needle}`: {error}");
    }
    assert!(session.ctx().device_destroyed());
}

#[test]
fn smollm2_at_a_browsers_limits_fails_with_the_buffer_and_the_limit_named() {
    // SmolLM2-135M's flat f32 buffers are 538 MB each (`plan` says so): over a browser's
    // default 256 MiB per buffer. The page's session must say that before it allocates
    // anything, and not panic.
    let ctx = common::ctx_with_browser_limits();
    assert_eq!(ctx.caps.max_buffer_size, 256 << 20);
    // Token data it takes (its vocabulary is not hamlet's characters): 4 windows of 16 ids.
    let dir = fresh_dir("smollm2-limits");
    let ids: Vec<u8> = (0..64i64)
        .flat_map(|i| (i * 7 % 1000).to_le_bytes())
        .collect();
    let view = || safetensors::tensor::TensorView::new(safetensors::Dtype::I64, vec![4, 16], &ids);
    let tokens = [("x", view().unwrap()), ("y", view().unwrap())];
    let data = dir.join("tokens.safetensors");
    std::fs::write(&data, safetensors::serialize(tokens, None).unwrap()).unwrap();
    let mut session = Session::new(Arc::new(ctx));
    session.start(SessionConfig {
        model: "smollm2-135m".into(),
        dataset: data.display().to_string(),
        modes: vec![Precision::AmpF16],
        batch_size: 1,
        steps: 1,
        eval_every: SessionConfig::NEVER,
        profile_every: SessionConfig::NEVER,
        sample_every: SessionConfig::NEVER,
        ..Default::default()
    });
    let mut now = 0.0;
    while matches!(session.status(), Status::Preparing { .. }) && now < 600.0 {
        now += 1.0 / 60.0;
        session.tick(now);
    }
    let Status::Failed(message) = session.status() else {
        panic!("expected a failure, got {:?}", session.status());
    };
    for needle in [
        "smollm2-135m",
        "max_buffer_size of 268.4 MB",
        "use a smaller model",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
    assert!(session.runs().is_empty());
    assert_eq!(session.ctx().memory().live_bytes, 0, "nothing allocated");
}
