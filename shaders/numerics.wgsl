// The AMP doctor's counters: one pass counts up to MAX_SEGMENTS tensors (segments: a layer's
// output, input gradient or weight gradient) in the storage each is kept in, each adding
// into its own record of a small counts buffer. The segments lie in at most three buffers
// (`words0`/`quads0` .. `words2`/`quads2`; WebGPU guarantees 8 storage bindings a stage):
// a step counts the tensors complete at one point of its kernel list in one dispatch
// (src/train/numerics/passes.rs), since on a CPU adapter every dispatch costs a full
// stop. Each segment has its own run of workgroups (`first_group`, `groups`).
// Values are read as raw words and classified from their bits alone, so f32, f16
// (native `array<f16>` and packed share one layout: two halves per word, the even element
// low) and bf16 are counted exactly, subnormals included, whatever the device does with
// subnormal arithmetic.
//
// A record (RECORD words, src/ops/numerics.rs decodes it):
//   0 elements   1 inf or NaN   2 NaN   3 at or beyond the low dtype's overflow threshold
//   (inf included, NaN not)   4 non-zero but rounding to zero or a subnormal in the low
//   dtype   5 exact zeros   6 largest binade + BIAS (0: none)   7 BIAS - smallest binade
//   (0: none)   8.. binade histogram (when `params.histogram` asks: the app draws it, the
//   command line does not, and it is the pass's one atomic per value): bin k holds |x| in
//   [2^(LO+k), 2^(LO+k+1)), then the values below 2^LO and those at or above 2^(LO+BINS).
// Only integer atomics: the counts are the same whatever order the threads run in.
//
// Two loops per storage: the general one (`tally`: every class from the value's exponent, and
// the histogram) and, for the passes without the histogram (the command line's, where the
// pass's cost is the doctor's cost), a fast one that only compares |x| bits with a few
// bounds and keeps the largest and smallest, both halves of a 16-bit word at once
// (`bounds_halves`). tests/numerics.rs holds both to the CPU count.

#struct Params // src/ops/numerics.rs
#struct Segment

const MAX_SEGMENTS: u32 = 64u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<uniform> segments: array<Segment, MAX_SEGMENTS>;
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>;
// Each buffer twice: as words, and four words at a time (the fast loops' 16-byte loads).
@group(0) @binding(3) var<storage, read> words0: array<u32>;
@group(0) @binding(4) var<storage, read> quads0: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> words1: array<u32>;
@group(0) @binding(6) var<storage, read> quads1: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> words2: array<u32>;
@group(0) @binding(8) var<storage, read> quads2: array<vec4<u32>>;

const WG: u32 = 256u;
const HEADER: u32 = 8u;
const BINS: u32 = 72u;
const LO: i32 = -48;
const RECORD: u32 = 82u; // HEADER + BINS + 2
const BIAS: i32 = 256;

// The workgroup's binade histogram (words HEADER.. of a record; the header is summed from
// `partial`).
var<workgroup> local: array<atomic<u32>, RECORD>;
// Each thread's tally, a row per header word.
var<workgroup> partial: array<array<u32, WG>, HEADER>;
// The segment this workgroup counts (one per workgroup, set first).
var<private> seg: Segment;

fn word_at(w: u32) -> u32 {
    switch (seg.buffer) {
        case 1u: { return words1[w]; }
        case 2u: { return words2[w]; }
        default: { return words0[w]; }
    }
}

fn quad_at(q: u32) -> vec4<u32> {
    switch (seg.buffer) {
        case 1u: { return quads1[q]; }
        case 2u: { return quads2[q]; }
        default: { return quads0[q]; }
    }
}

// What one thread has counted so far (the histogram goes straight to `local`).
struct Tally {
    n: u32,
    non_finite: u32,
    nan: u32,
    overflow: u32,
    underflow: u32,
    zero: u32,
    max_e: u32,
    min_e: u32,
}

