// Rotary position embedding (RoPE) in Hugging Face's rotate-half layout
// (transformers' apply_rotary_pos_emb): channel i < h = HS / 2 of a head pairs with channel
// i + h, and at position p
//   y_i     = x_i     cos θ(p, i) - x_{i+h} sin θ(p, i)
//   y_{i+h} = x_{i+h} cos θ(p, i) + x_i     sin θ(p, i)
// in f32 whatever the storages (under autocast transformers multiplies the f16 q and k by the
// f32 tables: f32 products, stored back in the low dtype). The backward is the same rotation
// by -θ (params.sign = -1 negates sin): dx_i = dy_i cos + dy_{i+h} sin, and so on.
//
// One dispatch rotates two tensors (q and k: x -> y and x2 -> y2; heads2 = 0 for one), each
// head at `at + row * row_stride + head * HS` (ops::qkv::HeadRows), row = sample * T +
// position. A thread takes one slot of a head's first half in y (prelude's row_slot: an
// aligned pair, whole words of a packed f16 tensor, or a lone element) and the matching
// channels of the second half. The table is f32 [positions, h, 2] of (cos, sin), computed
// on the host (src/ops/rope.rs).

#tensor x 1 read
#tensor y 2 read_write
#tensor x2 3 read
#tensor y2 4 read_write
#tensor table 5 read

#struct Params // src/ops/rope.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 64u;

fn load_in(second: bool, e: u32) -> f32 {
    if (second) {
        return x2_load(e);
    }
    return x_load(e);
}

fn store_out(second: bool, e: u32, v: f32) {
    if (second) {
        y2_store(e, v);
    } else {
        y_store(e, v);
    }
}

fn store_out_slot(second: bool, slot: vec2<u32>, v: vec2<f32>) {
    if (second) {
        y2_store_slot(slot, v);
    } else {
        y_store_slot(slot, v);
    }
}

// Channels i and i + h of the head whose input starts at element `at`, rotated by the angle
// of (pos, i): (y_i, y_{i+h}).
fn rotate(second: bool, at: u32, pos: u32, i: u32) -> vec2<f32> {
    let half = params.head_size / 2u;
    let c = table_load((pos * half + i) * 2u);
    let s = params.sign * table_load((pos * half + i) * 2u + 1u);
    let a = load_in(second, at + i);
    let b = load_in(second, at + half + i);
    return vec2<f32>(a * c - b * s, b * c + a * s);
}

@compute @workgroup_size(WG)
fn rope(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let half = params.head_size / 2u;
    // The most slots a half head has (one more than its pairs where it starts mid-word).
    let per_head = half / 2u + 1u;
    var id = thread_index(gid, nwg, WG);
    let first_threads = params.rows * params.heads * per_head;
    let second = id >= first_threads;
    var heads = params.heads;
    var in_at = params.x_at;
    var in_row = params.x_row;
    var out_at = params.y_at;
    var out_row = params.y_row;
    if (second) {
        id = id - first_threads;
        heads = params.heads2;
        in_at = params.x2_at;
        in_row = params.x2_row;
        out_at = params.y2_at;
        out_row = params.y2_row;
    }
    let k = id % per_head;
    let row = id / per_head / max(heads, 1u);
    let head = id / per_head % max(heads, 1u);
    if (row >= params.rows) {
        return;
    }
    let x_head = in_at + row * in_row + head * params.head_size;
    let y_head = out_at + row * out_row + head * params.head_size;
    if (k >= row_slots(y_head, half)) {
        return;
    }
    let slot = row_slot(y_head, half, k);
    let pos = params.first_position + row % params.t;
    let i0 = slot.x - y_head;
    let r0 = rotate(second, x_head, pos, i0);
    let r1 = rotate(second, x_head, pos, i0 + slot.y - 1u);
    store_out_slot(second, slot, vec2<f32>(r0.x, r1.x));
    // The second half's channels sit half further on: the same slot where that keeps the
    // word parity (h even), else element by element.
    let at2 = slot.x + half;
    if ((half & 1u) == 0u) {
        store_out_slot(second, vec2<u32>(at2, slot.y), vec2<f32>(r0.y, r1.y));
    } else {
        store_out(second, at2, r0.y);
        if (slot.y == 2u) {
            store_out(second, at2 + 1u, r1.y);
        }
    }
}
