//! JSON model descriptions: parsing and shape resolution, then everything the CLI does with
//! a parsed model before the GPU (parameter list, summary, data check, initialisation).
#![no_main]

use libfuzzer_sys::fuzz_target;
use webgpu_amp::nn::ModelSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = ModelSpec::from_json(text) else {
        return;
    };
    let params = spec.parameters();
    let total = spec.num_parameters();
    assert_eq!(total, params.iter().map(|p| p.numel()).sum::<usize>());
    let _ = spec.summary();
    let _ = spec.check_data(&[1, 28, 28], 10);
    if total <= 1 << 20 {
        let init = spec.init_params(0);
        assert_eq!(init.iter().map(|(_, v)| v.len()).sum::<usize>(), total);
    }
});
