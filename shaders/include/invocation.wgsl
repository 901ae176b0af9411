// Where an invocation of a tensor-core kernel runs: the builtins of its entry point, its one
// parameter (shaders/include/coop_gemm.wgsl's GEMMs, the flash_coop_* kernels): the workgroup
// and their count, the local index, the subgroup id, the lane within it and the subgroup's size.
struct Invocation {
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) tid: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) lanes: u32,
}
