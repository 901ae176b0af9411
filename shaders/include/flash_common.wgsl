// ---- fused attention: shared by shaders/flash_forward.wgsl, shaders/flash_backward.wgsl and
// the tensor-core kernels. Parameters, where q, k and v sit, logit classes and the
// attention-dropout mask.
//
// Layout: q, k and v are bound apart, each with its own offset and row stride (Params): head
// h of sample b, position i, channel d of q sits at q_at + (b * T + i) * q_row + h * HS + d,
// and k and v likewise with the key/value head h / group. So nanoGPT's packed c_attn output
// [B, T, 3C] (one tensor bound three times: offsets 0, C, 2C, rows 3C), separate
// projections, and grouped-query attention (`group` query heads share one key/value head,
// Hugging Face's repeat_kv mapping, with no repeated copy) are one kernel. The gradients dq,
// dk and dv sit where q, k and v do. The output y is [B, T, C] (heads side by side, as after
// `transpose(1, 2).view(B, T, C)`); the row log-sum-exp lse and the backward's delta are f32
// [B, nh, T].
//
// Compile-time constants (src/ops/flash_attention): HS (head size) and BLOCK (query rows, or
// keys, per workgroup). The SIMT bodies' tiles are shaders/include/flash_tiles.wgsl, the
// tensor-core body's shaders/include/flash_coop.wgsl.

#struct Params // src/ops/flash_attention/params.rs
@group(0) @binding(0) var<uniform> params: Params;
// DropoutState: [seed_lo, seed_hi, counter_lo, counter_hi], [training, 0, 0, 0]. Read only
// when FLAG_DROPOUT is set (otherwise a small zeroed buffer fills the binding). A uniform,
// so the dk/dv kernel's separate q, k, v, dk and dv stay within WebGPU's 8 storage buffers.
@group(0) @binding(4) var<uniform> dropout_state: array<vec4<u32>, 2>;

const FLAG_DROPOUT: u32 = 1u;

// Where this workgroup works: (batch * nh + head, block of BLOCK rows or keys), from a grid
// folded over x and y (gpu::grid_1d); kvh is the key/value head of query head h.
struct Place {
    bh: u32,
    b: u32,
    h: u32,
    kvh: u32,
    first: u32, // first row (or key) of the block
}

fn place_of(wid: vec3<u32>, nwg: vec3<u32>) -> Place {
    let w = workgroup_index(wid, nwg);
    let bh = w / params.blocks;
    let h = bh % params.heads;
    return Place(bh, bh / params.heads, h, h / params.group, (w % params.blocks) * BLOCK);
}

// The dk/dv kernels' workgroups: (batch * kv_heads + key/value head, block of keys), at the
// group's first query head (group_head moves to the others). `bh` is past B * nh exactly when
// the workgroup is past B * kv_heads.
fn kv_place_of(wid: vec3<u32>, nwg: vec3<u32>) -> Place {
    let w = workgroup_index(wid, nwg);
    let bkv = w / params.blocks;
    let b = bkv / params.kv_heads;
    let kvh = bkv % params.kv_heads;
    return group_head(Place(0u, b, 0u, kvh, (w % params.blocks) * BLOCK), 0u);
}

// Query head g of p's key/value head.
fn group_head(p: Place, g: u32) -> Place {
    let h = p.kvh * params.group + g;
    return Place(p.b * params.heads + h, p.b, h, p.kvh, p.first);
}

// Element (position, channel 0) of this head's q (part 0), k (1) or v (2).
fn qkv_at(p: Place, pos: u32, part: u32) -> u32 {
    let row = p.b * params.t + pos;
    if (part == 0u) {
        return params.q_at + row * params.q_row + p.h * HS;
    }
    if (part == 1u) {
        return params.k_at + row * params.k_row + p.kvh * HS;
    }
    return params.v_at + row * params.v_row + p.kvh * HS;
}

// Channel d of q (part 0), k (1) or v (2) at a position, in f32.
fn qkv_load(p: Place, pos: u32, part: u32, d: u32) -> f32 {
    let e = qkv_at(p, pos, part) + d;
    if (part == 0u) {
        return q_load(e);
    }
    if (part == 1u) {
        return k_load(e);
    }
    return v_load(e);
}

// One head-sized row of q, k or v, in f32.
fn qkv_row(p: Place, pos: u32, part: u32) -> array<f32, HS> {
    var r: array<f32, HS>;
    for (var d = 0u; d < HS; d++) {
        r[d] = qkv_load(p, pos, part, d);
    }
    return r;
}

// How many elements a row store writes at element e, channel d: a word pair where e is even
// and the row has two channels left (packed f16 stores whole words), else one.
fn store_width(e: u32, d: u32) -> u32 {
    return select(1u, 2u, (e & 1u) == 0u && d + 1u < HS);
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
    if (dropout_state[1].x == 0u) {
        return m;
    }
    m.enabled = true;
    m.state = dropout_state[0];
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
