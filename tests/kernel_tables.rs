//! A kernel table can never compute wrong numbers (issue 43): random tables against the
//! kernels' rules (`gpu::kernel_rules`). Every table the rules accept computes the f64
//! reference's products (matmul and, on tensor cores, the convolutions), in both layouts of
//! each operand, on whole and ragged tiles, with and without split-K; every table they refuse is
//! refused naming its key, by each path that accepts one: a context made for it, a tuning file.
//! And the numeric check a loaded table gets (`ops::table_check`) refuses a table whose tiles
//! compute wrong products, naming the file and the key.
//!
//! The draws are seeded (`WEBGPU_AMP_TABLE_SEED`, printed); the tensor-core cases run where
//! the adapter has cooperative matrices (on Mesa 26's lavapipe in scripts/test.sh) and say NOT
//! CHECKED elsewhere.

mod common;

use common::conv_ref::{ODD_SHAPES, check_conv};
use common::matmul_ref::{Case, check_split, kernels};
use common::{coop_ctx, ctx, show};
use webgpu_amp::gpu::{
    AdapterKernels, CoopTile, KernelLimits, KernelTable, SimtTile, TUNING_FORMAT, TableOrigin,
    TuningFile,
};
use webgpu_amp::ops::matmul::MatmulKernel;
use webgpu_amp::ops::table_check::check_tiles;
use webgpu_amp::{DType, GpuContext, Storage};

/// splitmix64: the draws of one seed are the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }
    fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
}

