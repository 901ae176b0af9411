//! Checkpoint loading: safetensors tensors plus the JSON metadata (optimizer moments in
//! base64, GradScaler state, progress), then matching against a model and rebuilding the flat
//! optimizer state, as `--init` and `--resume` do.
#![no_main]

use libfuzzer_sys::fuzz_target;
use webgpu_amp::train::checkpoint::Checkpoint;

fuzz_target!(|data: &[u8]| {
    let Ok(ck) = Checkpoint::from_bytes(data, "fuzz.safetensors") else {
        return;
    };
    // A small model's parameters, and the file's own names and shapes.
    let mut expected = vec![
        ("linear.weight".to_string(), vec![1, 10]),
        ("linear.bias".to_string(), vec![1]),
    ];
    let _ = ck.params_for(&expected, "fuzz");
    expected = ck.params.iter().map(|t| (t.name.clone(), t.shape.clone())).collect();
    if let Ok(params) = ck.params_for(&expected, "fuzz") {
        let mut offset = 0;
        let slices: Vec<(String, usize, usize)> = params
            .iter()
            .map(|(name, values)| {
                let slice = (name.clone(), offset, values.len());
                offset += values.len();
                slice
            })
            .collect();
        if let Some(opt) = &ck.optimizer {
            let _ = opt.to_flat(&slices, offset);
        }
    }
    if let Some(scaler) = &ck.scaler {
        let _ = scaler.is_empty();
    }
    let _ = ck.to_bytes();
});