// The f32 bits of an f16 half, widened exactly (subnormals normalised); branch-free, so
// neighbouring threads (one SIMD vector on a CPU adapter) never diverge.
fn half_bits(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let exp = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    let normal = ((exp + 112u) << 23u) | (man << 13u);
    let special = 0x7f800000u | (man << 13u);
    // Subnormal: man * 2^-24 = 2^p * (1 + f), p the top set bit of man.
    let p = 31u - countLeadingZeros(man | 1u);
    let sub = select(0u, ((p + 103u) << 23u) | ((man << (23u - p)) & 0x7fffffu), man != 0u);
    var b = select(normal, special, exp == 31u);
    b = select(b, sub, exp == 0u);
    return sign | b;
}

// Add a finite non-zero value of binade e to the histogram (when asked for).
fn histogram(e: i32) {
    let k = e - LO;
    var slot = HEADER + BINS; // below 2^LO
    if (k >= i32(BINS)) {
        slot = HEADER + BINS + 1u;
    } else if (k >= 0) {
        slot = HEADER + u32(k);
    }
    atomicAdd(&local[slot], 1u);
}

// Count one value, given as f32 bits; branch-free but for the histogram.
fn tally(t: ptr<function, Tally>, bits: u32) {
    let u = bits & 0x7fffffffu;
    let nonzero = u != 0u;
    let non_finite = u >= 0x7f800000u;
    let finite = nonzero && !non_finite;
    (*t).n += 1u;
    (*t).zero += select(0u, 1u, !nonzero);
    (*t).non_finite += select(0u, 1u, non_finite);
    (*t).nan += select(0u, 1u, u > 0x7f800000u);
    (*t).overflow += select(0u, 1u, u >= params.overflow_bits && u <= 0x7f800000u);
    (*t).underflow += select(0u, 1u, finite && u < params.underflow_bits);
    // floor(log2 |x|): from the exponent field, f32 subnormals from the leading zeros.
    let field = u >> 23u;
    let e = select(i32(field) - 127, i32(31u - countLeadingZeros(u | 1u)) - 149, field == 0u);
    (*t).max_e = select((*t).max_e, max((*t).max_e, u32(e + BIAS)), finite);
    (*t).min_e = select((*t).min_e, max((*t).min_e, u32(BIAS - e)), finite);
    if (params.histogram != 0u && finite) {
        histogram(e);
    }
}

// `tally` of an f16 value against f16's own range, from its 16 bits (what widening it and
// comparing with f16's thresholds gives: overflow is inf, underflow a subnormal).
fn tally_f16(t: ptr<function, Tally>, h: u32) {
    let exp = (h >> 10u) & 0x1fu;
    let man = h & 0x3ffu;
    let nonzero = (h & 0x7fffu) != 0u;
    let finite = nonzero && exp != 31u;
    (*t).n += 1u;
    (*t).zero += select(0u, 1u, !nonzero);
    (*t).non_finite += select(0u, 1u, exp == 31u);
    (*t).nan += select(0u, 1u, exp == 31u && man != 0u);
    (*t).overflow += select(0u, 1u, exp == 31u && man == 0u);
    (*t).underflow += select(0u, 1u, exp == 0u && man != 0u);
    let e = select(i32(exp) - 15, i32(31u - countLeadingZeros(man | 1u)) - 24, exp == 0u);
    (*t).max_e = select((*t).max_e, max((*t).max_e, u32(e + BIAS)), finite);
    (*t).min_e = select((*t).min_e, max((*t).min_e, u32(BIAS - e)), finite);
    if (params.histogram != 0u && finite) {
        histogram(e);
    }
}

// Count 16-bit element e of `word`: kind 1 f16 against f16's range, 2 bf16, 3 f16 against
// another range (widened).
fn tally_half(t: ptr<function, Tally>, word: u32, e: u32) {
    let h = (word >> ((e & 1u) * 16u)) & 0xffffu;
    if (seg.kind == 1u) {
        tally_f16(t, h);
    } else if (seg.kind == 2u) {
        tally(t, h << 16u);
    } else {
        tally(t, half_bits(h));
    }
}

