// Token + position embedding (nanoGPT: x = wte(idx) + wpe(pos)), forward and backward.
// The backward is a deterministic scatter-add: instead of float atomics, the positions of
// each token are gathered into a sorted index on the GPU (a stable counting sort by token:
// per-chunk counts, a scan over chunks, a scan over the vocabulary, a fill), then one thread
// per (token, column) sums its positions in increasing order. Same inputs, same bits.

#tensor wte 1 read
// Without a position table the Rust side binds `wte` here and sets has_wpe = 0.
#tensor wpe 2 read
#tensor y 3 read_write
#tensor dy 4 read
#tensor dwte 5 read_write
#tensor dwpe 6 read_write
// Token ids, [B*T] u32.
@group(0) @binding(7) var<storage, read> tokens: array<u32>;
// The backward's counting sort, one u32 buffer in three regions (src/ops/embedding.rs sizes it):
// - counts [chunks, V], from 0: occurrences of each token in each chunk of positions; then,
//   per token, the occurrences in the earlier chunks; then (during the fill) a running slot
//   counter;
// - offsets [V + 1], at `offsets_at`: occurrences of each token; then the exclusive prefix sum
//   (start of each token's segment of `order`, offsets[V] = number of valid tokens);
// - order [B*T], at `order_at`: positions sorted by token, increasing within a token.
@group(0) @binding(8) var<storage, read_write> sort_scratch: array<u32>;

#struct Params // src/ops/embedding.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

fn offsets_at(v: u32) -> u32 {
    return params.chunks * params.vocab + v;
}
fn order_at(k: u32) -> u32 {
    return params.chunks * params.vocab + params.vocab + 1u + k;
}

// ---- forward ------------------------------------------------------------------------------

// Element e of y [n, C]: wte[tokens[i], c] + wpe[i mod T, c]. A token outside [0, V) is never
// used as an index; its row of y is NaN instead (as cross-entropy does with a bad label), so
// the loss shows it.
fn embed(e: u32) -> f32 {
    let i = e / params.cols;
    let c = e - i * params.cols;
    let tok = tokens[i];
    if (tok >= params.vocab) {
        return quiet_nan();
    }
    var v = wte_load(tok * params.cols + c);
    if (params.has_wpe != 0u) {
        v = v + wpe_load((i % params.t) * params.cols + c);
    }
    return v;
}

// One thread per element pair of y (whole words for packed storages).
@compute @workgroup_size(WG)
fn embedding_forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let p = thread_index(gid, nwg, WG);
    let total = params.n * params.cols;
    let e = 2u * p;
    if (e >= total) {
        return;
    }
    if (e + 1u < total) {
        y_store2(e, vec2<f32>(embed(e), embed(e + 1u)));
    } else {
        y_store(e, embed(e));
    }
}

// ---- backward: deterministic index of positions by token ----------------------------------

// 1. Thread g (a chunk of `chunk` positions): count each token's occurrences in its chunk.
//    O(V + chunk) per thread.
@compute @workgroup_size(WG)
fn embedding_chunk_counts(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = thread_index(gid, nwg, WG);
    if (g >= params.chunks) {
        return;
    }
    let row = g * params.vocab;
    for (var v = 0u; v < params.vocab; v = v + 1u) {
        sort_scratch[row + v] = 0u;
    }
    let first = g * params.chunk;
    let last = min(first + params.chunk, params.n);
    for (var i = first; i < last; i = i + 1u) {
        let tok = tokens[i];
        if (tok < params.vocab) { // invalid tokens are skipped
            sort_scratch[row + tok] = sort_scratch[row + tok] + 1u;
        }
    }
}

// 2. Thread v: exclusive scan of token v's chunk counts over the chunks, in chunk order;
//    its total goes to offsets[v]. O(chunks) per thread.
@compute @workgroup_size(WG)
fn embedding_chunk_scan(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let v = thread_index(gid, nwg, WG);
    if (v >= params.vocab) {
        return;
    }
    var running = 0u;
    for (var g = 0u; g < params.chunks; g = g + 1u) {
        let i = g * params.vocab + v;
        let count = sort_scratch[i];
        sort_scratch[i] = running;
        running = running + count;
    }
    sort_scratch[offsets_at(v)] = running;
}

