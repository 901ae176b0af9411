//! Kernels: a compiled pipeline (cached per shader variant) plus a bind group made once.
//!
//! Ops build a [`Kernel`] at plan time and then only [`Kernel::encode`] it into compute
//! passes, step after step; nothing is created inside a step.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::alloc::Binding;
use super::context::CachedPipeline;
use super::kernel_checks::{Analysis, analyse, check_aliasing};
use super::{GpuBuffer, GpuContext, human_bytes};
use crate::dtype::Storage;
use crate::error::{Error, Result};
use crate::shader::{ShaderDecl, Variant};

/// Which shader and entry point a kernel runs, plus compile-time constants
/// (tile sizes and the like) injected as WGSL `const`s.
#[derive(Clone, Debug)]
pub struct KernelDesc {
    pub shader: &'static ShaderDecl,
    pub entry: &'static str,
    pub consts: Vec<(&'static str, String)>,
    /// Every index of this kernel is proven in range (an invariant its shader states, held by
    /// its tests): natively it is built without wgpu's runtime checks (no index clamping, no
    /// loop bounding, no division guards). The browser always keeps them, and so does
    /// [`CHECKED_KERNELS_ENV`] set to 1.
    pub trusted: bool,
}

/// Set to 1, every kernel is built with wgpu's runtime checks, trusted ones too.
pub const CHECKED_KERNELS_ENV: &str = "WEBGPU_AMP_CHECKED_KERNELS";

/// Whether a kernel marked trusted is built without runtime checks here.
fn trusted_here(trusted: bool) -> bool {
    if !trusted || cfg!(target_arch = "wasm32") {
        return false;
    }
    #[cfg(not(target_arch = "wasm32"))]
    if std::env::var(CHECKED_KERNELS_ENV).is_ok_and(|v| v == "1") {
        return false;
    }
    true
}

impl KernelDesc {
    pub fn new(shader: &'static ShaderDecl, entry: &'static str) -> Self {
        Self {
            shader,
            entry,
            consts: Vec::new(),
            trusted: false,
        }
    }