fn rng(test: &str) -> Rng {
    let seed = std::env::var("WEBGPU_AMP_TABLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(43);
    show(&format!("{test}: WEBGPU_AMP_TABLE_SEED={seed}"));
    Rng(seed)
}

fn simt_tile(r: &mut Rng) -> SimtTile {
    let wg = [1, 2, 3, 4, 5, 8, 16, 32];
    let t = [2, 4, 6, 8, 12, 16];
    SimtTile {
        wg_x: r.pick(&wg),
        wg_y: r.pick(&wg),
        tm: r.pick(&t),
        tn: r.pick(&t),
        bk: r.pick(&[4, 8, 12, 16, 24, 32]),
    }
}

fn coop_tile(r: &mut Rng) -> CoopTile {
    CoopTile {
        sg_m: r.pick(&[1, 2, 3, 4]),
        sg_n: r.pick(&[1, 2, 3, 4]),
        fm: r.pick(&[1, 2, 3, 4, 8]),
        fn_: r.pick(&[1, 2, 3, 4, 8]),
        bk: r.pick(&[8, 16, 24, 32, 48, 64]),
    }
}

/// Draw tiles until `valid` pass the rules and `invalid` break one (each drawn once).
fn draw<T: PartialEq + Copy>(
    r: &mut Rng,
    mut tile: impl FnMut(&mut Rng) -> T,
    passes: impl Fn(&T) -> bool,
    (valid, invalid): (usize, usize),
) -> (Vec<T>, Vec<T>) {
    let (mut good, mut bad) = (Vec::new(), Vec::new());
    for _ in 0..10_000 {
        let t = tile(r);
        let list = if passes(&t) { &mut good } else { &mut bad };
        if !list.contains(&t) {
            list.push(t);
        }
        if good.len() >= valid && bad.len() >= invalid {
            break;
        }
    }
    assert!(good.len() >= valid, "only {} valid tiles drawn", good.len());
    good.truncate(valid);
    bad.truncate(invalid);
    (good, bad)
}

/// A product over tiles of `bm` × `bn` × `bk`: whole tiles (two or three of each side) or
/// ragged edges, each layout, f32 output.
fn random_case(r: &mut Rng, (bm, bn, bk): (u32, u32, u32), dtype: DType) -> Case {
    let (bm, bn, bk) = (bm as usize, bn as usize, bk as usize);
    let whole = r.coin();
    let side = |r: &mut Rng, t: usize| match whole {
        true => t * r.pick(&[1, 2, 3]),
        false => t * r.pick(&[0, 1, 2]) + r.pick(&[1, 3, 5, 7]),
    };
    let mnk = (side(r, bm), side(r, bn), side(r, bk));
    let trans = (r.coin(), r.coin());
    (
        mnk,
        trans,
        (dtype, dtype, DType::F32),
        None,
        r.coin(),
        r.next() % 1000,
    )
}

/// A tuning file for this adapter holding `table`, and what loading it says.
fn load_error(ctx: &GpuContext, table: &KernelTable, tag: &str) -> String {
    let file = TuningFile {
        format: TUNING_FORMAT.into(),
        adapter: ctx.report.name.clone(),
        backend: ctx.report.backend.clone(),
        driver: "tests".into(),
        date: "2026-11-28".into(),
        command: "tests/kernel_tables.rs".into(),
        table: table.clone(),
        measurements: vec![],
    };
    let path = std::env::temp_dir().join(format!(
        "webgpu-amp-kernel-tables-{}-{tag}.json",
        std::process::id()
    ));
    std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
    let limits = ctx.caps.kernel_limits();
    let result = AdapterKernels::from_file(&path, &ctx.adapter.get_info(), &limits);
    let _ = std::fs::remove_file(&path);
    let e = result
        .expect_err("a table that breaks a rule loads")
        .to_string();
    assert!(
        e.contains(&path.display().to_string()),
        "names the file: {e}"
    );
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

/// Every refused tile: refused by `with_kernel_table` and by a tuning file, naming its key and
/// the first field the rules name.
fn assert_refused(ctx: &GpuContext, table: &KernelTable, key: &str, field: &str, tag: &str) {
    let e = match ctx.with_kernel_table(table.clone(), "tests") {
        Ok(_) => panic!("{key}: a table breaking `{field}` made a context"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains(key) && e.contains(field), "{key}.{field}: {e}");
    let e = load_error(ctx, table, tag);
    assert!(e.contains(key) && e.contains(field), "{key}.{field}: {e}");
}

#[test]
fn random_simt_tables_the_rules_accept_compute_the_reference_and_the_rest_are_refused() {
    let ctx = ctx();
    let limits: KernelLimits = ctx.caps.kernel_limits();
    let mut r = rng("simt tables");
    let passes = |t: &SimtTile| t.broken_rules(&limits).is_empty();
    let (good, bad) = draw(&mut r, simt_tile, passes, (8, 40));
    for (i, t) in bad.iter().enumerate() {
        let mut table = ctx.caps.kernels.table.clone();
        let f16 = i % 2 == 1;
        match f16 {
            true => table.simt_16 = *t,
            false => table.simt_f32 = *t,
        }
        let key = if f16 { "simt_16" } else { "simt_f32" };
        let field = t.broken_rules(&limits)[0].key;
        assert_refused(ctx, &table, key, field, &format!("simt{i}"));
    }
    if !kernels(ctx).contains(&MatmulKernel::Tiled) {
        return; // said NOT CHECKED by `kernels`
    }
    for t in &good {
        let mut table = ctx.caps.kernels.table.clone();
        table.simt_f32 = *t;
        table.simt_16 = *t;
        let twin = ctx.with_kernel_table(table, "tests").expect("a valid tile");
        let sides = (t.bm(), t.bn(), t.bk);
        for dtype in [DType::F32, DType::BF16] {
            let case = random_case(&mut r, sides, dtype);
            let split = r.pick(&[None, Some(2), Some(3)]);
            check_split(&format!("{t:?}"), &twin, MatmulKernel::Tiled, case, split);
        }
    }
}

#[test]
fn random_tensor_core_tables_the_rules_accept_compute_the_reference_and_the_rest_are_refused() {
    let mut r = rng("tensor-core tables");
    for edge in [8, 16] {
        // Refusal needs no tensor cores: the rules hold on every adapter.
        let ctx_any = ctx();
        let limits = ctx_any.caps.kernel_limits();
        let passes = |t: &CoopTile| t.broken_rules(edge, &limits).is_empty();
        let (_, bad) = draw(&mut r, coop_tile, passes, (1, 20));
        for (i, t) in bad.iter().enumerate() {
            let mut table = ctx_any.caps.kernels.table.clone();
            let size = ["small", "wide", "large", "conv_large"][i % 4];
            let tiles = if edge == 16 {
                &mut table.coop_16
            } else {
                &mut table.coop_8
            };
            match i % 4 {
                0 => tiles.small = *t,
                1 => tiles.wide = *t,
                2 => tiles.large = *t,
                _ => tiles.conv_large = Some(*t),
            }
            let key = format!("coop_{edge}.{size}");
            let field = t.broken_rules(edge, &limits)[0].key;
            assert_refused(ctx_any, &table, &key, field, &format!("coop{edge}-{i}"));
        }
        let Some(ctx) = coop_ctx(edge, "random tensor-core tables against f64") else {
            continue;
        };
        let limits = ctx.caps.kernel_limits();
        let passes = |t: &CoopTile| t.broken_rules(edge, &limits).is_empty();
        // Three per shape: each tile's pipelines take a minute or more to build on lavapipe.
        let (good, _) = draw(&mut r, coop_tile, passes, (3, 0));
        for (i, t) in good.iter().enumerate() {
            let mut table = ctx.caps.kernels.table.clone();
            let tiles = if edge == 16 {
                &mut table.coop_16
            } else {
                &mut table.coop_8
            };
            (tiles.small, tiles.wide, tiles.large) = (*t, *t, *t);
            tiles.conv_large = Some(*t);
            let twin = ctx.with_kernel_table(table, "tests").expect("a valid tile");
            let sides = (t.bm(edge), t.bn(edge), t.bk);
            for _ in 0..2 {
                let case = random_case(&mut r, sides, DType::F16);
                let split = r.pick(&[None, Some(2)]);
                check_split(&format!("{t:?}"), &twin, MatmulKernel::Coop, case, split);
            }
            let shape = &ODD_SHAPES[i % ODD_SHAPES.len()];
            check_conv(&twin, shape, Storage::F16, Storage::F32, r.coin(), i as u64);
        }
    }
}

/// Issue 43's tables, loaded past the rules (as a table from an older build would be): the
/// numeric check of a loaded table runs them against the reference and refuses the table,
/// naming where it came from and the key. The built-in table passes the same check.
#[test]
fn the_numeric_check_refuses_tiles_that_compute_wrong_products() {
    let ctx = ctx();
    if !kernels(ctx).contains(&MatmulKernel::Tiled) {
        return; // said NOT CHECKED by `kernels`
    }
    let mut twin = ctx.table_check_twin();
    twin.caps.kernels.origin = TableOrigin::File("BAD.json".into());
    check_tiles(&twin).expect("the built-in table computes the reference's products");
    for (wg_x, wg_y) in [(3, 5), (2, 3)] {
        let bad = SimtTile {
            wg_x,
            wg_y,
            tm: 4,
            tn: 4,
            bk: 8,
        };
        twin.caps.kernels.table.simt_f32 = bad;
        let e = check_tiles(&twin)
            .expect_err("wrong tiles pass")
            .to_string();
        assert!(
            e.contains("tuning file BAD.json") && e.contains("simt_f32") && !e.contains('\n'),
            "{e}"
        );
    }
}
