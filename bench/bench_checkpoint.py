#!/usr/bin/env python3
"""Step time and peak memory of a stack of Llama decoder layers with flashtrain attention under
three activation-checkpointing modes (issue #4 item 4):

  none     no checkpointing: every activation is kept for backward;
  full     torch.utils.checkpoint around every layer (use_reentrant=False): only the layer
           inputs are kept, backward re-runs each layer's forward, attention included (the
           flashtrain checkpoint guard warns about exactly this);
  policy   the same checkpoint with context_fn=flashtrain.checkpoint.policy() (selective
           activation checkpointing, torch >= 2.4): attention outputs (out, lse) are saved,
           everything else is recomputed, so backward never re-runs attention.

The layers are a self-contained Llama decoder layer (RMSNorm, q/k/v/o projections with GQA,
rotary embeddings, SwiGLU MLP) in BSHD layout, random init, in bf16 by default; attention is
flashtrain.flash_attn_func (causal), or torch SDPA with --attention sdpa for comparison. A step is
forward + backward of sum(output**2)/numel; the time is the median of --reps steps after warm-up,
measured with CUDA events. Peak memory is torch.cuda.max_memory_allocated during a step, reported
in total and above what was allocated before it (parameters and their gradients): the
activations. Default: 8 layers of hidden 2048 / 16 heads (head dim 128), S = 4096 and 8192,
B*S = 16384 tokens; sized to finish in well under 60 s on an H200.

Usage: python3 bench/bench_checkpoint.py [--quick] [--json PATH] [--markdown PATH]
       CPU smoke test: --device cpu --dtype fp32 --layers 2 --hidden 64 --heads 4
                       --intermediate 128 --seqlens 32 --tokens 64 --reps 1
"""
import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
import warnings

import torch
import torch.nn.functional as F
import torch.utils.checkpoint as torch_checkpoint

MODES = ("none", "full", "policy")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=None, help="GQA key/value heads (default: heads)")
    ap.add_argument("--intermediate", type=int, default=None,
                    help="MLP width (default: Llama's 8/3*hidden rounded up to 256)")
    ap.add_argument("--seqlens", default="4096,8192")
    ap.add_argument("--tokens", type=int, default=16384, help="B*S per step; B = tokens // S")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--attention", default="flashtrain", choices=["flashtrain", "sdpa"])
    ap.add_argument("--reps", type=int, default=5, help="timed steps per measurement")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="S = 4096 only, 3 timed steps")
    ap.add_argument("--json", help="write the results to this JSON file")
    ap.add_argument("--markdown", help="write the table to this markdown file")
    args = ap.parse_args()
    if args.quick:
        args.seqlens, args.reps = "4096", 3
    args.kv_heads = args.kv_heads or args.heads
    if args.intermediate is None:
        args.intermediate = 256 * math.ceil(8 * args.hidden / 3 / 256)
    if args.hidden % args.heads or args.heads % args.kv_heads:
        ap.error("hidden must divide by heads, and heads by kv-heads")
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        ap.error("unknown modes %s (known: %s)" % (sorted(unknown), ", ".join(MODES)))
    return args


# ---- the model ---------------------------------------------------------------------------------

class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotary_tables(seqlen, head_dim, device, dtype, base=10000.0):
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    freqs = torch.outer(torch.arange(seqlen, device=device, dtype=torch.float32), inv)
    emb = torch.cat([freqs, freqs], dim=-1)  # [S, D]
    return emb.cos().to(dtype)[None, :, None, :], emb.sin().to(dtype)[None, :, None, :]


def apply_rotary(x, cos, sin):  # x [B, S, H, D]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def attention(kind):
    if kind == "flashtrain":
        import flashtrain
        return lambda q, k, v: flashtrain.flash_attn_func(q, k, v, causal=True)

    def sdpa(q, k, v):  # BSHD in and out, like flash_attn_func
        rep = q.shape[2] // k.shape[2]
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        return out.transpose(1, 2)
    return sdpa


class DecoderLayer(torch.nn.Module):
    """Llama's decoder layer: x + attn(norm(x)), then + mlp(norm(.)); no biases."""

    def __init__(self, hidden, heads, kv_heads, intermediate, attend):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.attn_norm, self.mlp_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.q_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.k_proj = torch.nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.gate_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = torch.nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = torch.nn.Linear(intermediate, hidden, bias=False)
        self.attend = attend

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = apply_rotary(self.q_proj(h).view(b, s, self.heads, self.head_dim), cos, sin)
        k = apply_rotary(self.k_proj(h).view(b, s, self.kv_heads, self.head_dim), cos, sin)
        v = self.v_proj(h).view(b, s, self.kv_heads, self.head_dim)
        x = x + self.o_proj(self.attend(q, k, v).reshape(b, s, -1))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Stack(torch.nn.Module):
    def __init__(self, args):
        super().__init__()
        attend = attention(args.attention)
        self.layers = torch.nn.ModuleList(
            DecoderLayer(args.hidden, args.heads, args.kv_heads, args.intermediate, attend)
            for _ in range(args.layers))
        self.mode = "none"

    def forward(self, x, cos, sin):
        for layer in self.layers:
            if self.mode == "none":
                x = layer(x, cos, sin)
            elif self.mode == "full":
                x = torch_checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                import flashtrain
                x = torch_checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False,
                                                context_fn=flashtrain.checkpoint.policy())
        return x


# ---- measuring ---------------------------------------------------------------------------------

def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.start, self.end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            self.start.record()
        else:
            self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            self.ms = self.start.elapsed_time(self.end)
        else:
            self.ms = (time.perf_counter() - self.t0) * 1e3


def step(model, x, cos, sin):
    out = model(x, cos, sin)
    loss = out.float().pow(2).mean()
    loss.backward()
    return float(loss.detach())


