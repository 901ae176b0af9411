"""resnet_compat.py's amp-f16 cases: autocast + GradScaler against PyTorch's, and the forced
skips that show what a skipped step leaves of BatchNorm's running statistics (see
resnet_compat.py's docstring). The functions take resnet_compat's module as `rc` (its model,
its runs of ours and of PyTorch)."""

import torch
import torch.nn.functional as F
from safetensors.torch import load_file

# amp-f16 (autocast + GradScaler; SGD + Nesterov, and AdamW): losses within AMP_LOSS_RTOL per
# step, the scale and skip flag exactly until the first skip; the final tensors within
# AMP_ATOL + AMP_RTOL * |torch|, or AMP_FLOOR_FACTOR x PyTorch's own amp-f16 against f32
# difference (pytorch_compat.py's FLOOR_FACTOR).
AMP_LOSS_RTOL = 1e-2
AMP_ATOL, AMP_RTOL = 1e-3, 1e-2
AMP_FLOOR_FACTOR = 2
# The forced skips: a scale of 2^100 overflows every f16 gradient, so each of SKIP_STEPS steps
# is skipped on both sides (the scale halves each time); the forwards still run.
SKIP_SCALE, SKIP_STEPS = 2.0 ** 100, 4
SKIP_ATOL, SKIP_RTOL = 1e-5, 1e-3
# name: (optimizer case of resnet_compat.CASES, our flags)
AMP_CASES = {
    "amp-f16": ("sgd-nesterov", ["--growth-interval", "3"]),
    "amp-f16-adamw": ("adamw", ["--growth-interval", "3"]),
    "skip-keep": ("sgd-nesterov", ["--init-scale", repr(SKIP_SCALE)]),
    "skip-update": ("sgd-nesterov",
                    ["--init-scale", repr(SKIP_SCALE), "--buffers-on-skip", "update"]),
}

