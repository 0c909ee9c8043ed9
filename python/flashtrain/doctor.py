"""python -m flashtrain.doctor: the numerics stress suite of issue #5 on every attention backend here.

Runs each case on flashtrain (CPU, and CUDA when torch sees a GPU; default and precision="high")
and on torch SDPA's backends (math, and on CUDA flash, efficient and cudnn; torch >= 2.0), and
prints one table: case x backend x (max relative error of out, dq, dk, dv against a float64
reference; count of spurious non-finite values). Errors and counts are taken over the elements
whose float64 value the input dtype can hold: a gradient that truly overflows fp16 is Inf in any
backend, a NaN or Inf where the true value fits is spurious. A backend that cannot run a case says
why, in short. A second table checks issue #5's bars per case and device: flashtrain's error over
the best of torch's fused backends (at most 1.1x) and precision="high"'s dq / dk error over torch's
math backend (at most 1.25x); a baseline with spurious non-finite values has no finite error. Its
last column, with no bar, puts the first in scale: torch's second best fused backend over its best.

    python -m flashtrain.doctor [--quick] [--device cpu|cuda] [--case NAME ...] [--seed N | --seeds A-B]
"""
import argparse
import math
import sys

import torch

from . import _compat, autograd

_FINFO_MAX = {torch.float16: 65504.0, torch.bfloat16: 3.3895313892515355e38, torch.float32: 3.4e38}


class Case:
    """One stress case: sizes (Hq, Hk), input scales, mask, dtype."""

    def __init__(self, name, b, sq, sk, hq, hk, d, dtype=torch.float16, scales=(1.0, 1.0, 1.0, 1.0),
                 causal=False, top_left=False, window=(-1, -1), max_dout=False):
        self.name, self.b, self.sq, self.sk, self.hq, self.hk, self.d = name, b, sq, sk, hq, hk, d
        self.dtype, self.scales = dtype, scales
        self.causal, self.top_left, self.window = causal, top_left, window
        self.max_dout = max_dout  # scale dO so the largest true gradient (or dO) is half the dtype's max

    def mask(self):
        """Boolean [Sq, Sk] visibility (True = key seen), flashtrain's semantics (DESIGN.md §2)."""
        i = torch.arange(self.sq).unsqueeze(1)
        j = torch.arange(self.sk).unsqueeze(0)
        diag = i + (0 if self.top_left else self.sk - self.sq)
        left, right = self.window
        if self.causal:
            right = 0 if right < 0 else min(right, 0)
        seen = torch.ones(self.sq, self.sk, dtype=torch.bool)
        if left >= 0:
            seen &= j >= diag - left
        if right >= 0:
            seen &= j <= diag + right
        return seen

    def is_masked(self):
        return self.causal or self.window != (-1, -1)