    pub fn with_const(mut self, name: &'static str, value: impl ToString) -> Self {
        self.consts.push((name, value.to_string()));
        self
    }
}

/// One binding of a kernel, looked up by the name of the WGSL global it binds.
pub enum Arg<'a> {
    /// Bytes of a uniform struct; the kernel owns a small uniform buffer made from them.
    Uniform(&'a [u8]),
    /// A typed range of a buffer (what a tensor binds: [`crate::tensor::Tensor::arg`]); its
    /// storage also picks the variant of the `#tensor` declaration it binds.
    Typed {
        buffer: &'a Arc<GpuBuffer>,
        offset: u64,
        /// Bytes bound (a multiple of 4).
        size: u64,
        storage: Storage,
    },
    /// A whole raw buffer (scaler state, counters, ...).
    Buffer(&'a Arc<GpuBuffer>),
    /// A byte range of a raw buffer (a piece of a flat parameter buffer:
    /// [`GpuContext::flat_pieces`]); `offset` a multiple of the adapter's storage offset
    /// alignment, `size` of 4.
    Range {
        buffer: &'a Arc<GpuBuffer>,
        offset: u64,
        size: u64,
    },
}

/// Workgroup grid for `threads` invocations of a 1-D kernel with `wg` threads per group,
/// folded into two dimensions when it passes the 65535-groups-per-dimension limit. Kernels
/// recover the flat index as `gid.x + gid.y * num_workgroups.x * WG`.
pub fn grid_1d(threads: usize, wg: u32) -> [u32; 3] {
    let groups = threads.div_ceil(wg as usize).max(1) as u32;
    if groups <= 65535 {
        [groups, 1, 1]
    } else {
        let y = groups.div_ceil(65535);
        [groups.div_ceil(y), y, 1]
    }
}

/// A ready-to-dispatch kernel: pipeline, bind group and grid size.
pub struct Kernel {
    pub label: String,
    pipeline: Arc<CachedPipeline>,
    /// None on a dry context.
    bind_group: Option<wgpu::BindGroup>,
    workgroups: [u32; 3],
    uniform: Option<Arc<GpuBuffer>>,
    /// Buffers the bind group refers to, kept alive (and counted) as long as the kernel.
    _keep: Vec<Arc<GpuBuffer>>,
    /// The ranges (buffer, offset, bytes) its writable bindings cover, its followers' too;
    /// the buffer by address (`_keep` holds it: a second strong count would make the
    /// transient-activation count, `nn::transient`, see one use too many).
    writes: Vec<(usize, u64, u64)>,
    /// Dispatches that follow this one, in order, wherever it is encoded (split-K's
    /// reduction after its partial sums: [`Kernel::then`]).
    followers: Vec<Kernel>,
    /// Built without wgpu's runtime checks ([`KernelDesc::trusted`]).
    trusted: bool,
}

impl Kernel {
    pub fn encode(&self, pass: &mut wgpu::ComputePass<'_>) {
        // A dry context's kernels have no pipeline: nothing backs their buffers.
        let (Some(pipeline), Some(bind_group)) = (&self.pipeline.pipeline, &self.bind_group) else {
            return;
        };
        if self.workgroups.contains(&0) {
            return;
        }
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, bind_group, &[]);
        pass.dispatch_workgroups(self.workgroups[0], self.workgroups[1], self.workgroups[2]);
        for next in &self.followers {
            next.encode(pass);
        }
    }

    /// This kernel followed by `next` as one: encoding it records both dispatches in order
    /// (a dispatch sees every write of the ones before it in the pass).
    pub fn then(mut self, next: Kernel) -> Kernel {
        self._keep.extend(next._keep.iter().cloned());
        self.writes.extend(next.writes.iter().cloned());
        self.label = format!("{} + {}", self.label, next.label);
        self.followers.push(next);
        self
    }

    /// Whether this kernel's pipeline was built without runtime checks (a trusted kernel,
    /// natively); followers are asked on their own.
    pub fn is_trusted(&self) -> bool {
        self.trusted
    }

    /// Dispatches one encode records (1, or more for a kernel with followers).
    pub fn dispatches(&self) -> usize {
        1 + self.followers.iter().map(Kernel::dispatches).sum::<usize>()
    }

    /// Every buffer this kernel binds.
    pub fn buffers(&self) -> &[Arc<GpuBuffer>] {
        &self._keep
    }

    /// Whether a dispatch of this kernel (or of a follower) may write any of the `bytes`
    /// bytes of `buffer` from `offset`: a writable binding covers one of them.
    pub fn may_write(&self, buffer: &Arc<GpuBuffer>, offset: u64, bytes: u64) -> bool {
        self.writes.iter().any(|&(b, at, size)| {
            b == Arc::as_ptr(buffer) as usize && at < offset + bytes && offset < at + size
        })
    }

    /// Rewrite the uniform parameters (queued; takes effect at the next submit), the
    /// followers' too (they share the uniform block of the kernel they follow).
    pub fn set_uniform(&self, ctx: &GpuContext, bytes: &[u8]) {
        if let Some(u) = &self.uniform {
            ctx.write_buffer(u, 0, bytes);
        }
        for next in &self.followers {
            next.set_uniform(ctx, bytes);
        }
    }
}

impl GpuContext {
    /// Compute pipelines created on this context so far (each with its shader module; the
    /// cache makes one per shader variant and entry point). With the allocator's buffer
    /// and bind-group counts, what a long run must stop creating after warm-up.
    pub fn pipelines_created(&self) -> u64 {
        self.pipelines.created.load(Ordering::Relaxed)
    }