def torch_amp_run(rc, make_opt, init_path, x, y, steps, init_scale, growth_interval,
                  keep_buffers):
    """The steps in PyTorch on the CPU under autocast (f16) with a GradScaler, as
    pytorch_compat.py runs them (the loss in f32 on the f16 logits, CUDA's semantics): per
    step (loss, scale used, skipped) and the trained model. With `keep_buffers`, a skipped
    step's BatchNorm buffers are put back (what ours does by default); without, PyTorch's
    skipped steps update them (pytorch#88474)."""
    ref = rc.ResNet()
    ref.load_state_dict(load_file(init_path))
    ref.train()
    opt = make_opt(ref.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    trajectory = []
    for s in range(steps):
        xb, yb = x[s * rc.BATCH:(s + 1) * rc.BATCH], y[s * rc.BATCH:(s + 1) * rc.BATCH]
        before = {name: value.clone() for name, value in ref.named_buffers()}
        opt.zero_grad()
        with torch.autocast(device_type="cpu", dtype=torch.float16):
            out = ref(xb)
        assert out.dtype == torch.float16, out.dtype
        loss = F.cross_entropy(out.float(), yb)
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        skipped = scaler.get_scale() < scale
        if skipped and keep_buffers:
            for name, value in ref.named_buffers():
                value.copy_(before[name])
        trajectory.append((loss.item(), scale, skipped))
    return trajectory, ref


def run_amp_case(rc, name, args, workdir, init_path, data_path, x, y):
    """amp-f16 against PyTorch's autocast + GradScaler; with forced skips, what the skipped
    steps leave of the running statistics (ours: nothing, or PyTorch's update)."""
    skipping = name.startswith("skip-")
    steps = SKIP_STEPS if skipping else rc.STEPS
    optimizer, extra = AMP_CASES[name]
    opt_flags, make_opt = rc.CASES[optimizer]
    flags = ["--precision", "amp-f16"] + opt_flags + extra
    got = rc.run_ours(args, workdir, name, init_path, data_path, flags, steps=steps)
    if got is None:
        return False
    ours, out_path = got
    theirs, ref = torch_amp_run(rc, make_opt, init_path, x, y, steps,
                                SKIP_SCALE if skipping else 65536.0,
                                2000 if skipping else 3, keep_buffers=not skipping)
    print(f"\n== {name}: resnet-tiny, amp-f16, {optimizer}, batch {rc.BATCH}, {steps} steps, "
          f"{' '.join(extra)}")
    ok, first_skip, worst_loss = True, None, 0.0
    for s, (t_loss, t_scale, t_skip) in enumerate(theirs):
        o = ours[s] if s < len(ours) else {"loss": float("nan"), "scale": 0, "skipped": None}
        loss_ok = abs(o["loss"] - t_loss) <= AMP_LOSS_RTOL * abs(t_loss)
        worst_loss = max(worst_loss, abs(o["loss"] - t_loss) / abs(t_loss))
        scaler_ok = o["scale"] == t_scale and bool(o["skipped"]) == t_skip
        exact_here = first_skip is None or s <= first_skip
        ok &= loss_ok and (scaler_ok or not exact_here)
        if t_skip and first_skip is None:
            first_skip = s
        print(f"   step {s + 1:2}: loss ours {o['loss']:.5f} torch {t_loss:.5f} "
              f"{'ok' if loss_ok else 'DIFFERS'}; scale ours {o['scale']:g} torch {t_scale:g}, "
              f"skipped {bool(o['skipped'])}/{t_skip} "
              f"{'ok' if scaler_ok else ('DIFFERS' if exact_here else '(after the first skip)')}")
    print(f"   losses: worst relative difference {worst_loss:.2g} (tolerance {AMP_LOSS_RTOL:g}); "
          f"{sum(t[2] for t in theirs)} skipped steps")
    trained = rc.ResNet()
    trained.load_state_dict(load_file(out_path), strict=True)
    mine, torch_state = trained.state_dict(), ref.state_dict()
    init = load_file(init_path)
    if skipping:
        ok &= all(t[2] for t in theirs) and all(o["skipped"] for o in ours)
        for key, value in mine.items():
            if key in dict(ref.named_parameters()):
                good = torch.equal(value, init[key])  # a skipped step changes no weight
            elif name == "skip-keep":
                good = torch.equal(value, init[key])
            elif key.endswith("num_batches_tracked"):
                good = int(value) == int(torch_state[key])
            else:
                diff = (value.double() - torch_state[key].double()).abs()
                good = bool((diff <= SKIP_ATOL + SKIP_RTOL * torch_state[key].double().abs())
                            .all())
            if not good:
                print(f"   {key}: ours {value.flatten()[:3].tolist()}, init "
                      f"{init[key].flatten()[:3].tolist()}, torch "
                      f"{torch_state[key].flatten()[:3].tolist()} DIFFERS")
            ok &= good
        moved = max(float((torch_state[k].double() - init[k].double()).abs().max())
                    for k in torch_state if "running_" in k)
        ours_moved = max(float((mine[k].double() - torch_state[k].double()).abs().max())
                         for k in torch_state if "running_" in k)
        print(f"   every step skipped on both sides; PyTorch's skipped steps moved its running "
              f"statistics by up to {moved:.3g} (pytorch#88474)")
        if name == "skip-keep":
            print("   ours: weights, running statistics and num_batches_tracked bit-identical "
                  "to the init" if ok else "   ours: NOT left alone")
        else:
            print(f"   ours (--buffers-on-skip update): running statistics within "
                  f"{ours_moved:.3g} of PyTorch's, num_batches_tracked "
                  f"{int(mine['bn1.num_batches_tracked'])} (torch "
                  f"{int(torch_state['bn1.num_batches_tracked'])}); weights unchanged")
        return ok
    # PyTorch's own f16 noise on this run: its f32 training from the same init.
    skips = [i for i, t in enumerate(theirs) if t[2]]
    _, f32_ref = rc.torch_run(make_opt, init_path, x, y, torch.float32,
                              skips=skips)
    f32_state, floor, worst_seen = f32_ref.state_dict(), {}, {False: 0.0, True: 0.0}
    for key, value in torch_state.items():
        if not key.endswith("num_batches_tracked"):
            kind = "running" in key
            floor[kind] = max(floor.get(kind, 0.0), rc.worst(f32_state[key], value)[0])
    for key, value in mine.items():
        if key.endswith("num_batches_tracked"):
            if int(value) != int(torch_state[key]):
                print(f"   {key}: ours {int(value)}, torch {int(torch_state[key])} DIFFERS")
                ok = False
            continue
        diff = (value.double() - torch_state[key].double()).abs()
        kind = "running" in key
        worst_seen[kind] = max(worst_seen[kind], float(diff.max()))
        within = (diff <= AMP_ATOL + AMP_RTOL * torch_state[key].double().abs()).all()
        if not (within or diff.max() <= AMP_FLOOR_FACTOR * floor.get(kind, 0.0)):
            print(f"   {key}: worst |ours - torch| {float(diff.max()):.3g} DIFFERS")
            ok = False
    print(f"   final tensors, worst |ours - torch|: parameters {worst_seen[False]:.3g}, running "
          f"statistics {worst_seen[True]:.3g} (tolerance {AMP_ATOL:g} + {AMP_RTOL:g} x |torch|, "
          f"or {AMP_FLOOR_FACTOR} x PyTorch's own amp-f16 against f32: {floor[False]:.3g}, "
          f"{floor[True]:.3g})")
    return ok
