//! IDX parsing (raw and gzip): images, labels, and a data set from both. Any input must give
//! `Ok` or `Err`, never a panic, overflow or huge allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use webgpu_amp::data::idx;

fuzz_target!(|data: &[u8]| {
    let _ = idx::parse_images(data, "fuzz images");
    let _ = idx::parse_labels(data, "fuzz labels");
    // The first byte splits the rest into an image file and a label file.
    if let Some((&cut, rest)) = data.split_first() {
        let cut = (cut as usize * rest.len()) / 255;
        let (images, labels) = rest.split_at(cut.min(rest.len()));
        if let Ok(set) = idx::dataset_from_idx("fuzz", images, labels, 10, None) {
            let x = set.x.features().expect("IDX images are f32 features");
            assert_eq!(x.len(), set.n * set.sample_len());
        }
    }
});
