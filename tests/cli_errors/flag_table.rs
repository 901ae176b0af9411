//! The list of every numeric flag of every subcommand, with its range as the error line
//! states it (the table of flags in docs/guide/troubleshooting.md), and of the flags whose
//! value is not a number; the tests in numeric_flags.rs check it against clap's definitions
//! and the binary.

/// A numeric flag: its range in the error's words, the flags it needs to take effect, values
/// outside its range, and what the property test draws for it.
pub(super) struct Flag {
    pub(super) name: &'static str,
    pub(super) range: &'static str,
    pub(super) needs: &'static [&'static str],
    pub(super) bad: &'static [&'static str],
    pub(super) draws: Draws,
}

/// Values the property test gives a flag.
#[derive(Clone, Copy)]
pub(super) enum Draws {
    Ints,
    Floats,
    /// Flags whose large in-range values would make a run long (estimate batches, tokens,
    /// sizes): small values, and values out of range.
    These(&'static [&'static str]),
}

pub(super) const fn flag(
    name: &'static str,
    range: &'static str,
    bad: &'static [&'static str],
) -> Flag {
    Flag {
        name,
        range,
        needs: &[],
        bad,
        draws: Draws::Ints,
    }
}

pub(super) const fn float(
    name: &'static str,
    range: &'static str,
    bad: &'static [&'static str],
) -> Flag {
    Flag {
        draws: Draws::Floats,
        ..flag(name, range, bad)
    }
}

pub(super) const COUNT: &str = "1 to 2^53";
pub(super) const COUNT_BAD: &[&str] = &["0", "-1", "9007199254740993", "18446744073709551616", "x"];
pub(super) const SGD: &[&str] = &["--optimizer", "sgd"];
pub(super) const COSINE: &[&str] = &["--lr-schedule", "cosine"];

/// A Llama's window (train, compare, plan, bench step): without a Llama it is refused; in
/// range, short ones only.
pub(super) const SEQ_LEN: Flag = Flag {
    draws: Draws::These(&["1", "8", "0", "1048577", "-1", "x"]),
    ..flag(
        "--seq-len",
        "1 to 1048576",
        &["0", "1048577", "-1", "18446744073709551616", "x"],
    )
};

/// `train`'s and `compare`'s shared flags (`RunArgs`, `RecipeArgs`).
pub(super) const RUN_FLAGS: &[Flag] = &[
    float(
        "--lr",
        "finite and >= 0",
        &["-0.1", "NaN", "inf", "one", ""],
    ),
    Flag {
        needs: SGD,
        ..float("--momentum", "finite and >= 0", &["-1", "NaN", "inf", "x"])
    },
    Flag {
        needs: SGD,
        ..float("--dampening", "finite", &["NaN", "inf", "-inf", "x"])
    },
    float(
        "--weight-decay",
        "finite and >= 0",
        &["-1", "NaN", "inf", "x"],
    ),
    flag(
        "--batch-size",
        "1 to 16777216",
        &[
            "0",
            "-1",
            "16777217",
            "18446744073709551616",
            "1e3",
            "x",
            "",
        ],
    ),
    flag("--epochs", COUNT, COUNT_BAD),
    flag("--steps", COUNT, COUNT_BAD),
    flag(
        "--random-crop-padding",
        "1 to 65535",
        &["0", "-1", "65536", "18446744073709551616", "x"],
    ),
    flag(
        "--seed",
        "0 to 18446744073709551615",
        &["-1", "18446744073709551616", "x", ""],
    ),
    float(
        "--clip-grad-norm",
        "finite and >= 0 (0: no clipping)",
        &["-1", "NaN", "inf", "x"],
    ),
    float(
        "--label-smoothing",
        "in [0, 1] (0: none)",
        &["-0.1", "1.5", "NaN", "inf", "x"],
    ),
    flag("--grad-accum", "1 to 65536", &["0", "65537", "-1", "x"]),
    float(
        "--init-scale",
        "finite and >= 2^-126 (unscaling multiplies by its reciprocal)",
        &["0", "-2", "inf", "1e39", "NaN", "1e-40", "x"],
    ),
    flag(
        "--growth-interval",
        "1 to 2147483647",
        &["0", "2147483648", "4294967296", "-1", "x"],
    ),
    float(
        "--growth-factor",
        "finite and > 1",
        &["1", "0.5", "inf", "NaN", "x"],
    ),
    float(
        "--backoff-factor",
        "in (0, 1)",
        &["0", "1", "1.5", "NaN", "x"],
    ),
    flag(
        "--num-classes",
        "1 to 16777216",
        &["0", "16777217", "-1", "x"],
    ),
    float("--beta1", "in [0, 1)", &["1", "-0.1", "NaN", "x"]),
    float("--beta2", "in [0, 1)", &["1", "1.5", "NaN", "x"]),
    float("--eps", "finite and >= 0", &["-1", "NaN", "inf", "x"]),
    Flag {
        needs: COSINE,
        ..flag(
            "--warmup-steps",
            "0 to 2^53, fewer than the decay steps",
            &["1", "9007199254740993", "-1", "x"],
        )
    },
    Flag {
        needs: COSINE,
        ..float(
            "--min-lr",
            "finite, >= 0 and at most the learning rate",
            &["-1", "NaN", "inf", "0.5", "x"],
        )
    },
    Flag {
        needs: COSINE,
        ..flag("--lr-decay-steps", COUNT, COUNT_BAD)
    },
    SEQ_LEN,
    flag("--eval-every", COUNT, COUNT_BAD),
    Flag {
        draws: Draws::These(&["0", "1", "2", "65537", "4294967296", "-1", "x"]),
        ..flag(
            "--eval-batches",
            "1 to 65536",
            &["0", "65537", "4294967296", "100000000", "-1", "x"],
        )
    },
    flag(
        "--max-skipped-steps",
        "0 to 2^53 (0: never stop)",
        &["9007199254740993", "18446744073709551616", "-1", "x"],
    ),
];

