// Tile staging of the attention's tensor-core kernels (shaders/flash_coop_*.wgsl; the matmul
// and convolution GEMMs stage 16-byte chunks, shaders/include/coop_gemm.wgsl): a k slice of the left
// operand (BM x BK) and of the right one (BK x BN) goes through workgroup memory, staged by
// the THREADS threads of a workgroup: step s of thread tid stages element tid + s * THREADS of
// each tile. Consecutive threads walk the contiguous dimension of each stored matrix, so
// global reads coalesce, and elements outside the matrices are 0, so every tile is whole. Each
// body keeps its own tile layout and element type (vec4<f32> for the tiled SIMT matmul, f16
// for the cooperative kernels): a TileElement gives an element's place in its tile and its
// value. Needs the including shader's BK.
struct TileElement {
    row: u32, // left operand: row within BM; right operand: k within BK
    col: u32, // left operand: k within BK; right operand: column within BN
    value: f32,
}

// Where element l of a tile `outer` wide (BM rows of the left operand, BN columns of the
// right one) and BK deep lies: (outer index, k). k runs fastest when it is the stored
// matrix's contiguous dimension, so consecutive threads read consecutive addresses.
fn tile_position(l: u32, outer: u32, k_contiguous: bool) -> vec2<u32> {
    if (k_contiguous) { return vec2<u32>(l / BK, l % BK); }
    return vec2<u32>(l % outer, l / outer);
}
