#!/usr/bin/env python3
"""The kernel report's analysis (scripts/kernel-report.sh runs it; standard library only).

  kernel_report.py rows    OUT.jsonl JOBS.tsv STATS.jsonl CLASS    one JSON row per pipeline
  kernel_report.py table   ROWS.jsonl... [--title T]               the Markdown table
  kernel_report.py gate    ROWS.jsonl INFO.json...                 the CI gate's verdict
  kernel_report.py summary ROWS.jsonl [LABEL]                      the headline rows (the large
                                                                   GEMM tiles, llama.cpp's, spills)

A row joins what the job was (its exact label: our kernel's shader, entry point and every
constant of its variant, or llama.cpp's shader and spec constants) with what the compiler
said: registers, spills, scratch, LDS, occupancy, instructions, static cycles (NVK), and the
main loop's mix counted from the disassembly (ACO's for RADV, NAK's for NVK). The main loop is
the innermost loop (a backward branch) holding the most MMA instructions, else the most FMAs.

Derived figures, per main-loop iteration:
  mma_density    MMA instructions / all instructions
  lds_b_per_mma  bytes one subgroup loads from LDS / MMA instructions (per-lane load widths
                 times the subgroup size)
"""
import json
import re
import sys
from collections import Counter

# ---- instruction classes ------------------------------------------------------------------

ACO_WIDTH = {'b128': 16, 'b96': 12, 'b64': 8, 'b32': 4, 'u16': 2, 'i16': 2, 'b16': 2,
             'u8': 1, 'i8': 1, 'b8': 1, 'dwordx4': 16, 'dwordx3': 12, 'dwordx2': 8, 'dword': 4,
             'short': 2, 'ushort': 2, 'byte': 1, 'ubyte': 1}


def aco_width(m):
    """Bytes per lane of an ACO memory instruction (2addr forms move two elements)."""
    parts = m.split('_')
    width = next((ACO_WIDTH[p] for p in reversed(parts) if p in ACO_WIDTH), 0)
    if 'd16' in parts:
        width = 2
    return width * (2 if '2addr' in m else 1)


def classify_aco(m):
    if m.startswith('v_wmma') or m.startswith('v_swmmac'):
        return 'mma', 0
    if re.match(r'v_(dual_)?(pk_)?(fma|fmac|fmamk|fmaak|dot2)', m):
        return 'fma', 0
    if m.startswith(('ds_load', 'ds_read')):
        return 'lds_load', aco_width(m)
    if m.startswith(('ds_store', 'ds_write')):
        return 'lds_store', aco_width(m)
    if m.startswith(('buffer_load', 'global_load', 'flat_load')):
        return 'global_load', aco_width(m)
    if m.startswith(('buffer_store', 'global_store', 'flat_store')):
        return 'global_store', aco_width(m)
    if m.startswith(('scratch_', 'buffer_atomic', 'global_atomic')):
        return 'other_mem', 0
    if m.startswith('s_barrier'):
        return 'barrier', 0
    if m.startswith('s_waitcnt'):
        return 'wait', 0
    if m.startswith(('s_cbranch', 's_branch')):
        return 'branch', 0
    return 'other', 0


NAK_WIDTH = {'b128': 16, 'b96': 12, 'b64': 8, 'b32': 4, 'u16': 2, 'i16': 2, 'b16': 2, 'u8': 1, 'i8': 1}


def classify_nak(m):
    parts = m.split('.')
    op = parts[0]
    width = next((NAK_WIDTH[p] for p in parts[1:] if p in NAK_WIDTH), 0)
    if op == 'hmma' or op == 'imma':
        return 'mma', 0
    if op in ('ffma', 'hfma2', 'dfma'):
        return 'fma', 0
    if op == 'ld' and 'shared' in parts:
        return 'lds_load', width
    if op == 'ldsm':  # ldmatrix: 4 bytes per lane per 8x8 matrix (.x1, .x2, .x4)
        return 'lds_load', 4 * int(next((p[1:] for p in parts if re.fullmatch(r'x\d', p)), '1'))
    if op == 'st' and 'shared' in parts:
        return 'lds_store', width
    if op in ('ld', 'ldg') and 'global' in parts:
        return 'global_load', width
    if op in ('st', 'stg') and 'global' in parts:
        return 'global_store', width
    if op == 'bar':
        return 'barrier', 0
    if op in ('bra',):
        return 'branch', 0
    return 'other', 0


# ---- disassembly parsing ----------------------------------------------------------------

