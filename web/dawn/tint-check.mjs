// Every WGSL variant the browser build can select, through Chrome's WebGPU engine: Dawn, whose
// WGSL compiler is Tint (npm `webgpu`, the same Dawn and Tint as Chrome). For each variant
// (`webgpu-amp shaders --browser`: WGSL plus each entry point's bindings) it creates the
// shader module, then for each entry point the compute pipeline with `layout: "auto"` (as
// every kernel is made) and a bind group with the bindings the Rust side binds (by name and
// index, each buffer of the size the shader needs). Any Tint error, pipeline-creation error or validation error fails the check
// (scripts/tint-check.sh reads them from the output: see below).
//
//   node tint-check.mjs VARIANTS.json [--shard I/N] [--only SHADER] [--full] [--break-builtins]
//
// By default a variant is checked when it brings a storage combination or a constant set
// its shader has not had yet, so every storage combination and every constant set of each
// shader goes through Tint at least once (the matmul's grid is their product, 78 x 41: 3198
// variants, 118 checked; naga validates and translates all of them in
// tests/shader_portability.rs). --full checks every variant (about 12 minutes of Dawn on a
// 2-core machine, against about 2).
//
// --shard I/N checks every N-th variant from the I-th (0-based), so N processes share the work;
// --only SHADER only the variants of that shader (`layernorm`: a quick check).
// --break-builtins rewrites layernorm_forward to take its builtins as one struct, the form
// commit a646de6 removed because Tint rejects it (naga accepts it): the check must fail then.
import fs from 'node:fs';
import { create, globals } from 'webgpu';

Object.assign(globalThis, globals);

const args = process.argv.slice(2);
const file = args.find((a) => !a.startsWith('--'));
const breakBuiltins = args.includes('--break-builtins');
const shardArg = args[args.indexOf('--shard') + 1];
const [shard, shards] = args.includes('--shard') ? shardArg.split('/').map(Number) : [0, 1];
if (!file) {
  console.error('usage: node tint-check.mjs VARIANTS.json [--break-builtins]');
  process.exit(2);
}
const fail = (message) => {
  console.error(`tint-check: FAILED: ${message}`);
  process.exit(1);
};

const all = JSON.parse(fs.readFileSync(file, 'utf8')).variants;
if (!all?.length) fail(`no variants in ${file}`);
if (!(shards >= 1 && shard >= 0 && shard < shards)) fail(`bad --shard ${shardArg}`);

// Held for the whole run: the GPU object owns Dawn's instance, which the package keeps
// processing events on; collected, it takes the instance with it (a crash in ProcessEvents).
const gpu = create([]);
const adapter = await gpu.requestAdapter();
if (!adapter) fail('Dawn found no adapter (run under Mesa 26\'s lavapipe: scripts/lavapipe-coop.sh run)');
const needed = ['shader-f16', 'subgroups'];
const missing = needed.filter((f) => !adapter.features.has(f));
if (missing.length) fail(`adapter ${adapter.info.description || adapter.info.device} lacks ${missing.join(', ')}`);
// The browser's default limits (WebGPU's guaranteed minimums), but for the workgroup memory:
// the browser build asks for all its adapter has (gpu/context.rs: required_limits), and an
// adapter class's kernel table takes up to 32 KiB (NVIDIA's and AMD's SIMT tiles) where the
// device gives it, else the 16 KiB tiles of other GPUs (gpu/tuning_file.rs). Every variant
// is checked against the 32 KiB that Chrome gives desktop GPUs and Dawn gives lavapipe.
const workgroupBytes = adapter.limits.maxComputeWorkgroupStorageSize;
if (workgroupBytes < 32768) fail(`adapter offers ${workgroupBytes} B of workgroup memory, not 32 KiB`);
const device = await adapter.requestDevice({
  requiredFeatures: needed,
  requiredLimits: { maxComputeWorkgroupStorageSize: 32768 },
});
console.log(`tint-check: Dawn on ${adapter.info.vendor} ${adapter.info.architecture} ` +
  `(${adapter.info.description}), features ${needed.join(', ')} enabled, default limits ` +
  'but 32 KiB of workgroup memory');