/// `train`'s own.
pub(super) const TRAIN_FLAGS: &[Flag] = &[
    Flag {
        needs: &["--save", "SAVE"],
        ..flag("--save-every", COUNT, COUNT_BAD)
    },
    float(
        "--collective-timeout",
        "> 0 and at most 604800 seconds",
        &["0", "-1", "604801", "1e300", "NaN", "inf", "x"],
    ),
];

pub(super) const SAMPLE_FLAGS: &[Flag] = &[
    Flag {
        draws: Draws::These(&["0", "1", "3", "16777217", "-1", "x"]),
        ..flag(
            "--tokens",
            "1 to 16777216",
            &["0", "16777217", "-3", "99999999999999999999999", "x"],
        )
    },
    float(
        "--temperature",
        "finite and at least 1e-30",
        &["0", "-0.5", "1e-31", "1e-45", "NaN", "inf", "x"],
    ),
    Flag {
        draws: Draws::These(&["0", "1", "65", "66", "200", "-1", "x"]),
        ..flag(
            "--top-k",
            "1 to the vocabulary size",
            &["0", "66", "-1", "x"],
        )
    },
    flag(
        "--seed",
        "0 to 18446744073709551615",
        &["-1", "18446744073709551616", "x"],
    ),
    flag("--chunk", "1 to 16777216", &["0", "16777217", "-1", "x"]),
];

pub(super) const MATMUL_FLAGS: &[Flag] = &[
    Flag {
        draws: Draws::These(&["1", "8", "8,16", "0", "65537", "100000", "-1", "x"]),
        ..flag("--sizes", "1 to 65536", &["0", "65537", "-1", "x", "8,0"])
    },
    Flag {
        draws: Draws::These(&["1", "2", "0", "10001", "-1"]),
        ..flag("--repeats", "1 to 10000", &["0", "10001", "-1", "x"])
    },
];

pub(super) const TUNE_FLAGS: &[Flag] = &[Flag {
    // In-range values would tune for real (seconds to minutes): out-of-range ones only.
    draws: Draws::These(&["0", "3601", "-1", "NaN", "x"]),
    ..float(
        "--budget",
        "1 to 3600",
        &["0", "0.5", "3601", "-1", "NaN", "inf", "x"],
    )
}];

