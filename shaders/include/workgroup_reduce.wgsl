// ---- workgroup reductions (`#include workgroup_reduce`) -----------------------------------
// Fixed-order tree reductions across the threads of a workgroup: the same inputs give the
// same bits on every run (no float atomics). Each takes the thread's local index `lid`, its
// value, and `width`, the threads taking part (a power of two, at most WG, the same for the
// whole workgroup); every thread of the workgroup must call it (it has barriers), and every
// thread gets the result. Needs the including shader's `const WG: u32`, its widest workgroup,
// and `partials: array<f32>`, the storage buffer of a two-pass reduction's partial sums.

var<workgroup> reduce_scratch: array<f32, WG>;

// Sum of v over threads 0..width.
fn tree_sum(lid: u32, v: f32, width: u32) -> f32 {
    workgroupBarrier(); // earlier readers of reduce_scratch are done
    reduce_scratch[lid] = v;
    workgroupBarrier();
    for (var s = width / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            reduce_scratch[lid] = reduce_scratch[lid] + reduce_scratch[lid + s];
        }
        workgroupBarrier();
    }
    return reduce_scratch[0];
}

// Maximum of v over threads 0..width. max() of NaN is indeterminate in WGSL: callers that
// may see NaN track it apart.
fn tree_max(lid: u32, v: f32, width: u32) -> f32 {
    workgroupBarrier();
    reduce_scratch[lid] = v;
    workgroupBarrier();
    for (var s = width / 2u; s > 0u; s = s >> 1u) {
        if (lid < s) {
            reduce_scratch[lid] = max(reduce_scratch[lid], reduce_scratch[lid + s]);
        }
        workgroupBarrier();
    }
    return reduce_scratch[0];
}

// Sum of v over the whole workgroup (WG threads).
fn workgroup_sum(lid: u32, v: f32) -> f32 {
    return tree_sum(lid, v, WG);
}

// The final pass of a two-pass reduction, in one workgroup: the sum of partials[0..count]
// (the first pass's per-workgroup sums), thread lid adding partials lid, lid + WG, ... in
// order before the tree.
fn sum_of_partials(lid: u32, count: u32) -> f32 {
    var acc = 0.0;
    for (var k = lid; k < count; k = k + WG) {
        acc = acc + partials[k];
    }
    return workgroup_sum(lid, acc);
}
// ---- end workgroup reductions ---------------------------------------------------------------
