//! Optimizer moments too big for a checkpoint's header go to a moments file beside it
//! (no GPU needed): at the real limit, a checkpoint saves, loads back bit for bit and keeps
//! only the parameters as tensors; a missing or damaged moments file leaves the weights
//! usable and makes resuming (`to_flat`) fail with a reason; saves clean up the moments
//! files no checkpoint names. The CLI's resume through a moments file is in
//! `tests/gpt_resume.rs`.

mod common;

use std::path::Path;

use common::cli::fresh_dir;
use webgpu_amp::optim::{OptimizerConfig, OptimizerState};
use webgpu_amp::train::checkpoint::{
    Checkpoint, INLINE_MOMENTS_MAX, NamedOptimizerState, NamedTensor,
};

/// Two parameters, `w` [rows, 64] and `b` [64], with Adam moments that differ per element
/// and per `salt` (including -0.0 and a subnormal, which must survive bit for bit).
fn checkpoint(rows: usize, salt: u32) -> Checkpoint {
    let w_len = rows * 64;
    let values = |n: usize, k: u32| -> Vec<f32> {
        (0..n)
            .map(|i| match i {
                0 => -0.0,
                1 => f32::from_bits(1 + k),
                _ => ((i as u32).wrapping_mul(2_654_435_761) ^ k ^ salt) as f32 * 1e-9,
            })
            .collect()
    };
    let total = w_len + 64;
    let state = OptimizerState {
        step: 7 + salt,
        exp_avg: Some(values(total, 1)),
        exp_avg_sq: Some(values(total, 2)),
        ..Default::default()
    };
    let slices = vec![("b".to_string(), w_len, 64), ("w".to_string(), 0, w_len)];
    Checkpoint {
        params: vec![
            NamedTensor {
                name: "b".into(),
                shape: vec![64],
                values: values(64, 3),
            },
            NamedTensor {
                name: "w".into(),
                shape: vec![rows, 64],
                values: values(w_len, 4),
            },
        ],
        optimizer: Some(NamedOptimizerState::from_flat(
            OptimizerConfig::adam(1e-3),
            &state,
            &slices,
        )),
        ..Default::default()
    }
}

fn moments_files(dir: &Path) -> Vec<String> {
    common::file_names(dir, |f| f.contains(".optimizer-"))
}

fn tensor_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut names: Vec<String> = st.names().into_iter().map(str::to_string).collect();
    names.sort();
    names
}

#[test]
fn moments_over_the_header_limit_go_to_a_moments_file_and_load_back_exactly() {
    // gpt-char's size with AdamW: 2 moments × 10.24 M f32 = 82 MB, 109 MB as base64, over
    // safetensors' 100 MB header limit (and over INLINE_MOMENTS_MAX).
    let rows = 160_000;
    assert!(2 * rows * 64 * 4 > INLINE_MOMENTS_MAX);
    let ck = checkpoint(rows, 0);
    let msg = ck.to_bytes().unwrap_err().to_string();
    assert!(
        msg.contains("header too large") && msg.contains("moments file") && !msg.contains("  "),
        "one-file encoding: {msg}"
    );

    let dir = fresh_dir("big");
    let path = dir.join("run.safetensors");
    ck.save(&path).unwrap();
    let files = moments_files(&dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].starts_with("run.safetensors.optimizer-") && files[0].ends_with(".safetensors"),
        "{files:?}"
    );
    // The checkpoint's tensors are the parameters alone (PyTorch's strict load_state_dict);
    // the moments file's are MOMENT.PARAMETER in the parameter's shape.
    assert_eq!(tensor_names(&path), ["b", "w"]);
    assert_eq!(
        tensor_names(&dir.join(&files[0])),
        ["exp_avg.b", "exp_avg.w", "exp_avg_sq.b", "exp_avg_sq.w"]
    );
    let bytes = std::fs::read(dir.join(&files[0])).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.tensor("exp_avg.w").unwrap().shape(), [rows, 64]);

    let back = Checkpoint::load(&path).unwrap();
    let opt = back.optimizer.as_ref().unwrap();
    assert_eq!(opt.unavailable, None);
    assert_eq!(opt.moments_file.as_ref().map(|f| &f.file), Some(&files[0]));
    assert_eq!(
        back, ck,
        "checkpoint → moments file → checkpoint, bit for bit"
    );
}