    /// Record `kernels` into one compute pass of one command buffer and submit it.
    pub fn run(&self, kernels: &[&Kernel]) {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("run") });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("run"),
                timestamp_writes: None,
            });
            for k in kernels {
                k.encode(&mut pass);
            }
        }
        self.queue.submit([encoder.finish()]);
    }

    /// Build a kernel: specialise the shader for the storages of the tensors bound, compile
    /// it once (cached), and make its bind group.
    pub fn kernel(
        &self,
        desc: &KernelDesc,
        args: &[(&str, Arg<'_>)],
        workgroups: [u32; 3],
    ) -> Result<Kernel> {
        let max = self.caps.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max) {
            return Err(Error::Unsupported(format!(
                "kernel {}::{} needs {:?} workgroups, over the device limit of {max} per dimension; use a smaller batch",
                desc.shader.name, desc.entry, workgroups
            )));
        }
        let storages: Vec<(&str, Storage)> = args
            .iter()
            .filter_map(|(name, arg)| match arg {
                Arg::Typed { storage, .. } => Some((*name, *storage)),
                _ => None,
            })
            .collect();
        // Without shader-f16 a native f16 shader fails wgpu validation with a panic; say so
        // as an error instead (on GL, or DX12 without DXC, f16 must be stored packed).
        if !self.device.features().contains(wgpu::Features::SHADER_F16)
            && let Some((name, _)) = storages.iter().find(|(_, s)| *s == Storage::F16)
        {
            return Err(Error::Unsupported(format!(
                "kernel {}::{}: tensor `{name}` is stored as native f16 but adapter `{}` has no shader-f16; \
                 make f16 tensors with this context's storage (GpuContext::storage_for) or use packed f16",
                desc.shader.name, desc.entry, self.report.name
            )));
        }
        let variant = Variant::new(desc.shader, &storages, &desc.consts)?;
        let cached = self.pipeline(&variant, desc.entry, trusted_here(desc.trusted))?;

        let mut keep = Vec::new();
        let mut uniform = None;
        let mut entries = Vec::new();
        // Resolve every used binding to a buffer range first, then borrow them for wgpu.
        let mut ranges: Vec<(u32, Arc<GpuBuffer>, u64, u64)> = Vec::new();
        for (name, binding) in &cached.used_bindings {
            let Some((_, arg)) = args.iter().find(|(n, _)| n == name) else {
                return Err(Error::Shader {
                    name: format!("{}::{}", desc.shader.name, desc.entry),
                    message: format!("binding `{name}` is used by the shader but was not given"),
                });
            };
            match arg {
                Arg::Uniform(bytes) => {
                    let buf = self.alloc(
                        &format!("{}::{}.{}", desc.shader.name, desc.entry, name),
                        bytes.len() as u64,
                        wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    );
                    self.write_buffer(&buf, 0, bytes);
                    ranges.push((*binding, buf.clone(), 0, buf.size()));
                    uniform = Some(buf);
                }
                Arg::Typed {
                    buffer,
                    offset,
                    size,
                    ..
                }
                | Arg::Range {
                    buffer,
                    offset,
                    size,
                } => ranges.push((*binding, (*buffer).clone(), *offset, *size)),
                Arg::Buffer(b) => ranges.push((*binding, (*b).clone(), 0, b.size())),
            }
        }
        let bound: Vec<_> = cached
            .used_bindings
            .iter()
            .zip(&ranges)
            .filter(|((name, _), _)| {
                args.iter()
                    .any(|(n, a)| n == name && !matches!(a, Arg::Uniform(_)))
            })
            .map(|((name, _), (_, buf, offset, size))| {
                (
                    name.as_str(),
                    buf,
                    *offset,
                    *size,
                    cached.writable.contains(name),
                )
            })
            .collect();
        check_aliasing(&format!("{}::{}", desc.shader.name, desc.entry), &bound)?;
        let writes = bound
            .iter()
            .filter(|b| b.4)
            .map(|(_, buf, offset, size, _)| (Arc::as_ptr(buf) as usize, *offset, *size))
            .collect();
        // Over a limit wgpu reports a validation error (a panic by default); say which
        // tensor of which kernel, how big, and which limit, before touching wgpu. A dry
        // context only records the largest binding: its plan reports the limits.
        for (name, arg) in args {
            let (buffer, buffer_size, binding_size) = match arg {
                Arg::Typed { buffer, size, .. } | Arg::Range { buffer, size, .. } => {
                    (*buffer, buffer.size(), *size)
                }
                Arg::Buffer(b) => (*b, b.size(), b.size()),
                Arg::Uniform(_) => continue,
            };
            let kernel = format!("{}::{}", desc.shader.name, desc.entry);
            self.allocator.record_binding(Binding {
                bytes: binding_size,
                buffer: buffer.label().to_string(),
                kernel: kernel.clone(),
                name: name.to_string(),
            });
            if self.is_dry() {
                continue;
            }
            let limit = self.caps.max_buffer_size;
            if buffer_size > limit {
                return Err(Error::Resource {
                    message: format!(
                        "`{name}` of kernel {kernel} ({}) needs a {} buffer; this adapter allows {} per buffer (max_buffer_size)",
                        buffer.label(),
                        human_bytes(buffer_size),
                        human_bytes(limit)
                    ),
                    needed: buffer_size,
                    limit,
                });
            }
            let limit = self.caps.max_storage_buffer_binding_size;
            if binding_size > limit {
                return Err(Error::Resource {
                    message: format!(
                        "`{name}` of kernel {kernel} ({}) binds {} of storage; this adapter allows {} per storage binding (max_storage_buffer_binding_size)",
                        buffer.label(),
                        human_bytes(binding_size),
                        human_bytes(limit)
                    ),
                    needed: binding_size,
                    limit,
                });
            }
        }
        for (binding, buf, offset, size) in &ranges {
            entries.push(wgpu::BindGroupEntry {
                binding: *binding,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: buf.raw(),
                    offset: *offset,
                    size: wgpu::BufferSize::new(*size),
                }),
            });
            keep.push(buf.clone());
        }
        let bind_group = cached.pipeline.as_ref().map(|pipeline| {
            self.allocator.count_bind_group();
            self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(desc.entry),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            })
        });
        Ok(Kernel {
            label: format!("{}::{}", desc.shader.name, desc.entry),
            trusted: trusted_here(desc.trusted),
            pipeline: cached,
            bind_group,
            workgroups,
            uniform,
            _keep: keep,
            writes,
            followers: Vec::new(),
        })
    }

    fn pipeline(
        &self,
        variant: &Variant,
        entry: &str,
        trusted: bool,
    ) -> Result<Arc<CachedPipeline>> {
        let key = format!(
            "{}#{}#{}",
            variant.key(),
            entry,
            if trusted { "trusted" } else { "checked" }
        );
        if let Some(p) = self.pipelines.map.lock().expect("pipeline cache").get(&key) {
            if !std::ptr::eq(p.source, variant.decl.source) && p.source != variant.decl.source {
                return Err(Error::Shader {
                    name: variant.shader.into(),
                    message: "two different shaders are declared under this name".into(),
                });
            }
            return Ok(p.clone());
        }
        let source = variant.specialise()?;
        let Analysis {
            used: used_bindings,
            storage_buffers,
            writable,
        } = analyse(variant, entry, &source)?;
        // Over the limit wgpu panics at pipeline creation; say which kernel and why instead.
        let max = self.caps.max_storage_buffers_per_shader_stage;
        if storage_buffers > max {
            return Err(Error::Unsupported(format!(
                "kernel {}::{entry} binds {storage_buffers} storage buffers but adapter `{}` allows {max} per shader stage \
                 (WebGPU guarantees 8; some GLES 3.1 devices have 4): use its Vulkan backend",
                variant.label(),
                self.report.name
            )));
        }
        let pipeline = (!self.is_dry()).then(|| {
            let desc = wgpu::ShaderModuleDescriptor {
                label: Some(&variant.label()),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            };
            let sm = if trusted {
                // SAFETY: only kernels whose shaders state an invariant that keeps every index
                // in range, every loop finite and every divisor non-zero are marked trusted
                // (KernelDesc::trusted), and their tests hold them to it; never on the web.
                unsafe {
                    self.device
                        .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
                }
            } else {
                self.device.create_shader_module(desc)
            };
            self.pipelines.created.fetch_add(1, Ordering::Relaxed);
            self.device
                .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(entry),
                    layout: None,
                    module: &sm,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                })
        });
        let cached = Arc::new(CachedPipeline {
            source: variant.decl.source,
            pipeline,
            used_bindings,
            writable,
            variant: variant.clone(),
            entry: entry.to_string(),
            trusted,
        });
        self.pipelines
            .map
            .lock()
            .expect("pipeline cache")
            .insert(key, cached.clone());
        Ok(cached)
    }
}