// The counters of the fast loops below, as threshold tests: how many values had |x| bits at
// or above each bound (inf, just past inf, the overflow and the underflow thresholds, and
// 1: non-zero), and the largest and smallest finite non-zero |x| bits. `Tally` follows
// from them (`tally_of`): NaN is past inf, overflow is at or above its threshold but not
// NaN, underflow is non-zero but below its threshold, zero is not non-zero.
struct Bounds {
    n: u32,
    ge_inf: u32,
    gt_inf: u32,
    ge_over: u32,
    nonzero: u32,
    ge_under: u32,
    hi: u32,
    lo: u32,
}

// floor(log2 |x|) of a finite non-zero f32, given its |x| bits (subnormals from the leading
// zeros).
fn binade_of(u: u32) -> i32 {
    let field = u >> 23u;
    return select(i32(field) - 127, i32(31u - countLeadingZeros(u | 1u)) - 149, field == 0u);
}

// `Bounds` as a `Tally`; `hi` and `lo` are widened to f32 bits first (kind 1: f16 halves;
// 2: bf16 halves).
fn tally_of(b: Bounds) -> Tally {
    var hi = b.hi;
    var lo = b.lo;
    if (seg.kind == 1u) {
        hi = half_bits(hi);
        lo = half_bits(lo);
    } else if (seg.kind == 2u) {
        hi = hi << 16u;
        lo = lo << 16u;
    }
    let max_e = select(0u, u32(binade_of(hi) + BIAS), b.hi != 0u);
    let min_e = select(0u, u32(BIAS - binade_of(lo)), b.lo != 0xffffffffu);
    return Tally(b.n, b.ge_inf, b.gt_inf, b.ge_over - b.gt_inf, b.nonzero - b.ge_under,
        b.n - b.nonzero, max_e, min_e);
}

// The fast loops' running counts, a lane each: one value per lane of a vec4 (f32), or two
// 16-bit lanes per u32 (halves). `hi`: the largest finite |x| bits so far; `lo`: the
// smallest |x| bits less one, wrapping, so that a zero (0 - 1) never is the smallest and no
// compare is needed: a lane that saw nothing finite and non-zero ends at or above inf - 1.
struct Lanes {
    ge_inf: vec4<u32>,
    gt_inf: vec4<u32>,
    ge_over: vec4<u32>,
    nonzero: vec4<u32>,
    ge_under: vec4<u32>,
    hi: vec4<u32>,
    lo: vec4<u32>,
}

fn no_lanes() -> Lanes {
    let zero = vec4<u32>(0u);
    return Lanes(zero, zero, zero, zero, zero, zero, vec4<u32>(0xffffffffu));
}

// The sum of a count's lanes (`halves`: two 16-bit lanes per component).
fn lane_sum(v: vec4<u32>, halves: bool) -> u32 {
    let w = select(v, (v & vec4<u32>(0xffffu)) + (v >> vec4<u32>(16u)), halves);
    return w.x + w.y + w.z + w.w;
}

// `n` values' lanes as `Bounds`, for values whose |x| bits are inf at `inf`.
fn bounds_of(l: Lanes, n: u32, halves: bool, inf: u32) -> Bounds {
    let lo = min(min(l.lo.x, l.lo.y), min(l.lo.z, l.lo.w));
    return Bounds(n, lane_sum(l.ge_inf, halves), lane_sum(l.gt_inf, halves),
        lane_sum(l.ge_over, halves), lane_sum(l.nonzero, halves), lane_sum(l.ge_under, halves),
        max(max(l.hi.x, l.hi.y), max(l.hi.z, l.hi.w)), select(0xffffffffu, lo + 1u, lo < inf - 1u));
}

