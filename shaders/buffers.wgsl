// Layers' buffers (persistent tensors that are not parameters: nn/buffers.rs), as raw u32
// words so that every dtype is copied bit for bit.
//
// commit_buffers: the last kernel of a training step's optimizer phase. The step's forwards
// updated the working copy; unless the GradScaler found inf/NaN (a skipped step), it becomes
// the committed copy, else the working copy goes back to the committed one. Either way the
// two are equal again afterwards, and a skipped step leaves every buffer as it was. Without
// `skip_on_inf` every update is kept, as PyTorch's BatchNorm does (pytorch#88474).
// count_batches: an int64 counter (two words, low first) plus one.

#consts scaler_state // the state buffer's word offsets: src/ops/scaler_state.rs

#struct Sizes // src/ops/buffers.rs

@group(0) @binding(0) var<uniform> sizes: Sizes;
@group(0) @binding(1) var<storage, read> state: array<u32>;
@group(0) @binding(2) var<storage, read_write> committed: array<u32>;
@group(0) @binding(3) var<storage, read_write> working: array<u32>;

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn commit_buffers(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= sizes.n) {
        return;
    }
    if (sizes.skip_on_inf != 0u && state[FOUND_INF] != 0u) {
        working[i] = committed[i];
    } else {
        committed[i] = working[i];
    }
}

@compute @workgroup_size(1)
fn count_batches() {
    let at = sizes.offset;
    let low = working[at] + 1u;
    working[at] = low;
    if (low == 0u) {
        working[at + 1u] = working[at + 1u] + 1u;
    }
}
