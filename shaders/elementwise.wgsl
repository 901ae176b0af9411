// Elementwise ops: casts, sums, products, scaling, bias add. Each entry point is a `#map` of a
// scalar function (src/shader/map.rs): one thread per element pair, so packed outputs are
// written a whole word at a time (store2). The activations are in unary.wgsl.

#tensor x 1 read
#tensor y 2 read
#tensor out 3 read_write
#tensor b 4 read

#struct Params // src/ops/elementwise.rs
@group(0) @binding(0) var<uniform> params: Params;

const WG: u32 = 256u;

// The value itself: stored as `out`'s dtype, a cast.
fn same(v: f32) -> f32 {
    return v;
}

fn sum(a: f32, b: f32) -> f32 {
    return a + b;
}

fn product(a: f32, b: f32) -> f32 {
    return a * b;
}

fn scaled(v: f32) -> f32 {
    return params.alpha * v;
}

// out[N, C, inner] = x + b[C]. The two elements of a pair may fall in different channels.
fn plus_bias(v: f32, i: u32) -> f32 {
    return v + b_load((i / params.inner) % params.channels);
}

#map cast_forward: out = same(x)
#map add: out = sum(x, y)
#map mul: out = product(x, y)
#map scale: out = scaled(x)
#map bias_add: out = plus_bias(x, i)
// Residual gradients: out += x (out read and written; the two may have different storages).
#map accumulate: out = sum(out, x)