// f32 values, quads `first_quad + start, + stride, ...` below `quad_count`: two compares a
// value, a running largest and smallest, and one test whether any of the quad's four is
// at or beyond the overflow threshold (or inf); only such a quad, which is rare, counts
// inf, NaN and overflow. No exponent until the end.
fn bounds_f32(start: u32, stride: u32, first_quad: u32, quad_count: u32) -> Bounds {
    let inf = vec4<u32>(0x7f800000u);
    let big = vec4<u32>(min(params.overflow_bits, 0x7f800000u));
    let one = vec4<u32>(1u);
    let zero = vec4<u32>(0u);
    var l = no_lanes();
    var n = 0u;
    for (var i = start; i < quad_count; i += stride) {
        let u = quad_at(first_quad + i) & vec4<u32>(0x7fffffffu);
        l.nonzero += select(zero, one, u != zero);
        l.ge_under += select(zero, one, u >= vec4<u32>(params.underflow_bits));
        l.lo = min(l.lo, u - one);
        if (any(u >= big)) {
            l.ge_inf += select(zero, one, u >= inf);
            l.gt_inf += select(zero, one, u > inf);
            l.ge_over += select(zero, one, u >= vec4<u32>(params.overflow_bits));
            l.hi = max(l.hi, select(zero, u, u < inf));
        } else {
            l.hi = max(l.hi, u);
        }
        n += 4u;
    }
    return bounds_of(l, n, false, 0x7f800000u);
}

// Sixteen-bit values (f16 or bf16), eight to a quad, all eight at once: |h| is at most
// 0x7fff, so |h| + (0x8000 - K) sets bit 15 of its half exactly when |h| >= K and never
// carries into the next half. The counts build up in 16-bit lanes, which cannot wrap: a
// thread takes at most 2^15 quads (src/ops/numerics.rs holds the grid to it). As for f32,
// only a quad holding a value at or beyond the overflow threshold (or inf) counts inf, NaN
// and overflow.
fn bounds_halves(start: u32, stride: u32, first_quad: u32, quad_count: u32) -> Bounds {
    // |h| bits at and above which a half is inf (or NaN), past the range, normal: f16
    // against f16's range, bf16 against the range asked for.
    let inf = select(0x7f80u, 0x7c00u, seg.kind == 1u);
    let over = select((params.overflow_bits + 0xffffu) >> 16u, inf, seg.kind == 1u);
    let under = select((params.underflow_bits + 0xffffu) >> 16u, 0x0400u, seg.kind == 1u);
    let pair = vec4<u32>(0x00010001u);
    let signs = vec4<u32>(0x80008000u);
    let add_big = vec4<u32>((0x8000u - min(over, inf)) * 0x00010001u);
    let add_inf = vec4<u32>((0x8000u - inf) * 0x00010001u);
    let add_nan = vec4<u32>((0x7fffu - inf) * 0x00010001u);
    let add_over = vec4<u32>((0x8000u - over) * 0x00010001u);
    let add_nonzero = vec4<u32>(0x7fff7fffu);
    let add_under = vec4<u32>((0x8000u - under) * 0x00010001u);
    let zero = vec4<u32>(0u);
    let one = vec4<u32>(1u);
    let half = vec4<u32>(0xffffu);
    let finite = vec4<u32>(inf);
    var l = no_lanes();
    var n = 0u;
    for (var i = start; i < quad_count; i += stride) {
        let a = quad_at(first_quad + i) & vec4<u32>(0x7fff7fffu);
        l.nonzero += ((a + add_nonzero) >> vec4<u32>(15u)) & pair;
        l.ge_under += ((a + add_under) >> vec4<u32>(15u)) & pair;
        let h0 = a & half;
        let h1 = a >> vec4<u32>(16u);
        l.lo = min(l.lo, min(h0 - one, h1 - one));
        if (any(((a + add_big) & signs) != zero)) {
            l.ge_inf += ((a + add_inf) >> vec4<u32>(15u)) & pair;
            l.gt_inf += ((a + add_nan) >> vec4<u32>(15u)) & pair;
            l.ge_over += ((a + add_over) >> vec4<u32>(15u)) & pair;
            l.hi = max(l.hi, max(select(zero, h0, h0 < finite), select(zero, h1, h1 < finite)));
        } else {
            l.hi = max(l.hi, max(h0, h1));
        }
        n += 8u;
    }
    return bounds_of(l, n, true, inf);
}