def measure(model, args, seqlen, mode, device, dtype):
    batch = max(1, args.tokens // seqlen)
    model.mode = mode
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    x = torch.randn(batch, seqlen, args.hidden, device=device, dtype=dtype).requires_grad_()
    cos, sin = rotary_tables(seqlen, args.hidden // args.heads, device, dtype)
    row = dict(seqlen=seqlen, batch=batch, mode=mode)
    try:
        import flashtrain
        flashtrain.checkpoint.reset_warning()
    except ImportError:
        pass
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(args.warmup):
            x.grad = None
            row["loss"] = step(model, x, cos, sin)
    row["guard_warned"] = any("checkpoint recomputation" in str(w.message) for w in caught)
    # Gradients accumulate over the steps from here on; the memory they take is allocated by the
    # warm-up already, so the peak of a timed step is its activations over that baseline.
    sync(device)
    if device.type == "cuda":
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.reps):
        x.grad = None
        with Timer(device) as t:
            step(model, x, cos, sin)
        times.append(t.ms)
    times.sort()
    row["step_ms"] = times[len(times) // 2]
    row["tokens_per_s"] = batch * seqlen / (row["step_ms"] / 1e3)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        row["peak_gib"] = peak / 2 ** 30
        row["activation_gib"] = (peak - baseline) / 2 ** 30
    # A short fingerprint of the gradients: every mode must compute the same ones.
    layer0 = model.layers[0]
    row["grad_norm_q0"] = float(layer0.q_proj.weight.grad.float().norm()) / (args.warmup + args.reps)
    return row


def environment(device):
    meta = dict(torch=torch.__version__, device=str(device))
    if device.type == "cuda":
        meta["gpu"] = torch.cuda.get_device_name(device)
    # FLASHTRAIN_COMMIT first: the GPU machine's copy of the tree may carry a stale .git.
    meta["commit"] = os.environ.get("FLASHTRAIN_COMMIT", "")
    if not meta["commit"]:
        try:
            meta["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                            text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                                            check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            meta["commit"] = "unknown"
    meta["date"] = time.strftime("%Y-%m-%d")
    return meta


def markdown(args, meta, rows):
    gib = lambda r, key: "%.2f" % r[key] if key in r else "n/a"
    lines = [
        f"{meta.get('gpu', meta['device'])}, torch {meta['torch']}, {meta['date']}, commit "
        f"{meta['commit']}. {args.layers} Llama decoder layers, hidden {args.hidden}, "
        f"{args.heads} heads ({args.kv_heads} KV) of {args.hidden // args.heads}, MLP "
        f"{args.intermediate}, {args.dtype}, causal {args.attention} attention; a step is "
        f"fwd+bwd of B*S = {args.tokens} tokens, median of {args.reps}. Activation memory is the "
        "step's peak above parameters + gradients. \"vs none\": step time over no checkpointing.",
        "",
        "| S | B | checkpointing | step ms | tokens/s | vs none | peak GiB | activations GiB | guard warned |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['seqlen']} | {r['batch']} | {r['mode']} | skipped: {r['skipped']} "
                         "| | | | | |")
            continue
        base = next((b for b in rows if b["seqlen"] == r["seqlen"] and b["mode"] == "none"
                     and "step_ms" in b), None)
        ratio = "%.2f" % (r["step_ms"] / base["step_ms"]) if base else "n/a"
        lines.append(f"| {r['seqlen']} | {r['batch']} | {r['mode']} | {r['step_ms']:.1f} | "
                     f"{r['tokens_per_s']:,.0f} | {ratio} | {gib(r, 'peak_gib')} | "
                     f"{gib(r, 'activation_gib')} | {'yes' if r['guard_warned'] else 'no'} |")
    return "\n".join(lines)


def main():
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_checkpoint: no CUDA device (use --device cpu for a smoke test)", file=sys.stderr)
        return 2
    dtype = DTYPES[args.dtype]
    torch.manual_seed(0)
    model = Stack(args).to(device, dtype)
    meta = environment(device)
    t0 = time.time()
    rows = []
    for seqlen in [int(s) for s in args.seqlens.split(",")]:
        for mode in args.modes:
            batch = max(1, args.tokens // seqlen)
            try:
                if mode == "policy":
                    import flashtrain
                    flashtrain.checkpoint.policy()  # raises on torch < 2.4, saying so
                row = measure(model, args, seqlen, mode, device, dtype)
            except (RuntimeError, ValueError) as error:  # too old a torch, out of memory, ...
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                row = dict(seqlen=seqlen, batch=batch, mode=mode,
                           skipped=str(error).splitlines()[0][:200])
            rows.append(row)
            print(f"[{time.time() - t0:5.1f}s] S={seqlen} B={batch} {mode}: "
                  + (f"skipped ({row['skipped']})" if "skipped" in row else
                     f"{row['step_ms']:.1f} ms" + (f", peak {row['peak_gib']:.2f} GiB"
                                                   if "peak_gib" in row else "")),
                  file=sys.stderr, flush=True)
    # The modes compute the same function: their losses and gradients must agree to rounding.
    for seqlen in {r["seqlen"] for r in rows}:
        done = [r for r in rows if r["seqlen"] == seqlen and "loss" in r]
        norms = [r["grad_norm_q0"] for r in done]
        if norms and max(norms) - min(norms) > 2e-2 * max(abs(n) for n in norms):
            print(f"bench_checkpoint: WARNING S={seqlen}: gradient norms differ between modes: "
                  f"{dict((r['mode'], r['grad_norm_q0']) for r in done)}", file=sys.stderr)
    table = markdown(args, meta, rows)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, config=vars(args), results=rows), f, indent=1)
    return 0 if all("skipped" not in r or r["mode"] == "policy" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
