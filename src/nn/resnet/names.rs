//! kuangliu/pytorch-cifar's `state_dict` names (`models/resnet.py`), the one table a ResNet
//! checkpoint is written and read through ([`crate::nn::family::NameTable`]). The builder
//! names its modules as kuangliu does, so each row maps a name to itself; `{i}` is a block's
//! index within its stage (`layer2.{i}.conv1.weight`). A name the builder makes without a
//! row here fails the first save, naming it.

use crate::nn::family::NameTable;

/// `(name, name)`.
macro_rules! same {
    ($name:expr) => {
        ($name, $name)
    };
}

/// A BatchNorm's rows under module `$m` (its parameters, then its buffers).
macro_rules! bn {
    ($m:expr) => {
        [
            same!(concat!($m, ".weight")),
            same!(concat!($m, ".bias")),
            same!(concat!($m, ".running_mean")),
            same!(concat!($m, ".running_var")),
            same!(concat!($m, ".num_batches_tracked")),
        ]
    };
}

/// The rows of stage `$s`'s blocks: 18 a block, in `state_dict` order.
macro_rules! stage {
    ($s:literal) => {{
        let [a, b, c, d, e] = bn!(concat!("layer", $s, ".{i}.bn1"));
        let [f, g, h, i, j] = bn!(concat!("layer", $s, ".{i}.bn2"));
        let [k, l, m, n, o] = bn!(concat!("layer", $s, ".{i}.shortcut.1"));
        [
            same!(concat!("layer", $s, ".{i}.conv1.weight")),
            a,
            b,
            c,
            d,
            e,
            same!(concat!("layer", $s, ".{i}.conv2.weight")),
            f,
            g,
            h,
            i,
            j,
            same!(concat!("layer", $s, ".{i}.shortcut.0.weight")),
            k,
            l,
            m,
            n,
            o,
        ]
    }};
}

type Row = (&'static str, &'static str);

/// `parts` one after the other.
const fn join<const N: usize>(parts: &[&[Row]]) -> [Row; N] {
    let mut out = [("", ""); N];
    let (mut k, mut p) = (0, 0);
    while p < parts.len() {
        let mut j = 0;
        while j < parts[p].len() {
            out[k] = parts[p][j];
            k += 1;
            j += 1;
        }
        p += 1;
    }
    assert!(k == N, "the table's length");
    out
}

const STEM: [Row; 6] = {
    let [a, b, c, d, e] = bn!("bn1");
    [same!("conv1.weight"), a, b, c, d, e]
};
const HEAD: [Row; 2] = [same!("linear.weight"), same!("linear.bias")];

/// Stem, four stages (resnet18-cifar's; He et al.'s nets use the first three), head.
const ROWS: [Row; 80] = join(&[
    &STEM,
    &stage!("1"),
    &stage!("2"),
    &stage!("3"),
    &stage!("4"),
    &HEAD,
]);

pub const KUANGLIU: NameTable = NameTable {
    convention: "kuangliu/pytorch-cifar",
    rows: &ROWS,
};