// The general count of word `w`: an f32 value, or each of its two halves in [first, end).
fn tally_word(t: ptr<function, Tally>, w: u32, first: u32, end: u32) {
    let word = word_at(w);
    if (seg.kind == 0u) {
        tally(t, word);
    } else {
        let e0 = 2u * w;
        if (e0 >= first) {
            tally_half(t, word, e0);
        }
        if (e0 + 1u < end) {
            tally_half(t, word, e0 + 1u);
        }
    }
}

@compute @workgroup_size(WG)
fn count_numerics(#workgroup_builtins) {
    for (var i = HEADER + lid; i < RECORD; i += WG) {
        atomicStore(&local[i], 0u);
    }
    workgroupBarrier();
    // The last segment whose workgroups begin at or before this one.
    var s = 0u;
    for (var i = 1u; i < params.segments; i++) {
        s = select(s, i, wid.x >= segments[i].first_group);
    }
    seg = segments[s];
    var t = Tally(0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    let stride = seg.groups * WG;
    let start = (wid.x - seg.first_group) * WG + lid;
    // The elements [first, end), in the words [word_first, word_end); of those, the words
    // whose every element is in range are [whole_first, whole_end).
    let first = seg.start;
    let end = seg.start + seg.len;
    let halves = seg.kind != 0u;
    let word_first = select(first, first >> 1u, halves);
    let word_end = select(end, (end + 1u) >> 1u, halves);
    let whole_first = select(first, (first + 1u) >> 1u, halves);
    let whole_end = max(whole_first, select(end, end >> 1u, halves));
    // The fast loops (no histogram, and a value's own kind's range for 16-bit ones: the
    // command line's passes) take the whole quads of whole words; the general loop the
    // words before and after them, or every word when asked for the histogram.
    let quad_first = (whole_first + 3u) >> 2u;
    let quad_end = max(quad_first, whole_end >> 2u);
    let fast = params.histogram == 0u && seg.kind != 3u && quad_end > quad_first;
    if (fast) {
        if (halves) {
            t = tally_of(bounds_halves(start, stride, quad_first, quad_end - quad_first));
        } else {
            t = tally_of(bounds_f32(start, stride, quad_first, quad_end - quad_first));
        }
        let head = 4u * quad_first - word_first;
        let tail = word_end - 4u * quad_end;
        for (var i = start; i < head + tail; i += stride) {
            tally_word(&t, select(4u * quad_end + (i - head), word_first + i, i < head), first, end);
        }
    } else {
        for (var i = start; i < word_end - word_first; i += stride) {
            tally_word(&t, word_first + i, first, end);
        }
    }
    // The workgroup's header: each thread's tally into `partial`, then one thread a word sums
    // (or, for the binades, takes the largest of) its row. Atomics per thread cost a CPU
    // adapter more than the whole count (lavapipe: each is a locked instruction per lane).
    partial[0][lid] = t.n;
    partial[1][lid] = t.non_finite;
    partial[2][lid] = t.nan;
    partial[3][lid] = t.overflow;
    partial[4][lid] = t.underflow;
    partial[5][lid] = t.zero;
    partial[6][lid] = t.max_e;
    partial[7][lid] = t.min_e;
    workgroupBarrier();
    let base = seg.record * RECORD;
    if (lid < HEADER) {
        var c = 0u;
        for (var j = 0u; j < WG; j++) {
            let v = partial[lid][j];
            c = select(c + v, max(c, v), lid >= 6u);
        }
        if (c != 0u) {
            if (lid >= 6u) {
                atomicMax(&counts[base + lid], c);
            } else {
                atomicAdd(&counts[base + lid], c);
            }
        }
    }
    // The histogram's words (zero unless asked for).
    for (var i = HEADER + lid; i < RECORD; i += WG) {
        let c = atomicLoad(&local[i]);
        if (c != 0u) {
            atomicAdd(&counts[base + i], c);
        }
    }
}