#[test]
fn a_missing_or_damaged_moments_file_keeps_the_weights_and_refuses_to_resume() {
    let dir = fresh_dir("missing");
    let path = dir.join("run.safetensors");
    let ck = checkpoint(4, 0);
    save_in_file(&ck, &path);
    let file = dir.join(&moments_files(&dir)[0]);
    let slices = vec![("b".to_string(), 256, 64), ("w".to_string(), 0, 256)];

    // Damaged: one flipped byte fails the CRC.
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&file, &bytes).unwrap();
    let damaged = Checkpoint::load(&path).unwrap();
    assert_eq!(damaged.params, ck.params, "the weights still load");
    let why = damaged
        .optimizer
        .as_ref()
        .unwrap()
        .unavailable
        .clone()
        .unwrap();
    assert!(why.contains("CRC-32"), "{why}");

    // Missing.
    std::fs::remove_file(&file).unwrap();
    let missing = Checkpoint::load(&path).unwrap();
    assert_eq!(missing.params, ck.params, "the weights still load");
    let opt = missing.optimizer.as_ref().unwrap();
    let err = opt.to_flat(&slices, 320).unwrap_err().to_string();
    assert!(
        err.contains("cannot be read") && err.contains("--init"),
        "resuming without the moments: {err}"
    );
    // Saving it again would drop the moments: refused, and the file is left as it was.
    let before = std::fs::read(&path).unwrap();
    let err = missing.save(&path).unwrap_err().to_string();
    assert!(err.contains("were not read"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn each_save_leaves_exactly_the_moments_file_its_checkpoint_names() {
    let dir = fresh_dir("cleanup");
    let path = dir.join("run.safetensors");
    let other = dir.join("other.safetensors");
    save_in_file(&checkpoint(4, 1), &other);
    save_in_file(&checkpoint(4, 1), &path);
    let first = moments_files(&dir);
    assert_eq!(first.len(), 2, "{first:?}");
    // A killed writer's temp moments file (no lock held) goes with the next save.
    let stale = dir.join(".run.safetensors.optimizer-0badf00d.safetensors.tmp-1");
    std::fs::write(&stale, b"partial").unwrap();

    save_in_file(&checkpoint(4, 2), &path);
    let second = moments_files(&dir);
    assert_eq!(second.len(), 2, "{second:?}");
    assert!(second.iter().any(|f| f.starts_with("other.")), "{second:?}");
    assert_ne!(first, second, "new moments, new file");
    // Equality is bitwise: other moments differ, and so does -0.0 from 0.0.
    assert_ne!(checkpoint(4, 1), checkpoint(4, 2));
    let mut signed = checkpoint(4, 2);
    let exp_avg = signed
        .optimizer
        .as_mut()
        .unwrap()
        .moments
        .get_mut("exp_avg")
        .unwrap();
    exp_avg.get_mut("w").unwrap()[0] = 0.0;
    assert_ne!(signed, checkpoint(4, 2), "-0.0 and 0.0 moments must differ");
    assert!(!stale.exists(), "stale temp file removed");
    assert_eq!(Checkpoint::load(&path).unwrap(), checkpoint(4, 2));

    // Back to moments in the header: the moments file goes.
    checkpoint(4, 3).save(&path).unwrap();
    let third = moments_files(&dir);
    assert_eq!(third.len(), 1, "{third:?}");
    assert!(third[0].starts_with("other."), "{third:?}");
    let back = Checkpoint::load(&path).unwrap();
    assert_eq!(back.optimizer.as_ref().unwrap().moments_file, None);
    assert_eq!(back, checkpoint(4, 3));
}

/// Save with the moments in a moments file, however small (a limit of 0 bytes).
fn save_in_file(ck: &Checkpoint, path: &Path) {
    ck.save_with_inline_limit(path, 0).unwrap();
}

/// A killed writer's moments file (renamed, then never named by a checkpoint) goes before
/// the next save writes its own, so that no moment of that save has more than two moments
/// files: the one the checkpoint on disk names and the new one. Seen here through a save
/// that fails after its moments file (its checkpoint's temp path is taken by a folder): it
/// removes its own file, and the killed writer's is gone already.
#[test]
fn a_killed_writers_moments_file_goes_before_the_next_save_writes() {
    let dir = fresh_dir("leftover");
    let path = dir.join("run.safetensors");
    save_in_file(&checkpoint(4, 1), &path);
    let named = moments_files(&dir);
    assert_eq!(named.len(), 1);
    // What a writer killed between its two renames leaves: a moments file nobody names.
    let leftover = dir.join("run.safetensors.optimizer-0badf00d.safetensors");
    std::fs::copy(dir.join(&named[0]), &leftover).unwrap();
    // A temp name is `.NAME.tmp-PID-N`, N a per-process count of writes: folders on the
    // first 1024 of this process's names take whichever the next save picks.
    for n in 0..1024 {
        let blocker = dir.join(format!(".run.safetensors.tmp-{}-{n}", std::process::id()));
        std::fs::create_dir(&blocker).unwrap();
    }

    let failed = checkpoint(4, 2).save_with_inline_limit(&path, 0);
    common::expect_err(failed, &["run.safetensors", "creating a temp file"]);
    assert_eq!(
        moments_files(&dir),
        named,
        "only the named moments file remains"
    );
    assert_eq!(Checkpoint::load(&path).unwrap(), checkpoint(4, 1));
    let _ = std::fs::remove_dir_all(&dir);
}
