// ---- fused attention: shared by shaders/flash_forward.wgsl and shaders/flash_backward.wgsl --
// Parameters, the packed-projection layout, logit classes and the attention-dropout mask.
//
// Layout (nanoGPT's c_attn output): qkv is [B, T, 3C] with q, k, v side by side; head h of
// sample b, position i, channel d sits at (b * T + i) * 3C + {0, C, 2C} + h * HS + d. The
// output y is [B, T, C] (heads side by side, as after `transpose(1, 2).view(B, T, C)`); the
// row log-sum-exp lse and the backward's delta are f32 [B, nh, T].
//
// Compile-time constants (src/ops/flash_attention): HS (head size) and BLOCK (query rows, or
// keys, per workgroup). The SIMT bodies' tiles are shaders/include/flash_tiles.wgsl, the
// tensor-core body's shaders/include/flash_coop.wgsl.

#struct Params // src/ops/flash_attention.rs
@group(0) @binding(0) var<uniform> params: Params;
// DropoutState: [seed_lo, seed_hi, counter_lo, counter_hi, training, 0, 0, 0]. Read only when
// FLAG_DROPOUT is set (otherwise a small zeroed buffer fills the binding).
@group(0) @binding(4) var<storage, read> dropout_state: array<u32>;

const FLAG_DROPOUT: u32 = 1u;

// One head-sized row of qkv from element `at`, in f32.
fn qkv_row(at: u32) -> array<f32, HS> {
    var r: array<f32, HS>;
    for (var d = 0u; d < HS; d++) {
        r[d] = qkv_load(at + d);
    }
    return r;
}

// How many elements a row store writes at element e, channel d: a word pair where e is even
// and the row has two channels left (packed f16 stores whole words), else one.
fn store_width(e: u32, d: u32) -> u32 {
    return select(1u, 2u, (e & 1u) == 0u && d + 1u < HS);
}

// Where this workgroup works: (batch * nh + head, block of BLOCK rows or keys), from a grid
// folded over x and y (gpu::grid_1d).
struct Place {
    bh: u32,
    b: u32,
    h: u32,
    first: u32, // first row (or key) of the block
}

fn place_of(wid: vec3<u32>, nwg: vec3<u32>) -> Place {
    let w = workgroup_index(wid, nwg);
    let bh = w / params.blocks;
    return Place(bh, bh / params.heads, bh % params.heads, (w % params.blocks) * BLOCK);
}

// Element (position, channel 0) of q (part 0), k (1) or v (2) of this head in qkv.
fn qkv_at(p: Place, pos: u32, part: u32) -> u32 {
    return (p.b * params.t + pos) * 3u * params.width + part * params.width + p.h * HS;
}

// Element (position, channel 0) of this head in a [B, T, C] tensor (y, dy).
fn out_at(p: Place, pos: u32) -> u32 {
    return (p.b * params.t + pos) * params.width + p.h * HS;
}

// ---- attention dropout --------------------------------------------------------------------------
// Element (i, j) of head bh is element e = (bh * T + i) * T + j of the [B, nh, T, T]
// probabilities, so the mask is the unfused path's (shaders/attention.wgsl) and the standalone
// dropout kernels' bit for bit: word e % 4 of philox4x32_10((e / 4, layer, counter), seed),
// kept when its top 24 bits reach the threshold. A Mask caches the last block of 4 words, so
// a row walked along j costs one Philox call per 4 keys.
struct Mask {
    enabled: bool,
    state: vec4<u32>,
    block: u32,
    words: vec4<u32>,
}

fn mask_new() -> Mask {
    var m = Mask(false, vec4<u32>(0u), 0xffffffffu, vec4<u32>(0u));
    if ((params.flags & FLAG_DROPOUT) == 0u || params.threshold == 0u) {
        return m;
    }
    if (dropout_state[4] == 0u) {
        return m;
    }
    m.enabled = true;
    m.state = vec4<u32>(dropout_state[0], dropout_state[1], dropout_state[2], dropout_state[3]);
    return m;
}

fn mask_keep(m: ptr<function, Mask>, e: u32) -> bool {
    let block = e >> 2u;
    if (block != (*m).block) {
        (*m).block = block;
        (*m).words = philox4x32_10(vec4<u32>(block, params.layer, (*m).state.z, (*m).state.w), (*m).state.xy);
    }
    return ((*m).words[e & 3u] >> 8u) >= params.threshold;
}

// dropout(v) at element e (the identity when the mask is off).
fn mask_apply(m: ptr<function, Mask>, e: u32, v: f32) -> f32 {
    if (!(*m).enabled) {
        return v;
    }
    return dropout_apply(v, mask_keep(m, e), params.drop_scale);
}

// ---- end fused attention common -----------------------------------------------------------------
