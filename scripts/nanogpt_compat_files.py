"""nanogpt_compat.py's cases that go through files (see its docstring):
checkpoint-gpt-tiny (a checkpoint of ours loaded strictly into nanoGPT's GPT with the
guide's lines, its moments file, its logits and loss) and sample-greedy (our greedy sample
against nanoGPT's `generate`)."""

from nanogpt_compat_common import *  # noqa: F401,F403


HAMLET_GZ = os.path.join(ROOT, "src", "data", "embedded", "hamlet_gut.txt.gz")


def hamlet_windows(vocab, n, length):
    """`n` windows of `length` characters of the embedded Hamlet (as Python's text mode reads
    it: newlines normalised), spread over the play, each wholly in `vocab`."""
    with gzip.open(HAMLET_GZ, "rb") as f:
        text = f.read().decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    index = {c: i for i, c in enumerate(vocab)}
    out, step = [], len(text) // (n + 1)
    for k in range(1, n + 1):
        at = k * step
        while not all(c in index for c in text[at:at + length]):
            at += 1
        out.append([index[c] for c in text[at:at + length]])
    return torch.tensor(out, dtype=torch.int64)


def case_checkpoint(case, args, work):
    """A gpt-tiny checkpoint trained by `train --model gpt-tiny --dataset hamlet`, loaded
    strictly into nanoGPT's GPT with the guide's lines; that model's logits and loss on
    Hamlet windows against ours from the same file (examples/gpt_grads.rs with the checkpoint
    as --init and its `model` metadata as the model)."""
    ck = os.path.join(work, f"{case.name}.safetensors")
    # The moments go to a moments file (the test hook's limit of 0 bytes), as gpt-char's
    # do: the checkpoint must still load strictly, and the moments file must name every
    # parameter in its shape.
    done = run(command(args, "bin") + [
        "train", "--model", "gpt-tiny", "--dataset", "hamlet", "--precision", "amp-f16",
        "--steps", str(case.steps), "--batch-size", "8", "--no-validate", "--save", ck],
        env={"WEBGPU_AMP_TEST_INLINE_MOMENTS_MAX": "0"})
    print(f"   trained: {compat_env.adapter_line(done.stdout)}")
    check_tensor_cores(args, done.stdout)
    model = load_like_readme(ck)
    print("   loaded into nanoGPT's GPT with the guide's lines (strict): "
          f"{model.config}")
    if not check_moments_file(ck, model):
        return False
    with safe_open(ck, "pt") as f:
        meta = f.metadata()
    vocab = json.loads(meta["vocab"])
    gpt = os.path.join(work, f"{case.name}.json")
    with open(gpt, "w") as f:
        f.write(meta["model"])
    block = model.config.block_size
    seq = hamlet_windows(vocab, case.batch, block + 1)
    x, y = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
    data = os.path.join(work, f"{case.name}-data.safetensors")
    save_file({"x": x, "y": y}, data)
    use_manual_attention(model)
    model.eval()
    ok = True
    for precision, tol in (("f32", F32), ("amp-f16", AMP)):
        out = os.path.join(work, f"{case.name}-{precision}.safetensors")
        run(command(args, "example") + [gpt, ck, data, precision, out])
        ours = load_file(out)
        if precision == "amp-f16":
            with safe_open(out, "pt") as f:
                check_tensor_cores(args, f.metadata()["tensor_cores"])
        with torch.no_grad():
            if precision == "amp-f16":
                check_amp_semantics(model, x, y)
                logits, loss = amp_forward(model, x, y)
            else:
                logits, loss = model(x, y)
        rows = [("logits", ratio(ours["logits"], logits), tol.logits),
                ("loss", ratio(ours["loss"], loss.reshape(1)), tol.loss)]
        print(f"   {precision}: loss ours {float(ours['loss']):.6f} torch {float(loss):.6f}")
        for what, err, limit in rows:
            mark = "ok" if err <= limit else "MISMATCH"
            ok &= err <= limit
            print(f"   {precision}: {what:<7} error {err:9.2e} (tolerance {limit:g}) {mark}")
    return ok