var<workgroup> scan_scratch: array<u32, WG>;

// 3. One workgroup: offsets[0..V] becomes its exclusive prefix sum, offsets[V] the total.
//    Thread l owns a contiguous block of ceil(V / WG) entries; block totals are scanned in
//    workgroup memory (Hillis-Steele). O(V / WG + log WG) span.
@compute @workgroup_size(WG)
fn embedding_offsets(@builtin(local_invocation_id) lid3: vec3<u32>) {
    let lid = lid3.x;
    let per = (params.vocab + WG - 1u) / WG;
    let first = min(lid * per, params.vocab);
    let last = min(first + per, params.vocab);
    var total = 0u;
    for (var v = first; v < last; v = v + 1u) {
        total = total + sort_scratch[offsets_at(v)];
    }
    scan_scratch[lid] = total;
    workgroupBarrier();
    for (var d = 1u; d < WG; d = d << 1u) {
        var s = scan_scratch[lid];
        if (lid >= d) {
            s = s + scan_scratch[lid - d];
        }
        workgroupBarrier();
        scan_scratch[lid] = s;
        workgroupBarrier();
    }
    var running = scan_scratch[lid] - total; // exclusive prefix of this block
    for (var v = first; v < last; v = v + 1u) {
        let count = sort_scratch[offsets_at(v)];
        sort_scratch[offsets_at(v)] = running;
        running = running + count;
    }
    if (lid == WG - 1u) {
        sort_scratch[offsets_at(params.vocab)] = scan_scratch[WG - 1u];
    }
}

// 4. Thread g: place each position of its chunk, in increasing order, at its slot:
//    offsets[tok] + (occurrences in earlier chunks) + (earlier occurrences in this chunk).
//    O(chunk) per thread.
@compute @workgroup_size(WG)
fn embedding_fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = thread_index(gid, nwg, WG);
    if (g >= params.chunks) {
        return;
    }
    let row = g * params.vocab;
    let first = g * params.chunk;
    let last = min(first + params.chunk, params.n);
    for (var i = first; i < last; i = i + 1u) {
        let tok = tokens[i];
        if (tok < params.vocab) {
            let slot = sort_scratch[offsets_at(tok)] + sort_scratch[row + tok];
            sort_scratch[row + tok] = sort_scratch[row + tok] + 1u;
            sort_scratch[order_at(slot)] = i;
        }
    }
}

// ---- backward: the sums -----------------------------------------------------------------------

// 5. Thread (v, c): dwte[v, c] += sum of dy[i, c] over token v's positions i, in increasing
//    order. Tokens absent from the batch leave their row untouched (bit for bit).
@compute @workgroup_size(WG)
fn embedding_wte_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let t = thread_index(gid, nwg, WG);
    if (t >= params.vocab * params.cols) {
        return;
    }
    let v = t / params.cols;
    let c = t - v * params.cols;
    let begin = sort_scratch[offsets_at(v)];
    let end = sort_scratch[offsets_at(v + 1u)];
    if (begin == end) {
        return;
    }
    var acc = 0.0;
    for (var k = begin; k < end; k = k + 1u) {
        acc = acc + dy_load(sort_scratch[order_at(k)] * params.cols + c);
    }
    dwte_store(t, dwte_load(t) + acc);
}

// 6. Thread (t, c): dwpe[t, c] += sum over b of dy[b, t, c], in batch order.
@compute @workgroup_size(WG)
fn embedding_wpe_grad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = thread_index(gid, nwg, WG);
    if (i >= params.t * params.cols) {
        return;
    }
    let stride = params.t * params.cols;
    var acc = 0.0;
    for (var b = 0u; b < params.batch; b = b + 1u) {
        acc = acc + dy_load(b * stride + i);
    }
    dwpe_store(i, dwpe_load(i) + acc);
}
