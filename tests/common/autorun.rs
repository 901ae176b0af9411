//! Driving the app's session as the browser page's autorun does: one frame at a time,
//! nothing blocking, until it has a result to publish.

use std::sync::Arc;

use webgpu_amp::GpuContext;
use webgpu_amp::app::autorun::{Autorun, AutorunResult};
use webgpu_amp::app::session::Session;

/// Tick a started `session` at 60 frames a second of page time until it has a result to
/// publish; fails once `limit_s` seconds of page time pass without one.
#[track_caller]
pub fn drive(session: &mut Session, limit_s: f64) -> AutorunResult {
    let mut now = 0.0;
    loop {
        now += 1.0 / 60.0;
        session.tick(now);
        if let Some(result) = AutorunResult::from_session(session) {
            return result;
        }
        assert!(
            now < limit_s,
            "no result after {limit_s} s of frames (status {})",
            session.status().label()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The session of the autorun `query` on `ctx`, started and driven to its result
/// ([`drive`]).
#[track_caller]
pub fn finished_session(query: &str, ctx: GpuContext, limit_s: f64) -> Session {
    let run = Autorun::from_query(query)
        .unwrap()
        .expect("autorun asked for");
    let mut session = Session::new(Arc::new(ctx));
    session.start(run.config);
    drive(&mut session, limit_s);
    session
}
