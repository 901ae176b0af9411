//! Variant grids: which storages a shader's tensors may meet in, written as a few products
//! instead of nested loops in every dispatcher.
//!
//! ```ignore
//! // layernorm: activations in any storage, weight and bias in theirs or in f32.
//! Grid::new()
//!     .each(&["x", "y", "dy", "dx"])
//!     .like_or_f32(&["weight", "bias"], "x")
//!     .variants(shader, &[])
//! ```

use super::{ShaderDecl, Variant};
use crate::dtype::Storage;
use crate::error::Result;

/// A storage for some of a shader's `#tensor`s (the others are f32): one row of a [`Grid`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment(Vec<(&'static str, Storage)>);

impl Assignment {
    /// The storage of `tensor` (f32 when this assignment does not name it).
    pub fn storage(&self, tensor: &str) -> Storage {
        self.0
            .iter()
            .find(|(n, _)| *n == tensor)
            .map_or(Storage::F32, |(_, s)| *s)
    }

    fn with(&self, tensors: &[&'static str], storage: Storage) -> Assignment {
        let mut next = self.clone();
        next.0.extend(tensors.iter().map(|t| (*t, storage)));
        next
    }

    /// Both native and packed f16: never in one call (a context stores f16 one way).
    fn mixes_f16_storages(&self) -> bool {
        let has = |s| self.0.iter().any(|(_, x)| *x == s);
        has(Storage::F16) && has(Storage::F16Packed)
    }
}

/// Storage assignments, built up one group of tensors at a time; each becomes a [`Variant`].
#[derive(Clone, Debug)]
pub struct Grid {
    rows: Vec<Assignment>,
}

impl Default for Grid {
    fn default() -> Self {
        Self::new()
    }
}

impl Grid {
    /// One assignment naming no tensor: every tensor f32 (a shader with no `#tensor` at all,
    /// or one that binds f32 buffers only, has this one variant).
    pub fn new() -> Grid {
        Grid {
            rows: vec![Assignment::default()],
        }
    }

    /// Every assignment once per storage in `storages`, given to all of `tensors` together.
    pub fn each_of(self, tensors: &[&'static str], storages: &[Storage]) -> Grid {
        let rows = self
            .rows
            .iter()
            .flat_map(|row| storages.iter().map(|s| row.with(tensors, *s)))
            .collect();
        Grid { rows }
    }

    /// Every assignment once per storage (f32, native f16, packed f16, bf16) of `tensors`.
    pub fn each(self, tensors: &[&'static str]) -> Grid {
        self.each_of(tensors, &Storage::ALL)
    }

    /// Every assignment with `tensors` in the storage of `like`, and again in f32 (when that
    /// differs): what autocast keeps in f32 (master weights, their gradients, losses) beside
    /// activations in a low-precision storage.
    pub fn like_or_f32(self, tensors: &[&'static str], like: &str) -> Grid {
        let rows = self
            .rows
            .iter()
            .flat_map(|row| {
                let storage = row.storage(like);
                let mut next = vec![row.with(tensors, storage)];
                if storage != Storage::F32 {
                    next.push(row.with(tensors, Storage::F32));
                }
                next
            })
            .collect();
        Grid { rows }
    }

    /// The assignments of both grids (a shader whose entry points bind different tensors).
    pub fn or(mut self, other: Grid) -> Grid {
        self.rows.extend(other.rows);
        self
    }

    /// Without the assignments that mix native and packed f16, which no call can make.
    pub fn one_f16_storage(mut self) -> Grid {
        self.rows.retain(|row| !row.mixes_f16_storages());
        self
    }

    pub fn rows(&self) -> &[Assignment] {
        &self.rows
    }

    /// One variant per assignment, each with `consts`.
    pub fn variants(
        &self,
        shader: &'static ShaderDecl,
        consts: &[(&'static str, String)],
    ) -> Result<Vec<Variant>> {
        self.variants_with(shader, |_| vec![consts.to_vec()])
    }

    /// One variant per assignment and per set of constants `consts` gives for it (tile shapes
    /// that depend on the storages, kernel sizes, transposes).
    pub fn variants_with(
        &self,
        shader: &'static ShaderDecl,
        consts: impl Fn(&Assignment) -> Vec<Vec<(&'static str, String)>>,
    ) -> Result<Vec<Variant>> {
        let mut variants = Vec::new();
        for row in &self.rows {
            for c in consts(row) {
                variants.push(Variant::new(shader, &row.0, &c)?);
            }
        }
        Ok(variants)
    }
}

/// The grid of an op whose low-precision tensors may have f32 companions: `each` together in
/// every storage, with `like_or_f32` in the storage of `each[0]` and again in f32 (master
/// weights, f32 gradients and outputs beside activations in a low-precision storage).
pub fn each_like_or_f32(
    shader: &'static ShaderDecl,
    each: &[&'static str],
    like_or_f32: &[&'static str],
) -> Result<Vec<Variant>> {
    Grid::new()
        .each(each)
        .like_or_f32(like_or_f32, each[0])
        .variants(shader, &[])
}

/// A shader with one variant, every tensor f32 (a [`ShaderDecl::variants`] for shaders that
/// bind f32 buffers only).
pub fn f32_only(shader: &'static ShaderDecl) -> Result<Vec<Variant>> {
    Grid::new().variants(shader, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(grid: &Grid, tensors: &[&str]) -> Vec<Vec<&'static str>> {
        grid.rows()
            .iter()
            .map(|r| tensors.iter().map(|t| r.storage(t).name()).collect())
            .collect()
    }

    #[test]
    fn products_follow_the_storages_of_their_tensors() {
        let g = Grid::new().each(&["x", "y"]).like_or_f32(&["w"], "x");
        assert_eq!(
            names(&g, &["x", "y", "w"]),
            [
                ["f32", "f32", "f32"],
                ["f16", "f16", "f16"],
                ["f16", "f16", "f32"],
                ["f16packed", "f16packed", "f16packed"],
                ["f16packed", "f16packed", "f32"],
                ["bf16", "bf16", "bf16"],
                ["bf16", "bf16", "f32"],
            ]
        );
        let pairs = Grid::new().each(&["a"]).each(&["b"]).one_f16_storage();
        assert_eq!(pairs.rows().len(), 16 - 2);
        assert!(
            !names(&pairs, &["a", "b"]).contains(&vec!["f16", "f16packed"]),
            "native and packed f16 never meet"
        );
        let either = Grid::new().each(&["a"]).or(Grid::new().each(&["b"]));
        assert_eq!(either.rows().len(), 8);
        assert_eq!(Grid::new().rows().len(), 1);
    }
}
