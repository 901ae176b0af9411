//! Custom data sets (safetensors with `x` and `y`) and Fashion-MNIST class files (JSON).
#![no_main]

use libfuzzer_sys::fuzz_target;
use webgpu_amp::data::{custom, fashion};

fuzz_target!(|data: &[u8]| {
    if let Ok(set) = custom::from_bytes("fuzz.safetensors", data) {
        assert_eq!(set.x.len(), set.n * set.sample_len());
        let _ = set.split_last(1);
    }
    if let Ok((count, pixels)) = fashion::parse_class_json(data, "fuzz.json") {
        assert_eq!(pixels.len(), count * 28 * 28);
    }
});
