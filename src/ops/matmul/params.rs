//! The uniform of every matmul body ([`Params`], shared with the WGSL), apart from the launch
//! that fills it so that the shader declarations beside the bodies do not reach the launch.

crate::wgsl_struct! {
    pub(super) struct Params {
        pub(super) m: u32,
        pub(super) n: u32,
        pub(super) k: u32,
        /// Split-K: the depth of each split (the grid's z walks the splits), and how many.
        pub(super) k_split: u32,
        /// Layouts (elements): offset and row stride of a, b and c.
        pub(super) a_off: u32,
        pub(super) a_ld: u32,
        pub(super) b_off: u32,
        pub(super) b_ld: u32,
        pub(super) c_off: u32,
        pub(super) c_ld: u32,
        /// Batch: z = (z0, z1), flat zf = z0 * batch_inner + z1, zf < batches. The grid's z
        /// dimension walks zf; past 65535 batches the rest folds into y (y = m tile + m_tiles * hi).
        pub(super) batch_inner: u32,
        pub(super) batches: u32,
        pub(super) m_tiles: u32,
        pub(super) a_s0: u32,
        pub(super) a_s1: u32,
        pub(super) b_s0: u32,
        pub(super) b_s1: u32,
        pub(super) c_s0: u32,
        pub(super) c_s1: u32,
        /// `matmul_direct_narrow`: threads per row group (a power of two); 0 for other bodies.
        pub(super) lanes: u32,
        pub(super) splits: u32,
        pub(super) _pad0: u32,
        pub(super) _pad1: u32,
        pub(super) _pad2: u32,
    }
}
