//! The epilogue's options as compile-time constants of each pipeline
//! (`shaders/include/matmul_common.wgsl`'s `store_pair`, which every body stores through):
//! bias, rounding, accumulation and whole-word stores become constants the compiler folds,
//! not branches on a uniform. A fused activation or residual would be one more option here
//! and one more step in `store_pair`.

use super::MatmulOpts;
use super::layout::MatrixLayout;

/// What the epilogue does to each result before it lands in c.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Epilogue {
    pub(super) bias: bool,
    pub(super) accumulate: bool,
    /// `round_grad`'s `to` (0: keep f32; [`crate::ops::round_code`]).
    pub(super) round: u32,
    /// Every even column starts a word of c, so a column pair is one store.
    pub(super) pairs: bool,
}

impl Epilogue {
    /// The epilogue of a product with these options into c laid out as `c`.
    pub(super) fn new(opts: &MatmulOpts, c: &MatrixLayout) -> Epilogue {
        let even = |v: usize| v.is_multiple_of(2);
        Epilogue {
            bias: opts.bias.is_some(),
            accumulate: opts.accumulate,
            round: crate::ops::round_code(opts.round_to),
            pairs: even(c.offset) && even(c.ld) && c.batch_stride.into_iter().all(even),
        }
    }

    /// Nothing but the store: what an f32 output may skip the epilogue for (a cooperative
    /// store straight to memory).
    pub(super) fn is_plain(&self) -> bool {
        !self.bias && !self.accumulate && self.round == 0
    }

    /// The plain epilogue, and one with every option on: between them every line of
    /// `store_pair` is compiled, so the portability tests list these two per variant.
    pub(super) const VARIANTS: [Epilogue; 2] = [
        Epilogue {
            bias: false,
            accumulate: false,
            round: 0,
            pairs: true,
        },
        Epilogue {
            bias: true,
            accumulate: true,
            round: 1,
            pairs: false,
        },
    ];

    /// The shader constants; `split_out`: the kernel writes split-K partial sums instead.
    pub(super) fn consts(&self, split_out: bool) -> Vec<(&'static str, String)> {
        vec![
            ("EPI_BIAS", self.bias.to_string()),
            ("EPI_ACCUMULATE", self.accumulate.to_string()),
            ("EPI_ROUND", format!("{}u", self.round)),
            ("EPI_PAIRS", self.pairs.to_string()),
            ("SPLIT_OUT", split_out.to_string()),
        ]
    }
}
