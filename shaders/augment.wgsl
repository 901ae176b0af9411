// Data augmentation on the GPU over a batch x [N, C, H, W] -> y (the same shape and storage):
// torchvision's RandomCrop(size=(H, W), padding=p, padding_mode='constant' | 'reflect') and
// RandomHorizontalFlip(), airbench's alternating flip (each image flipped on alternate epochs,
// starting from a random side of its own) and its translate (reflect padding, random crop),
// and a plain flip of every image (flip test-time augmentation). Pure data movement: the
// values are copied, never rounded.
//
// Each image's draws are a pure function of (seed, epoch, its index in the data set): words of
// Philox4x32-10 (prelude, the dropout masks' generator) at counter (sample, epoch, SITE, 0) and
// key (seed_lo, seed_hi). So the same bits run to run, after a resume and whatever the batch
// size; src/ops/augment.rs has the CPU twin the tests compare with.
//
// One thread per element pair of y (`#map`: a packed word is written whole by one thread).

#tensor x 1 read
#tensor y 2 read_write
// [seed_lo, seed_hi, epoch, 0]: written before each submit (a queued write, no wait).
@group(0) @binding(3) var<storage, read> aug_state: array<u32>;
// The data-set index of each row of the batch.
@group(0) @binding(4) var<storage, read> sample_ids: array<u32>;
// The flip test-time augmentation's average of two logits: out = 0.5 a + 0.5 b.
#tensor a 5 read
#tensor b 6 read
#tensor out 7 read_write

#struct Params // src/ops/augment.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;
// SITE_*: counter words that set these draws apart from other streams of the same seed;
// FLIP_*: the codes of params.flip_mode.
#consts augment // src/ops/augment.rs

struct Transform {
    shift_y: i32,
    shift_x: i32,
    flip: bool,
}

// A uniform integer in [-pad, pad] from a 32-bit word: floor(w (2 pad + 1) / 2^32) - pad.
fn shift_of(w: u32) -> i32 {
    return i32(philox_mulhilo(w, 2u * params.pad + 1u).x) - i32(params.pad);
}

fn transform_of(row: u32) -> Transform {
    let key = vec2<u32>(aug_state[0], aug_state[1]);
    let epoch = aug_state[2];
    let sample = sample_ids[row];
    let w = philox4x32_10(vec4<u32>(sample, epoch, SITE_CROP_FLIP, 0u), key);
    var t = Transform(0, 0, false);
    if (params.pad > 0u) {
        t.shift_y = shift_of(w.x);
        t.shift_x = shift_of(w.y);
    }
    if (params.flip_mode == FLIP_RANDOM) {
        t.flip = (w.z >> 31u) == 1u;
    } else if (params.flip_mode == FLIP_ALTERNATING) {
        let side = philox4x32_10(vec4<u32>(sample, 0u, SITE_ALTERNATING, 0u), key).x >> 31u;
        t.flip = (side ^ (epoch & 1u)) == 1u;
    } else if (params.flip_mode == FLIP_ALL) {
        t.flip = true;
    }
    return t;
}

// The source of output coordinate `o` along an axis of `size`, shifted by `shift`: its index,
// or -1 where the zero padding shows. Reflect padding mirrors without repeating the edge
// (PyTorch's 'reflect'; the Rust side keeps pad < size).
fn source(o: u32, shift: i32, size: u32) -> i32 {
    var s = i32(o) + shift;
    let n = i32(size);
    if (s >= 0 && s < n) {
        return s;
    }
    if (params.reflect == 0u) {
        return -1;
    }
    if (s < 0) {
        s = -s;
    }
    if (s >= n) {
        s = 2 * (n - 1) - s;
    }
    return s;
}

fn augmented(i: u32, t: Transform) -> f32 {
    let plane = params.height * params.width;
    let p = i / plane; // (sample, channel)
    let r = i - p * plane;
    let oy = r / params.width;
    var ox = r - oy * params.width;
    if (t.flip) {
        ox = params.width - 1u - ox;
    }
    let sy = source(oy, t.shift_y, params.height);
    let sx = source(ox, t.shift_x, params.width);
    if (sy < 0 || sx < 0) {
        return 0.0;
    }
    return x_load(p * plane + u32(sy) * params.width + u32(sx));
}

fn augmented_at(i: u32) -> f32 {
    return augmented(i, transform_of(i / (params.channels * params.height * params.width)));
}

#map augment: y = augmented_at(i)

// ---- flip test-time augmentation: the average of the two logits -------------------------------

fn half_sum(a: f32, b: f32) -> f32 {
    return 0.5 * a + 0.5 * b;
}

#map average_pair: out = half_sum(a, b)