def parse_aco(text):
    """Blocks in order as (name, [mnemonics]) and loops as lists of block indices (ACO lays a
    loop out contiguously: its header to the block that branches back)."""
    blocks, names = [], {}
    for line in text.splitlines():
        m = re.match(r'^(BB\d+):', line)
        if m:
            names[m.group(1)] = len(blocks)
            blocks.append((m.group(1), []))
            continue
        if not blocks or not line.startswith('\t'):
            continue
        ins = line.strip().split(';')[0].strip()
        if ins:
            blocks[-1][1].append(ins)
    loops = []
    for i, (_, body) in enumerate(blocks):
        for ins in body:
            p = ins.split()
            if p[0].startswith(('s_cbranch', 's_branch')) and len(p) > 1 and names.get(p[1], i + 1) <= i:
                loops.append(list(range(names[p[1]], i + 1)))
    return [(n, [i.split()[0] for i in b]) for n, b in blocks], loops


def parse_nak(text):
    """NAK's blocks (in order) and loops; a loop's blocks are the natural loop of a back edge
    (every block that reaches the latch without passing the header), from the predecessor
    lists NAK prints, since NAK may place blocks outside a loop between its header and latch."""
    blocks, preds = [], []
    for line in text.splitlines():
        m = re.match(r'^block(?:\.u)? (\d+) L\d+ \[([0-9, ]*)\]', line)
        if m:
            blocks.append((m.group(1), []))
            preds.append([int(p) for p in m.group(2).replace(',', ' ').split()])
            continue
        code = line.split('//')[0].strip()
        if not blocks or not code or code == '}':
            continue
        code = re.sub(r'^@!?\w+\s+', '', code)
        op = code.split(' = ', 1)[1].strip() if ' = ' in code else code
        if op.split():
            blocks[-1][1].append(op.split()[0])
    loops = []
    for header, ps in enumerate(preds):
        for latch in ps:
            if latch >= header:
                body, todo = {header}, [latch]
                while todo:
                    b = todo.pop()
                    if b not in body:
                        body.add(b)
                        todo.extend(preds[b])
                loops.append(sorted(body))
    return blocks, loops


def mix(mnemonics, classify):
    counts, widths = Counter(), Counter()
    for m in mnemonics:
        kind, width = classify(m)
        counts[kind] += 1
        if width:
            widths[f'{kind}:{width}'] += 1
    return counts, widths


def main_loop(blocks, loops, classify):
    best = None
    for loop in loops:
        body = [m for i in loop for m in blocks[i][1]]
        c, _ = mix(body, classify)
        key = (c['mma'], c['fma'], -len(body))
        if best is None or key > best[0]:
            best = (key, body)
    return best[1] if best else None


# ---- rows ---------------------------------------------------------------------------------

def consts_of(label):
    return dict(re.findall(r'([A-Z][A-Z0-9_]*)=([^,\]]+)', label))


def tile_of(shader, entry, c):
    """The tile in words, from the variant's constants (exact, not guessed)."""
    u = lambda k: int(c[k].rstrip('u'))
    if 'FRAG' in c and 'SG_M' in c:
        e = u('FRAG')
        bm, bn = u('SG_M') * u('FM') * e, u('SG_N') * u('FN') * e
        return f"{bm}x{bn} BK{u('BK')} ({u('SG_M')}x{u('SG_N')} subgroups of {u('FM')}x{u('FN')} {e}x{e} fragments)"
    if 'WG_X' in c and 'TM' in c and entry == 'matmul_tiled':
        bm, bn = u('WG_Y') * u('TM'), u('WG_X') * u('TN')
        return f"{bm}x{bn} BK{u('BK')} ({u('WG_X')}x{u('WG_Y')} threads of {u('TM')}x{u('TN')})"
    return ''


def variant_of(label):
    """Storages and the layout/variant switches of a label, short."""
    storages = label.split('][')[0].split('[', 1)[-1] if '[' in label else ''
    storages = ','.join(s for s in storages.split(',') if s and not s.endswith('=f32') or s.startswith('c='))
    c = consts_of(label)
    keys = ['TRANS_A', 'TRANS_B', 'ALIGNED', 'DIRECT_STORE', 'SPLIT_OUT', 'PASS', 'KIND']
    flags = ' '.join(f'{k}={c[k].rstrip("u")}' for k in keys if k in c)
    return f'{storages} {flags}'.strip()


