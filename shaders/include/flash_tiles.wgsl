// ---- fused attention, SIMT bodies: the tiles of shaders/flash_forward.wgsl and
// shaders/flash_backward.wgsl ----------------------------------------------------------------
// Constants (src/ops/flash_attention): TILE (keys, or query rows, per workgroup-memory tile),
// WG (threads per workgroup: one query row or one key each) and TILED (true: K/V or Q/dO
// tiles go through workgroup memory, for GPUs; false: every thread reads straight from the
// buffers with no barrier, for CPU adapters). Both bodies do the same arithmetic in the same
// order.

// Tiles of TILE rows of two head-sized tensors (k and v, or q and dy) in f32.
var<workgroup> a_tile: array<f32, TILE * HS>;
var<workgroup> b_tile: array<f32, TILE * HS>;

// Each shader stages two head-sized tensors a tile of TILE rows at a time: keys (k, v) or
// query rows (q, dy). `tile_source(p, keys, which, r, d)`, which each shader defines, reads
// channel d of row r of the first (which 0) or second (1) of them from the buffers.

// Rows [r0, r0 + TILE) of both tensors into a_tile and b_tile (zeros past T).
fn load_tiles(p: Place, keys: bool, r0: u32, tid: u32) {
    for (var x = tid; x < TILE * HS; x += WG) {
        let r = r0 + x / HS;
        let d = x % HS;
        var ax = 0.0;
        var bx = 0.0;
        if (r < params.t) {
            ax = tile_source(p, keys, 0u, r, d);
            bx = tile_source(p, keys, 1u, r, d);
        }
        a_tile[x] = ax;
        b_tile[x] = bx;
    }
}

// load_tiles between the barriers that keep the tiles whole, when TILED: every thread of
// the workgroup calls it (the loops around it are uniform).
fn stage_tiles(p: Place, keys: bool, r0: u32, tid: u32) {
    if (TILED) {
        workgroupBarrier();
        load_tiles(p, keys, r0, tid);
        workgroupBarrier();
    }
}

// Channel d of the staged tensor `which` at row r0 + rr: from the tile when TILED.
fn staged(p: Place, keys: bool, which: u32, r0: u32, rr: u32, d: u32) -> f32 {
    if (!TILED) {
        return tile_source(p, keys, which, r0 + rr, d);
    }
    if (which == 0u) {
        return a_tile[rr * HS + d];
    }
    return b_tile[rr * HS + d];
}

// ---- end fused attention SIMT tiles -------------------------------------------------------------