pub(super) const STEP_FLAGS: &[Flag] = &[
    Flag {
        draws: Draws::These(&["1", "2", "0", "16777216", "16777217", "-1"]),
        ..flag(
            "--batch-size",
            "1 to 16777216",
            &["0", "16777217", "-1", "x"],
        )
    },
    Flag {
        draws: Draws::These(&["1", "2", "0", "1000001", "-1"]),
        ..flag("--steps", "1 to 1000000", &["0", "1000001", "-1", "x"])
    },
    Flag {
        draws: Draws::These(&["1", "2", "0", "101", "-1"]),
        ..flag("--rounds", "1 to 100", &["0", "101", "-1", "x"])
    },
    SEQ_LEN,
];

pub(super) const GUI_FLAGS: &[Flag] = &[
    flag("--steps", COUNT, COUNT_BAD),
    flag(
        "--batch-size",
        "1 to 16777216",
        &["0", "16777217", "-1", "x"],
    ),
    Flag {
        draws: Draws::These(&["1280x820", "200x200", "10x10", "8193x300", "x"]),
        ..flag(
            "--size",
            "WIDTHxHEIGHT, each 200 to 8192",
            &["10x10", "8193x300", "x", "300x", "-1x300", "0x0"],
        )
    },
];

/// Flags that take a value that is not a number (names, paths, lists of names).
pub(super) const DEVICE: &[&str] = &[
    "--backend",
    "--adapter",
    "--f16-storage",
    "--tensor-cores",
    "--tuning",
];
pub(super) const RUN_OTHER: &[&str] = &[
    "--model",
    "--dataset",
    "--tokenizer",
    "--loss",
    "--optimizer",
    "--init",
    "--scaler",
    "--buffers-on-skip",
    "--padding-mode",
    "--flip",
    "--tta",
    "--lr-schedule",
    "--attention",
    "--numerics",
    "--keep-f32",
];

/// A subcommand: its words, its numeric flags, and its other value-taking flags.
pub(super) struct Subcommand {
    pub(super) words: &'static [&'static str],
    pub(super) numeric: &'static [&'static [Flag]],
    pub(super) other: &'static [&'static [&'static str]],
}

pub(super) const SUBCOMMANDS: &[Subcommand] = &[
    Subcommand {
        words: &["train"],
        numeric: &[RUN_FLAGS, TRAIN_FLAGS],
        other: &[
            RUN_OTHER,
            DEVICE,
            &[
                "--precision",
                "--save",
                "--resume",
                "--metrics",
                "--export-hf",
            ],
        ],
    },
    Subcommand {
        words: &["compare"],
        numeric: &[RUN_FLAGS],
        other: &[RUN_OTHER, DEVICE, &["--precisions", "--report", "--png"]],
    },
    Subcommand {
        words: &["sample"],
        numeric: &[SAMPLE_FLAGS],
        other: &[
            DEVICE,
            &[
                "--checkpoint",
                "--tokenizer",
                "--prompt",
                "--precision",
                "--attention",
            ],
        ],
    },
    Subcommand {
        words: &["bench", "matmul"],
        numeric: &[MATMUL_FLAGS],
        other: &[DEVICE, &["--kernel", "--storages"]],
    },
    Subcommand {
        words: &["bench", "tune"],
        numeric: &[TUNE_FLAGS],
        other: &[DEVICE, &["--out"]],
    },
    Subcommand {
        words: &["bench", "step"],
        numeric: &[STEP_FLAGS],
        other: &[
            DEVICE,
            &["--models", "--precisions", "--attention", "--numerics"],
        ],
    },
    Subcommand {
        words: &["plan"],
        numeric: &[RUN_FLAGS],
        other: &[RUN_OTHER, DEVICE, &["--precision"]],
    },
    Subcommand {
        words: &["gui"],
        numeric: &[GUI_FLAGS],
        other: &[DEVICE, &["--modes", "--model", "--dataset"]],
    },
    Subcommand {
        words: &["info"],
        numeric: &[],
        other: &[&["--backend", "--f16-storage", "--tensor-cores", "--tuning"]],
    },
];

impl Subcommand {
    pub(super) fn flags(&self) -> impl Iterator<Item = &Flag> {
        self.numeric.iter().flat_map(|list| list.iter())
    }

    pub(super) fn name(&self) -> String {
        self.words.join(" ")
    }
}