def row(job, stat, klass, subgroup_hint):
    s = stat.get('stats', {})
    r = {'class': klass, 'id': job['id'], 'who': job['who'], 'kernel': job['kernel'],
         'variant': job['variant'], 'tile': job['tile'], 'label': job['label'],
         'used_by': job.get('used_by', []), 'ok': stat.get('result') == 0,
         'wave': stat.get('subgroup')}
    if klass == 'rdna3':
        r.update(regs=s.get('VGPRs'), sgprs=s.get('SGPRs'),
                 spills=(s.get('Spilled VGPRs') or 0) + (s.get('Spilled SGPRs') or 0),
                 scratch=s.get('Scratch size'), lds=s.get('LDS size'),
                 occupancy=s.get('Subgroups per SIMD'), instrs=s.get('Instructions'),
                 cycles=s.get('Latency'), hash=s.get('Driver pipeline hash'))
        ir, classify, parse = stat.get('ir', {}).get('Assembly'), classify_aco, parse_aco
    else:
        # NAK's "spills to reg" move predicates and uniform registers into GPRs (no memory);
        # its spills to memory are the register spills. SLM holds private arrays too.
        r.update(regs=s.get('Number of GPRs'), spills=s.get('Spills to memory') or 0,
                 spills_to_reg=s.get('Spills to reg') or 0, scratch=s.get('SLM size'), lds=None, occupancy=s.get('Max warps/SM'),
                 instrs=s.get('Instruction count'), cycles=s.get('Static cycle count'))
        ir, classify, parse = stat.get('ir', {}).get('NAK_assembly'), classify_nak, parse_nak
    if ir:
        blocks, loops = parse(open(ir, errors='replace').read())
        body = main_loop(blocks, loops, classify)
        whole, _ = mix([m for _, b in blocks for m in b], classify)
        r['mma_total'] = whole['mma']
        if body:
            c, w = mix(body, classify)
            wave = r['wave'] or subgroup_hint
            lds_bytes = sum(int(k.split(':')[1]) * n for k, n in w.items() if k.startswith('lds_load:'))
            r['loop'] = {'instrs': len(body), **c, 'widths': dict(sorted(w.items()))}
            r['mma_density'] = round(c['mma'] / len(body), 3) if c['mma'] else None
            r['lds_b_per_mma'] = round(lds_bytes * wave / c['mma']) if c['mma'] else None
    return r


def cmd_rows(out, jobs_tsv, stats_jsonl, klass):
    jobs = {}
    for line in open(jobs_tsv):
        f = line.rstrip('\n').split('\t')
        jobs[f[0]] = json.loads(f[5])
    stats = [json.loads(l) for l in open(stats_jsonl) if l.strip()]
    with open(out, 'w') as o:
        for st in stats:
            job = jobs[st['id']]
            o.write(json.dumps(row(job, st, klass, 64 if klass == 'rdna3' else 32)) + '\n')


# ---- table --------------------------------------------------------------------------------

def widths_text(w, kind):
    parts = [f"{n}x{k.split(':')[1]}B" for k, n in w.items() if k.startswith(kind + ':')]
    return '+'.join(parts) if parts else '0'


def cmd_table(paths):
    rows = [json.loads(l) for p in paths for l in open(p) if l.strip()]
    print('| class | who | kernel | variant | tile | wave | regs | spills | scratch B | LDS B '
          '| occupancy | instrs | static cycles | main loop: instrs / MMA / FMA | LDS loads | LDS stores '
          '| global loads | barriers / waits | MMA per loop instr | LDS B per MMA |')
    print('|' + '---|' * 20)
    for r in rows:
        if not r['ok']:
            print(f"| {r['class']} | {r['who']} | {r['kernel']} | {r['variant']} | {r['tile']} | FAILED TO COMPILE |" + ' |' * 14)
            continue
        lp = r.get('loop')
        loop = f"{lp['instrs']} / {lp.get('mma', 0)} / {lp.get('fma', 0)}" if lp else '-'
        ld = widths_text(lp['widths'], 'lds_load') if lp else '-'
        st = widths_text(lp['widths'], 'lds_store') if lp else '-'
        gl = widths_text(lp['widths'], 'global_load') if lp else '-'
        bw = f"{lp.get('barrier', 0)} / {lp.get('wait', 0)}" if lp else '-'
        occ = f"{r['occupancy']} {'waves/SIMD' if r['class'] == 'rdna3' else 'warps/SM'}"
        dash = lambda v: '-' if v is None else v
        print(f"| {r['class']} | {r['who']} | {r['kernel']} | {r['variant']} | {r['tile']} | {r['wave']} "
              f"| {r['regs']} | {r['spills']} | {dash(r['scratch'])} | {dash(r['lds'])} | {occ} | {r['instrs']} "
              f"| {dash(r['cycles'])} | {loop} | {ld} | {st} | {gl} | {bw} | {dash(r.get('mma_density'))} "
              f"| {dash(r.get('lds_b_per_mma'))} |")


# ---- gate ---------------------------------------------------------------------------------