def stress_cases(quick):
    """The issue #5 suite; --quick shrinks sizes so it runs in seconds on a CPU."""
    s = 128 if quick else 1024
    h = 2 if quick else 8
    d = 64 if quick else 128
    big = (400.0, 0.01, 8.0, 3000.0)  # q, k, v, dO scales of the FlashAttention-2 overflow
    return [
        Case("large dO fp16 (FA2 NaN)", 2, s, s, h, h, d, torch.float16, big),
        Case("logits ~1e3 bf16", 2, s, s, h, h, d, torch.bfloat16, (30.0, 30.0, 1.0, 1.0)),
        Case("logits ~1e3 fp16", 2, s, s, h, h, d, torch.float16, (30.0, 30.0, 1.0, 1.0)),
        Case("masked rows causal BR Sq>Sk", 2, s + 37, s // 2, h, h, d, torch.bfloat16, causal=True),
        # Bottom-right window (2, 1) with Sq > Sk: rows whose diagonal lies before column -1 see no key.
        Case("masked rows window BR Sq>Sk", 2, s + 19, s // 2, h, h, d, torch.bfloat16, window=(2, 1)),
        Case("masked rows causal TL Sq<Sk+window", 1, s, s // 2 + 3, h, h, d, torch.float16,
             causal=True, top_left=True, window=(2, 0)),
        Case("seqlen 1", 3, 1, 1, h, h, d, torch.bfloat16),
        Case("odd lengths 257 x 383", 1, 257 if not quick else 67, 383 if not quick else 91, h, h, d,
             torch.float16),
        Case("Sq != Sk causal bottom-right", 1, s // 2 + 5, s + 11, h, h, d, torch.bfloat16, causal=True),
        Case("Sq != Sk causal top-left", 1, s + 11, s // 2 + 5, h, h, d, torch.bfloat16, causal=True,
             top_left=True),
        Case("GQA 16:1", 1, s, s, 16, 1, d, torch.bfloat16),
        Case("largest representable dO fp16", 1, s, s, h, h, d, torch.float16, max_dout=True),
    ]


def make_inputs(case, seed=0):
    """float64 CPU inputs (q, k, v in BSHD; dO), already rounded to the case's dtype."""
    g = torch.Generator().manual_seed(seed)
    sq, sk = case.scales[0], case.scales[1]

    def randn(*shape, scale):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(case.dtype).double()

    q = randn(case.b, case.sq, case.hq, case.d, scale=sq)
    k = randn(case.b, case.sk, case.hk, case.d, scale=sk)
    v = randn(case.b, case.sk, case.hk, case.d, scale=case.scales[2])
    dout = randn(case.b, case.sq, case.hq, case.d, scale=case.scales[3])
    return q, k, v, dout


def reference(case, q, k, v, dout):
    """float64 attention and gradients; rows that see no key give out = 0 and zero gradients."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    group = case.hq // case.hk
    kk = k.repeat_interleave(group, dim=2).transpose(1, 2)
    vv = v.repeat_interleave(group, dim=2).transpose(1, 2)
    s = torch.matmul(q.transpose(1, 2), kk.transpose(-1, -2)) / math.sqrt(case.d)
    seen = case.mask()
    s = s.masked_fill(~seen, float("-inf"))
    row_seen = seen.any(dim=1).view(1, 1, -1, 1)
    p = torch.softmax(torch.where(row_seen, s, torch.zeros_like(s)), dim=-1)
    p = torch.where(row_seen, p, torch.zeros_like(p))
    out = torch.matmul(p, vv).transpose(1, 2)
    out.backward(dout)
    return out.detach(), q.grad, k.grad, v.grad


def run_flashtrain(case, device, q, k, v, dout, precision="default"):
    q, k, v = (t.to(device=device, dtype=case.dtype).requires_grad_(True) for t in (q, k, v))
    window = case.window
    out, _ = autograd.attention(q, k, v, causal=case.causal, causal_top_left=case.top_left,
                                window_size=window, precision=precision)
    out.backward(dout.to(device=device, dtype=case.dtype))
    return out.detach(), q.grad, k.grad, v.grad


def _sdpa_context(backend):
    """A context manager that restricts SDPA to one backend, or None when this torch cannot."""
    if _compat.TORCH_VERSION < (2, 0):
        return None  # Debian's 1.13 carries an early SDPA whose backend switches differ
    attention = getattr(torch.nn, "attention", None)
    if attention is not None and hasattr(attention, "sdpa_kernel"):
        names = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "cudnn": "CUDNN_ATTENTION"}
        kind = getattr(attention.SDPBackend, names[backend], None)
        return None if kind is None else attention.sdpa_kernel([kind])
    if hasattr(torch.backends.cuda, "sdp_kernel") and backend != "cudnn":
        return torch.backends.cuda.sdp_kernel(enable_math=backend == "math",
                                              enable_flash=backend == "flash",
                                              enable_mem_efficient=backend == "efficient")
    return None


def run_sdpa(backend, case, device, q, k, v, dout):
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    ctx = _sdpa_context(backend)
    if sdpa is None or ctx is None:
        raise RuntimeError("needs torch >= 2.0 with this SDPA backend (this is %s)" % torch.__version__)
    group = case.hq // case.hk
    q, k, v = (t.to(device=device, dtype=case.dtype).requires_grad_(True) for t in (q, k, v))
    qt = q.transpose(1, 2)
    kt = k.repeat_interleave(group, dim=2).transpose(1, 2)
    vt = v.repeat_interleave(group, dim=2).transpose(1, 2)
    kwargs = {}
    if case.is_masked():
        if case.causal and case.top_left and case.window == (-1, -1):
            kwargs["is_causal"] = True
        else:
            kwargs["attn_mask"] = case.mask().to(device)
    with ctx:
        out = sdpa(qt, kt, vt, **kwargs).transpose(1, 2)
        out.backward(dout.to(device=device, dtype=case.dtype))
    return out.detach(), q.grad, k.grad, v.grad


def compare(case, got, ref):
    """(max relative error of out, dq, dk, dv; spurious non-finite count) over representable elements."""
    limit = _FINFO_MAX[case.dtype]
    errors, spurious = [], 0
    for x, x64 in zip(got, ref):
        x = x.detach().double().cpu()
        fits = x64.abs() <= limit
        finite = torch.isfinite(x)
        spurious += int((fits & ~finite).sum())
        ok = fits & finite
        scale = x64[fits].abs().max().item() if bool(fits.any()) else 0.0
        err = (x - x64)[ok].abs().max().item() if bool(ok.any()) else 0.0
        errors.append(err / scale if scale > 0 else err)
    return errors, spurious


def backends_here(device_filter):
    """(label, device, runner) of every backend to try."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if device_filter:
        devices = [d for d in devices if d == device_filter]
    result = []
    for device in devices:
        result.append(("flashtrain-" + device, device, run_flashtrain))
        result.append(("flashtrain-high-" + device, device,
                       lambda c, dev, *t: run_flashtrain(c, dev, *t, precision="high")))
        sdpa = ["math"] + (["flash", "efficient", "cudnn"] if device == "cuda" else [])
        for name in sdpa:
            result.append(("sdpa-%s-%s" % (name, device), device,
                           lambda c, dev, *t, _n=name: run_sdpa(_n, c, dev, *t)))
    return result


def _short(exc):
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:60]


def run_suite(quick=False, device=None, case_filter=None, out=sys.stdout, seed=0):
    """Runs the suite and prints the table; returns the rows as dicts (for tests). `seed` draws
    other inputs of the same cases (one draw decides a maximum error, so a ratio of two backends'
    errors can move by some 10% between seeds)."""
    rows = []
    header = "%-36s %-22s %9s %9s %9s %9s %9s" % ("case", "backend", "out", "dq", "dk", "dv", "nonfinite")
    print(header, file=out)
    print("-" * len(header), file=out)
    for case in stress_cases(quick):
        if case_filter and not any(f in case.name for f in case_filter):
            continue
        q, k, v, dout = make_inputs(case, seed)
        if case.max_dout:
            # Gradients are linear in dO: scale it until the largest true gradient, or dO itself,
            # reaches half the dtype's largest value.
            _, dq, dk, dv = reference(case, q, k, v, dout)
            top = max(t.abs().max().item() for t in (dq, dk, dv, dout))
            dout = (dout * (0.5 * _FINFO_MAX[case.dtype] / top)).to(case.dtype).double()
        ref = reference(case, q, k, v, dout)
        for label, dev, runner in backends_here(device):
            row = {"case": case.name, "backend": label}
            try:
                errors, spurious = compare(case, runner(case, dev, q, k, v, dout), ref)
                row.update(out=errors[0], dq=errors[1], dk=errors[2], dv=errors[3], nonfinite=spurious)
                print("%-36s %-22s %9.2e %9.2e %9.2e %9.2e %9d" % (case.name, label, *errors, spurious),
                      file=out)
            except Exception as exc:  # a backend that refuses a case is a row, not a crash
                row["error"] = _short(exc)
                print("%-36s %-22s n/a: %s" % (case.name, label, row["error"]), file=out)
            rows.append(row)
    print_bars(rows, out)
    return rows


FUSED = ("flash", "efficient", "cudnn")
# Issue #5's bars on bar_ratios()' columns; the runner-up has none, but is counted against the
# fused bar in seed_summary() for scale.
BARS = {"fused": 1.1, "high": 1.25, "runner_up": 1.1}


def _finite_error(row, names):
    """max error over `names`, or None where the row did not run or had spurious non-finites."""
    if row is None or "error" in row or row.get("nonfinite", 0) > 0:
        return None
    return max(row[n] for n in names)


def _ratio(ours, base):
    """ours / base; None when either side has no finite error."""
    if ours is None or base is None:
        return None
    return ours / base if base > 0 else (1.0 if ours == 0 else math.inf)


def bar_ratios(rows):
    """Issue #5's bars per (case, device): dict with 'fused' (flashtrain default over the best fused
    SDPA backend, all outputs) and 'high' (precision="high" over SDPA math, dq and dk); None where
    a side has no finite error. 'runner_up' puts 'fused' in scale: the second best of torch's fused
    backends over the best (None with fewer than two finite ones), i.e. how far apart kernels that
    do the same arithmetic land on this one draw of inputs."""
    by = {(r["case"], r["backend"]): r for r in rows}
    result = []
    for case, backend in by:
        if not backend.startswith("flashtrain-") or backend.startswith("flashtrain-high-"):
            continue
        device = backend[len("flashtrain-"):]
        fused = [_finite_error(by.get((case, "sdpa-%s-%s" % (n, device))), ("out", "dq", "dk", "dv"))
                 for n in FUSED]
        fused = [e for e in fused if e is not None]
        runner_up = _ratio(*sorted(fused)[1::-1]) if len(fused) > 1 else None
        mine = _finite_error(by[(case, backend)], ("out", "dq", "dk", "dv"))
        high = _finite_error(by.get((case, "flashtrain-high-" + device)), ("dq", "dk"))
        math_err = _finite_error(by.get((case, "sdpa-math-" + device)), ("dq", "dk"))
        result.append({"case": case, "device": device,
                       "fused": _ratio(mine, min(fused)) if fused else None,
                       "high": _ratio(high, math_err), "runner_up": runner_up})
    return result


def print_bars(rows, out):
    def cell(x, limit):
        if x is None:
            return "%12s" % "-"
        return "%11.2f%s" % (x, "!" if x > limit else " ")

    print("\nissue #5 bars (ratio of errors; '-': a side did not run or was not finite; '!': above):",
          file=out)
    print("%-36s %-6s %12s %12s %12s" % ("case", "device", "vs fused<=1.1", "high/math<=1.25",
                                          "runner-up"), file=out)
    for r in bar_ratios(rows):
        print("%-36s %-6s %s %s %s" % (r["case"], r["device"], cell(r["fused"], BARS["fused"]),
                                       cell(r["high"], BARS["high"]), cell(r["runner_up"], math.inf)), file=out)
    print("(runner-up: the second best of torch's fused backends over the best, on the same inputs; no bar)",
          file=out)


def parse_seeds(text):
    """'0-5' -> [0, 1, 2, 3, 4, 5]; '0,3,7' -> [0, 3, 7] (ranges and lists may mix)."""
    seeds = []
    for part in text.split(","):
        first, sep, last = part.strip().partition("-")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            raise argparse.ArgumentTypeError("takes N, A-B or a comma list of them, not %r" % text)
        if hi < lo:
            raise argparse.ArgumentTypeError("range %r runs backwards" % part)
        seeds.extend(range(lo, hi + 1))
    return seeds


def seed_summary(bars_by_seed):
    """Issue #5's bars over several draws of the inputs: per (case, device), the worst ratio of each
    column and how many seeds put flashtrain above its bar. `bars_by_seed`: {seed: bar_ratios()}."""
    table = {}
    for bars in bars_by_seed.values():
        for b in bars:
            table.setdefault((b["case"], b["device"]), []).append(b)
    result = []
    for (case, device), draws in table.items():
        entry = {"case": case, "device": device, "seeds": len(draws)}
        for key, bar in BARS.items():
            ratios = [b[key] for b in draws if b[key] is not None]
            entry[key] = max(ratios, default=None)
            entry[key + "_above"] = sum(x > bar for x in ratios)
        result.append(entry)
    return result


def print_seed_summary(bars_by_seed, out):
    def cell(worst, above):
        return "%13s" % "-" if worst is None else "%7.2f (%2d)" % (worst, above)

    print("\nissue #5 bars over seeds %s: the worst ratio of each column (in parentheses: seeds above "
          "%s):" % (",".join(str(x) for x in bars_by_seed), " / ".join(str(x) for x in BARS.values())), file=out)
    print("%-36s %-6s %13s %13s %13s" % ("case", "device", "vs fused", "high/math", "runner-up"), file=out)
    for r in seed_summary(bars_by_seed):
        print("%-36s %-6s %s %s %s" % (r["case"], r["device"], cell(r["fused"], r["fused_above"]),
                                       cell(r["high"], r["high_above"]),
                                       cell(r["runner_up"], r["runner_up_above"])), file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m flashtrain.doctor", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds on a CPU)")
    parser.add_argument("--device", choices=("cpu", "cuda"), help="only this device's backends")
    parser.add_argument("--case", action="append", help="only cases whose name contains this")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0, the suite's)")
    seeds.add_argument("--seeds", type=parse_seeds, metavar="A-B|A,B,...",
                       help="run the suite once per seed, then the bars' worst ratios over the seeds")
    args = parser.parse_args(argv)
    bad = []
    bars_by_seed = {}
    for seed in args.seeds or [args.seed]:
        if args.seeds:
            print("\n=== seed %d" % seed)
        rows = run_suite(args.quick, args.device, args.case, seed=seed)
        bars_by_seed[seed] = bar_ratios(rows)
        bad += [r for r in rows if r["backend"].startswith("flashtrain") and r.get("nonfinite", 0) > 0]
    if args.seeds:
        print_seed_summary(bars_by_seed, sys.stdout)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