if (breakBuiltins) {
  const v = all.find((v) => v.wgsl.includes('fn layernorm_forward('));
  if (!v) fail('--break-builtins: no variant with layernorm_forward');
  v.wgsl = breakLayernorm(v.wgsl);
  v.label += ' (builtins as one struct, as before a646de6)';
}
const only = args.includes('--only') ? args[args.indexOf('--only') + 1] : null;
const full = args.includes('--full');
// A label is `shader[storages][constants]`.
const seen = new Set();
const bringsSomethingNew = (v) => {
  const [shader, storages, consts] = v.label.split('[');
  const keys = [`${shader}[${storages}`, `${shader}[][${consts}`];
  const fresh = keys.some((k) => !seen.has(k));
  keys.forEach((k) => seen.add(k));
  return fresh;
};
const pool = all.filter((v) => !only || v.label.startsWith(`${only}[`));
const chosen = pool.filter((v) => full || bringsSomethingNew(v));
const variants = chosen.filter((_, i) => i % shards === shard);
if (shard === 0) {
  console.log(`tint-check: ${chosen.length} of ${pool.length} variants ` +
    (full ? '(--full)' : '(each storage combination and constant set of each shader at least once; --full: all)'));
}

// One buffer per (binding, usage, size), shared by every bind group (a writable binding
// never shares one with another binding of its group).
const buffers = new Map();
function buffer(binding, type, size) {
  const bytes = Math.max(16, Math.ceil(size / 16) * 16);
  const key = `${binding}:${type}:${bytes}`;
  if (!buffers.has(key)) {
    const usage = type === 'uniform' ? GPUBufferUsage.UNIFORM : GPUBufferUsage.STORAGE;
    buffers.set(key, device.createBuffer({ size: bytes, usage }));
  }
  return buffers.get(key);
}

// Errors are not caught here but printed by Dawn as it delivers them (Tint's diagnostics
// included), which it does while the queue is awaited after each variant; every variant
// and entry point is announced on a `@@` line first, so scripts/tint-check.sh attributes
// each error to the line above it, and any line Dawn prints that is not expected fails.
let entries = 0;
let nativeF16 = 0;
const t0 = Date.now();
for (const [n, v] of variants.entries()) {
  console.log(`@@ variant ${v.label}`);
  const module = device.createShaderModule({ code: v.wgsl, label: v.label });
  nativeF16 += v.native_f16 ? 1 : 0;
  for (const e of v.entries) {
    entries += 1;
    console.log(`@@ entry ${v.label}#${e.name}`);
    // Synchronous creation: Dawn's createComputePipelineAsync crashes under this lavapipe.
    const pipeline = device.createComputePipeline({
      label: `${v.label}#${e.name}`,
      layout: 'auto',
      compute: { module, entryPoint: e.name },
    });
    // The bind group the Rust side makes (crate::gpu::Kernel): the bindings the entry point
    // uses, by index, against the layout Tint derived; a mismatch of index, buffer type or
    // size is a validation error.
    if (e.bindings.length) {
      device.createBindGroup({
        layout: pipeline.getBindGroupLayout(0),
        entries: e.bindings.map((b) => ({
          binding: b.binding,
          resource: { buffer: buffer(b.binding, b.type, b.min_size) },
        })),
      });
    }
  }
  await device.queue.onSubmittedWorkDone();
  if ((n + 1) % 100 === 0) {
    console.log(`tint-check: ${n + 1}/${variants.length} variants, ${entries} pipelines ` +
      `(${((Date.now() - t0) / 1000).toFixed(0)} s)`);
  }
}
await device.queue.onSubmittedWorkDone();
const secs = ((Date.now() - t0) / 1000).toFixed(1);
console.log(`@@ done ${variants.length} ${nativeF16} ${entries} ${secs}`);
process.exit(0);

// layernorm_forward with its three builtins as one struct parameter (pre-a646de6 form).
function breakLayernorm(wgsl) {
  const re = /fn layernorm_forward\((.*)\)\s*\{/;
  const m = wgsl.match(re);
  if (!m) fail('--break-builtins: layernorm_forward has an unexpected form');
  const params = m[1].split(/,\s*(?=@)/).map((p) => p.trim().replace(/,$/, '')).filter(Boolean);
  const names = params.map((p) => p.match(/(\w+)\s*:/)[1]);
  const struct = `struct BrokenInvocation {\n${params.map((p) => `    ${p},`).join('\n')}\n}\n`;
  const body = names.map((n) => `    let ${n} = at.${n};`).join('\n');
  return struct + wgsl.replace(re, `fn layernorm_forward(at: BrokenInvocation) {\n${body}`);
}