def check_moments_file(ck, model):
    """The moments file the checkpoint names: exp_avg and exp_avg_sq of every parameter of
    nanoGPT's `model.parameters()` (the tied lm_head is wte), each in its shape."""
    with safe_open(ck, "pt") as f:
        ref = json.loads(f.metadata()["optimizer"])["moments_file"]
    moments = load_file(os.path.join(os.path.dirname(ck), ref["file"]))
    want = {f"{m}.{name}": tuple(p.shape) for name, p in model.named_parameters()
            for m in ("exp_avg", "exp_avg_sq")}
    got = {k: tuple(v.shape) for k, v in moments.items()}
    ok = got == want and all(v.dtype == torch.float32 for v in moments.values())
    print(f"   moments file {ref['file']}: {len(got)} tensors, "
          f"{'every parameter in its shape' if ok else f'MISMATCH: {sorted(set(got) ^ set(want))}'}")
    return ok


TEXT = ("the cat sat on the mat. the dog sat on the log. a cat and a dog sat on a mat.\n"
        "to be or not to be, that is the question.\n") * 6


def generate_like_readme(model, checkpoint, prompt, n):
    """What the guide's lines for sampling in nanoGPT (the python block with
    `model.eval().generate`, on "gpt.safetensors" with the prompt "Ham." and 200 tokens)
    print for `model`, `checkpoint`, `prompt` and `n` tokens."""
    import contextlib
    import io
    with open(os.path.join(ROOT, GUIDE_GENERATE)) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    code = [b for b in blocks if "model.eval().generate(" in b]
    if len(code) != 1:
        raise Fail(f"{GUIDE_GENERATE} has {len(code)} python blocks with model.eval().generate(")
    code = code[0]
    for old, new in (('"gpt.safetensors"', repr(checkpoint)), ('"Ham."', repr(prompt)),
                     ("generate(idx, 200,", f"generate(idx, {n},")):
        if old not in code:
            raise Fail(f"the guide's generate lines lack {old}")
        code = code.replace(old, new)
    out = io.StringIO()
    scope = {"json": json, "safe_open": safe_open, "model": model}
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"{GUIDE_GENERATE} (generate block)", "exec"), scope)
    return out.getvalue().rstrip("\n")


def case_sample(case, args, work):
    text_path = os.path.join(work, "text.txt")
    with open(text_path, "w") as f:
        f.write(TEXT)
    vocab = sorted(set(TEXT))
    config = dict(BASE, vocab_size=len(vocab), bias=False)
    gpt = os.path.join(work, f"{case.name}.json")
    model_json(config, "gelu", gpt)
    ck = os.path.join(work, f"{case.name}.safetensors")
    run(command(args, "bin") + [
        "train", "--model", gpt, "--dataset", f"text:{text_path}", "--precision", "f32",
        "--steps", "80", "--batch-size", "8", "--optimizer", "adamw", "--lr", "0.01",
        "--lr-schedule", "constant", "--clip-grad-norm", "0", "--no-validate", "--save", ck])
    model = load_like_readme(ck)
    model.eval()
    with safe_open(ck, "pt") as f:
        stored = json.loads(f.metadata()["vocab"])
    if stored != vocab:
        raise Fail(f"the checkpoint's vocabulary {stored} is not the text's {vocab}")
    prompt, n = "the ", 40
    ids = torch.tensor([[vocab.index(c) for c in prompt]])
    want = prompt + "".join(vocab[i] for i in model.generate(ids, n, top_k=1)[0, len(prompt):])
    readme = generate_like_readme(model, ck, prompt, n)
    if readme != want:
        raise Fail(f"the guide's generate lines print {readme!r}, generate() gives {want!r}")
    print("   the guide's generate lines print the same")
    done = run(command(args, "bin") + [
        "sample", "--checkpoint", ck, "--prompt", prompt, "--tokens", str(n), "--top-k", "1",
        "--precision", "f32"])
    got = done.stdout[:-1] if done.stdout.endswith("\n") else done.stdout
    print(f"   nanoGPT generate(top_k=1): {want!r}")
    print(f"   webgpu-amp sample --top-k 1: {got!r}")
    if got != want:
        print("   MISMATCH")
        return False
    if len(set(want[len(prompt):])) < 3:
        print("   the greedy text is too uniform to prove anything (train longer)")
        return False
    return True
