// Training through the browser build on Chrome's WebGPU engine, headless: Node loads the wasm
// module the page loads (web/pkg, from scripts/build-web.sh: the same glue and wasm bytes)
// and calls its `train_headless` entry (src/app/web/headless.rs: the page's autorun, trained
// by the same app session, without a DOM), with `navigator.gpu` from Dawn (npm `webgpu`).
// Writes one JSON object, {adapter, features, f16_storage, runs: [{query, wall_secs, result}]},
// to OUT (not stdout: Dawn prints the errors it delivers there); progress goes to stderr.
// Exits 1 when Dawn offers no adapter or no `shader-f16` (with --f16-storage native), or
// when a run rejects. A run that fails while training resolves with `ok: false` and its
// error; the caller checks that (scripts/dawn-train.sh).
//
//   node train.mjs PKG_DIR OUT [--f16-storage auto|native|packed] QUERY...
//
// QUERY is the page's autorun query, e.g. autorun=1&precision=amp-f16&steps=6&model=gpt-tiny&batch=8.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { create, globals } from 'webgpu';

const args = process.argv.slice(2);
const fail = (message) => {
  console.error(`dawn-train: FAILED: ${message}`);
  process.exit(1);
};
const storageAt = args.indexOf('--f16-storage');
const f16Storage = storageAt >= 0 ? args.splice(storageAt, 2)[1] : 'auto';
const [pkg, out, ...queries] = args;
if (!pkg || !out || !queries.length) {
  console.error('usage: node train.mjs PKG_DIR OUT [--f16-storage auto|native|packed] QUERY...');
  process.exit(2);
}
const glue = path.join(pkg, 'webgpu_amp.js');
const wasm = path.join(pkg, 'webgpu_amp_bg.wasm');
for (const f of [glue, wasm]) {
  if (!fs.existsSync(f)) fail(`${f} is missing (build it: bash scripts/build-web.sh)`);
}

// What wgpu's WebGPU backend needs of a browser (wgpu 30.0.1, backend/webgpu.rs,
// get_browser_gpu_property): a global `Window` (it only checks that one is defined) and
// `navigator.gpu` on the global. Dawn's classes and constants (GPUBufferUsage, ...) come from
// the package's `globals`. Nothing else of a window is made: the headless entry uses no DOM.
Object.assign(globalThis, globals);
// Held for the whole run: the GPU object owns Dawn's instance (collected, it takes the
// instance with it).
const gpu = create([]);
globalThis.Window ??= class Window {};
Object.defineProperty(globalThis, 'navigator', {
  value: { gpu }, configurable: true, writable: true,
});

const adapter = await gpu.requestAdapter();
if (!adapter) fail('Dawn found no adapter (run under Mesa 26\'s lavapipe: scripts/lavapipe-coop.sh run)');
const features = [...adapter.features].sort();
const adapterName = `${adapter.info.vendor} ${adapter.info.architecture} (${adapter.info.description})`;
if (f16Storage === 'native' && !adapter.features.has('shader-f16')) {
  fail(`Dawn's adapter ${adapterName} offers no shader-f16 (features: ${features.join(', ')})`);
}
console.error(`dawn-train: Dawn on ${adapterName}; features ${features.join(', ')}`);

// The glue is an ES module whose folder has no package.json saying so: a copy of the folder
// with one lets Node import it unchanged.
const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'webgpu-amp-pkg-'));
fs.cpSync(pkg, copy, { recursive: true });
fs.writeFileSync(path.join(copy, 'package.json'), '{"type": "module"}\n');
const module = await import(pathToFileURL(path.join(copy, 'webgpu_amp.js')).href);
await module.default({ module_or_path: fs.readFileSync(wasm) });
fs.rmSync(copy, { recursive: true, force: true });
if (typeof module.train_headless !== 'function') fail(`${glue} has no train_headless export`);

const runs = [];
for (const query of queries) {
  const t0 = Date.now();
  console.error(`dawn-train: training ${query} (f16 storage ${f16Storage})`);
  let result;
  try {
    result = JSON.parse(await module.train_headless(query, f16Storage));
  } catch (e) {
    fail(`${query}: ${e?.message ?? e}`);
  }
  const secs = (Date.now() - t0) / 1000;
  console.error(`dawn-train: ${query}: ${result.steps} steps in ${secs.toFixed(1)} s, loss ` +
    `${result.first_loss} -> ${result.last_loss}, trained storage ${result.trained_storage}` +
    `${result.ok ? '' : `, error: ${result.error}`}`);
  runs.push({ query, wall_secs: secs, result });
}
fs.writeFileSync(out, JSON.stringify({ adapter: adapterName, features, f16_storage: f16Storage, runs }, null, 2));
process.exit(0);
