//! Rewrites one checkpoint as fast as it can, for `tests/kill_during_save.rs`, which kills
//! this program at random moments and checks that what is on disk always loads whole.
//!
//! Usage: `save_loop PATH [MEGABYTES]`. Save number `i` holds progress step `i` and the first
//! and last value of every tensor equal to `i`, so a reader can tell a mixed file from a
//! whole one (a torn one does not even parse: safetensors checks every tensor's extent).
//! Prints `saved i` after each save.

use std::io::Write;

use webgpu_amp::train::checkpoint::{Checkpoint, NamedTensor, Progress};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().ok_or("usage: save_loop PATH [MEGABYTES]")?);
    let megabytes: usize = args.next().map_or(Ok(4), |s| s.parse())?;
    let per_tensor = megabytes * (1 << 20) / 4 / 4;
    let mut checkpoint = Checkpoint {
        params: (0..4)
            .map(|t| NamedTensor {
                name: format!("{t}.weight"),
                shape: vec![per_tensor],
                values: vec![0.0; per_tensor],
            })
            .collect(),
        optimizer: None,
        scaler: None,
        progress: Progress::default(),
        precision: Some("f32".into()),
        ..Default::default()
    };
    let mut stdout = std::io::stdout();
    for i in 1u64.. {
        checkpoint.progress.step = i;
        // Mark the first and last value of every tensor (cheap, so the loop spends its time
        // writing): a file mixing two saves would disagree with its own step.
        for t in &mut checkpoint.params {
            let last = t.values.len() - 1;
            t.values[0] = i as f32;
            t.values[last] = i as f32;
        }
        checkpoint.save(&path)?;
        writeln!(stdout, "saved {i}")?;
        stdout.flush()?;
    }
    Ok(())
}
