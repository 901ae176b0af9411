//! Comparing checkpoints bit for bit (a resumed run against a straight one, a file against
//! what was saved).

use webgpu_amp::train::checkpoint::Checkpoint;

use super::bits;

/// `got` holds the same tensors (by name, shape and bits), optimizer and scaler state,
/// progress and precision as `want`; `what` names the case in failures.
#[track_caller]
pub fn assert_same_checkpoint(what: &str, got: &Checkpoint, want: &Checkpoint) {
    // Files list tensors by name; runs in the model's order.
    let sorted = |ck: &Checkpoint| {
        let mut p = ck.params.clone();
        p.sort_by(|a, b| a.name.cmp(&b.name));
        p
    };
    let (got_params, want_params) = (sorted(got), sorted(want));
    assert_eq!(got_params.len(), want_params.len(), "{what}: tensors");
    for (g, w) in got_params.iter().zip(&want_params) {
        assert_eq!((&g.name, &g.shape), (&w.name, &w.shape), "{what}");
        assert!(
            bits(&g.values) == bits(&w.values),
            "{what}: parameter `{}` differs",
            g.name
        );
    }
    assert_eq!(got.optimizer, want.optimizer, "{what}: optimizer state");
    assert_eq!(got.scaler, want.scaler, "{what}: scaler state");
    assert_eq!(got.progress, want.progress, "{what}: progress");
    assert_eq!(got.precision, want.precision, "{what}: precision");
}