def cmd_gate(rows_path, infos):
    rows = [json.loads(l) for l in open(rows_path) if l.strip()]
    failures = []
    for r in rows:
        if r['who'] != 'ours':
            continue
        if not r['ok']:
            failures.append(f"{r['class']}: {r['kernel']} [{r['label']}] did not compile")
        elif r['spills']:
            failures.append(f"{r['class']}: {r['kernel']} {r['tile']} spills {r['spills']} registers "
                            f"[{r['label']}] used by {', '.join(r['used_by'])}")
    for path in infos:
        info = json.load(open(path))
        klass, listed, used = info['class'], info['lists_f16_coop'], info['tensor_cores']
        if listed and not used.startswith('used'):
            failures.append(f"{klass}: the device lists f16 cooperative matrices but tensor cores are {used}")
        f16_steps = [r for r in rows if r['class'] == klass and r['who'] == 'ours' and 'amp-f16' in ' '.join(r['used_by'])]
        if listed and f16_steps and not any(r['kernel'].startswith(('matmul_coop', 'conv_coop')) for r in f16_steps):
            failures.append(f"{klass}: no amp-f16 step kernel runs on tensor cores")
        # The fused attention's SIMT body where its tensor-core body could run (every gate
        # preset's head size is within the tensor-core body's 64; the delta kernel serves both).
        for r in f16_steps:
            if listed and r['kernel'].startswith('flash_') and 'coop' not in r['kernel'] \
                    and not r['kernel'].endswith('_delta'):
                failures.append(f"{klass}: {r['kernel']} (the SIMT fused attention) in the amp-f16 step "
                                f"of {', '.join(r['used_by'])}, not its tensor-core body")
    for f in failures:
        print(f'kernel-report gate: FAIL {f}')
    print(f"kernel-report gate: {len(rows)} pipelines, {len(failures)} failures")
    return 1 if failures else 0


# ---- summary ------------------------------------------------------------------------------

def cmd_summary(rows_path, label=''):
    """The rows BENCHMARKS.md compares: per class, llama.cpp's two, our aligned GEMMs at the
    largest tile of each layout seen, and how many pipelines spill or fail."""
    rows = [json.loads(l) for l in open(rows_path) if l.strip()]
    dash = lambda v: '-' if v is None else v
    print(f'| {label} class | kernel | variant | tile | wave | regs | spills | occupancy '
          '| main loop instrs / MMA | MMA per loop instr | LDS B per MMA |')
    print('|' + '---|' * 11)
    for klass in ('rdna3', 'ampere'):
        mine = [r for r in rows if r['class'] == klass and r['who'] == 'ours']
        picked = [r for r in rows if r['class'] == klass and r['who'] != 'ours']
        big = [r for r in mine if r['ok'] and 'ALIGNED=true' in r['variant']
               and r['kernel'].startswith(('matmul_coop', 'matmul::matmul_tiled'))]
        seen = set()
        for r in sorted(big, key=lambda r: (r['kernel'], -len(r['tile']))):
            key = (r['kernel'], r['tile'].split()[0], r['variant'].split(' DIRECT')[0])
            if '128x128' in r['tile'] and key not in seen:
                seen.add(key)
                picked.append(r)
        for r in picked:
            lp = r.get('loop') or {}
            occ = f"{r['occupancy']} {'waves/SIMD' if klass == 'rdna3' else 'warps/SM'}"
            print(f"| {klass} | {r['who']} {r['kernel']} | {r['variant']} | {r['tile']} | {r['wave']} | {r['regs']} "
                  f"| {r['spills']} | {occ} | {lp.get('instrs', '-')} / {lp.get('mma', 0)} "
                  f"| {dash(r.get('mma_density'))} | {dash(r.get('lds_b_per_mma'))} |")
        spilling = sorted({f"{r['kernel']} {r['tile']}".strip() for r in mine if r['ok'] and r['spills']})
        failed = sum(1 for r in mine if not r['ok'])
        coop = sum(1 for r in mine if r['kernel'].startswith(('matmul_coop', 'conv_coop', 'flash_coop')))
        print(f"| {klass} | all {len(mine)} step and GEMM pipelines | {coop} on tensor cores | | | | "
              f"{len(spilling)} spill: {', '.join(spilling) or 'none'}; {failed} fail to compile | | | | |")


if __name__ == '__main__':
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == 'rows':
        cmd_rows(*args)
    elif cmd == 'table':
        cmd_table(args)
    elif cmd == 'summary':
        cmd_summary(*args)
    elif cmd == 'gate':
        sys.exit(cmd_gate(args[0], args[1:]))
    else:
        sys.exit(__doc__)
