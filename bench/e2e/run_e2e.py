#!/usr/bin/env python3
"""End-to-end Llama training benchmark: eager vs torch SDPA vs flashtrain attention.

Runs examples/train_llama.py in subprocesses (so an out-of-memory result or a crash stays in its
own process) and writes, into --out-dir (default bench/e2e/):
  sweep.json, paired.json, loss_curve.json   every result, with per-step records and the environment
  RESULTS.md                         markdown tables (regenerated from whichever JSON exists)
  tokens_per_s.png, peak_memory.png, paired_ratio.png, loss_curves.png
                                     (when matplotlib imports; else a message)
  logs/*.log                         each subprocess's output

Modes:
  --mode sweep (default)  S in --seqs x --attn x --dtypes x --checkpoint. One subprocess per
      (attention, dtype, checkpointing) runs the sequence lengths shortest first, each with a fresh
      model (--steps steps, the first --warmup-steps left out of tokens/s); after an out-of-memory
      result the longer ones are reported as "oom-skipped". A crashed subprocess is restarted for
      the lengths it did not reach. Groups run in priority order (bf16 with no checkpointing for every
      attention; then sdpa and flashtrain with flashtrain-policy, full, and the same in fp16; eager's
      other groups last; see --dry-run) until --budget-seconds is spent; what is
      left is reported as "skipped-budget".
  --mode paired  the speed ratio measured the way the project quotes it, within one process:
      train_llama.py --compare with --paired-attn (default sdpa,flashtrain; ratios to the first)
      for S in --seqs, one process per dtype of --paired-dtypes (default bf16; no checkpointing;
      the sweep's --layers and --tokens-per-step): per S one model and optimizer, --paired-rounds
      measured rounds after --paired-warmup (each attention one optimizer step per round, ABBA
      order). Reports the median over rounds of the per-round tokens/s ratio with its min and max.
  --mode loss-curve (or --loss-curve)  --lc-steps step runs (default 300) of --lc-attn in each of
      --lc-dtypes at a small S (default S=1024, 2 layers, 8192 tokens/step): identical
      initialisation and data, so the curves differ only by the attention kernels' numerics.
      Records loss curves and non-finite steps and plots them together.
  --mode all  in this priority order: the sweep, then the paired runs, then the loss curves; the
      last two keep --paired-budget-seconds and --lc-budget-seconds of the budget, and what a
      stage leaves unused goes to the next.
  --report-only  rewrite RESULTS.md and the plots from the JSON already in --out-dir.

On one H200 the defaults fit in 8 minutes: `--mode all` (budget 480 s: sweep 210 s, paired 100 s,
loss curves 170 s; a process running at the deadline gets up to 20 s more to finish its step).
In the last H200 run a step took 0.23-0.35 s (4 layers, 16384 tokens), so the paired runs' 5 S x
14 rounds x 2 steps take about 40 s after about 20 s of start-up and model builds.
The whole run prints progress as it goes. A CPU smoke test: --tiny --device cpu.
"""
import argparse
import datetime
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(REPO, "examples", "train_llama.py")
ATTN_ORDER = ["eager", "sdpa", "flashtrain"]
CKPT_ORDER = ["none", "flashtrain-policy", "full"]
# Seconds kept after the deadline for a subprocess to finish the step it is in and write JSON.
GRACE_S = 20.0
# A group is not started with less than this left (interpreter, torch and transformers import,
# CUDA context, model build, a few steps).
MIN_GROUP_S = 20.0


def log(text=""):
    print("[run_e2e %s] %s" % (time.strftime("%H:%M:%S"), text), flush=True)


def _csv(kind, allowed=None):
    def parse(text):
        items = [x.strip() for x in text.split(",") if x.strip()]
        if kind is int:
            out = []
            for x in items:
                low = x.lower()
                out.append(int(low[:-1]) * 1024 if low.endswith("k") else int(low))
            return out
        if allowed:
            bad = [x for x in items if x not in allowed]
            if bad:
                raise argparse.ArgumentTypeError("%s not in %s" % (bad, allowed))
        return items
    return parse


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["sweep", "paired", "loss-curve", "all"], default="sweep",
                   help="what to run (see above)")
    p.add_argument("--loss-curve", action="store_true", help="same as --mode loss-curve")
    p.add_argument("--report-only", action="store_true",
                   help="only rewrite RESULTS.md and plots from the JSON in --out-dir")
    p.add_argument("--out-dir", default=HERE, help="where JSON, RESULTS.md, plots and logs go")
    p.add_argument("--budget-seconds", type=float, default=None,
                   help="wall-clock budget for the whole invocation (default: 420 sweep, "
                        "150 paired, 180 loss-curve, 480 all)")
    p.add_argument("--python", default=sys.executable, help="interpreter for train_llama.py")
    p.add_argument("--device", default=None, help="passed to train_llama.py (default: its own)")
    p.add_argument("--tiny", action="store_true",
                   help="CPU-sized smoke run: train_llama --tiny, S in 64,128, 2 steps "
                        "(paired: 2 rounds, 1 warm-up)")
    p.add_argument("--train-args", default="",
                   help="extra train_llama.py arguments for every run, e.g. \"--kv-heads 8\"")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    s = p.add_argument_group("sweep")
    s.add_argument("--seqs", type=_csv(int), default=[2048, 4096, 8192, 16384, 32768],
                   help="sequence lengths (2k style accepted; the paired runs' too)")
    s.add_argument("--attn", type=_csv(str, ATTN_ORDER), default=["sdpa", "flashtrain", "eager"],
                   help="attentions")
    s.add_argument("--dtypes", type=_csv(str, ["bf16", "fp16"]), default=["bf16", "fp16"], help="dtypes")
    s.add_argument("--checkpoint", type=_csv(str, CKPT_ORDER), default=CKPT_ORDER,
                   help="flashtrain-policy runs with --attn flashtrain only")
    s.add_argument("--layers", type=int, default=4, help="decoder layers (the paired runs' too)")
    s.add_argument("--tokens-per-step", type=int, default=16384,
                   help="tokens per optimizer step (the paired runs' too)")
    s.add_argument("--steps", type=int, default=5, help="steps per configuration")
    s.add_argument("--warmup-steps", type=int, default=2,
                   help="first steps left out of tokens/s and MFU")
    q = p.add_argument_group("paired (S from --seqs)")
    q.add_argument("--paired-attn", type=_csv(str, ATTN_ORDER), default=["sdpa", "flashtrain"],
                   help="attentions compared in one process; ratios are to the first")
    q.add_argument("--paired-dtypes", type=_csv(str, ["bf16", "fp16"]), default=["bf16"],
                   help="one train_llama.py --compare process each")
    q.add_argument("--paired-rounds", type=int, default=12,
                   help="measured rounds (one optimizer step per attention each) per S")
    q.add_argument("--paired-warmup", type=int, default=2, help="unmeasured rounds first")
    q.add_argument("--paired-budget-seconds", type=float, default=100.0,
                   help="with --mode all: the part of the budget kept for the paired runs")
    l = p.add_argument_group("loss curves")
    l.add_argument("--lc-steps", type=int, default=300, help="steps per run")
    l.add_argument("--lc-seq", type=int, default=1024, help="sequence length")
    l.add_argument("--lc-layers", type=int, default=2, help="decoder layers")
    l.add_argument("--lc-tokens-per-step", type=int, default=8192, help="tokens per optimizer step")
    l.add_argument("--lc-attn", type=_csv(str, ATTN_ORDER), default=["sdpa", "flashtrain"],
                   help="attentions, one run each per dtype")
    l.add_argument("--lc-dtypes", type=_csv(str, ["bf16", "fp16"]), default=["bf16", "fp16"],
                   help="dtypes")
    l.add_argument("--lc-budget-seconds", type=float, default=170.0,
                   help="with --mode all: the part of the budget kept for the loss curves")
    args = p.parse_args(argv)
    if args.loss_curve:
        args.mode = "loss-curve"
    if len(args.paired_attn) < 2 or len(set(args.paired_attn)) < len(args.paired_attn):
        p.error("--paired-attn needs two or more different attentions")
    if args.budget_seconds is None:
        args.budget_seconds = {"sweep": 420.0, "paired": 150.0, "loss-curve": 180.0, "all": 480.0}[args.mode]
    if args.tiny:
        if args.seqs == p.get_default("seqs"):
            args.seqs = [64, 128]
        for name, small in (("layers", 2), ("tokens_per_step", 512), ("lc_tokens_per_step", 512),
                            ("lc_layers", 2)):
            if getattr(args, name) == p.get_default(name):
                setattr(args, name, small)
        args.steps, args.warmup_steps = min(args.steps, 2), min(args.warmup_steps, 1)
        args.paired_rounds, args.paired_warmup = min(args.paired_rounds, 2), min(args.paired_warmup, 1)
        args.lc_steps = min(args.lc_steps, 5)
        args.lc_seq = min(args.lc_seq, 64)
    return args


# ----------------------------------------------------------------------------------------------
# Running train_llama.py


def _common_args(args):
    extra = []
    if args.tiny:
        extra += ["--tiny"]
    if args.device:
        extra += ["--device", args.device]
    return extra + shlex.split(args.train_args)


def run_subprocess(cmd, log_path, deadline, prefix):
    """Runs cmd, streaming its lines with a prefix; kills its process group at deadline + GRACE_S.
    Returns (exit status or None when killed, seconds, last output lines)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.time()
    tail = []
    with open(log_path, "a") as logf:
        logf.write("$ %s\n" % " ".join(shlex.quote(c) for c in cmd))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                cwd=REPO, start_new_session=True, universal_newlines=True, bufsize=1)
        killed = []

        def kill():
            killed.append(True)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(max(1.0, deadline + GRACE_S - time.time()), kill)
        timer.start()
        try:
            for line in proc.stdout:
                logf.write(line)
                tail = (tail + [line.rstrip()])[-40:]
                if "UserWarning" in line or line.startswith("  "):
                    continue
                print("  %s| %s" % (prefix, line.rstrip()), flush=True)
            proc.wait()
        finally:
            timer.cancel()
    return (None if killed else proc.returncode), time.time() - t0, tail


def _read_jsonl(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    return out


def run_group(args, label, train_args, seqs, deadline, logs_dir, steps):
    """Runs train_llama.py for `seqs` (one process, restarted after a crash); returns results."""
    results = []
    remaining = list(seqs)
    attempt = 0
    while remaining:
        if deadline - time.time() < MIN_GROUP_S:
            for seq in remaining:
                results.append(dict(_base(train_args, seq), status="skipped-budget",
                                    error="budget spent before this run"))
            break
        attempt += 1
        jsonl = os.path.join(logs_dir, "%s.%d.jsonl" % (label, attempt))
        if os.path.exists(jsonl):
            os.remove(jsonl)
        cmd = [args.python, TRAIN] + train_args + [
            "--seq", ",".join(str(s) for s in remaining), "--steps", str(steps),
            "--jsonl", jsonl, "--no-progress", "--deadline", "%.1f" % deadline]
        rc, secs, tail = run_subprocess(cmd, os.path.join(logs_dir, label + ".log"), deadline, label)
        got = _read_jsonl(jsonl)
        results += got
        done = {r["seq"] for r in got}
        remaining = [s for s in remaining if s not in done]
        if not remaining:
            break
        first, remaining = remaining[0], remaining[1:]
        if rc is None:
            status, why = "timeout", "killed at the budget deadline"
        else:
            status, why = "crash", "exit status %s" % rc
        log("%s: S=%d %s (%s); last output:\n    %s" % (label, first, status, why,
                                                      "\n    ".join(tail[-8:])))
        results.append(dict(_base(train_args, first), status=status, error=why,
                            output_tail="\n".join(tail[-20:])))
        if rc is None:
            for seq in remaining:
                results.append(dict(_base(train_args, seq), status="skipped-budget",
                                    error="budget spent before this run"))
            break
    return results


def _base(train_args, seq):
    get = lambda flag, default: train_args[train_args.index(flag) + 1] if flag in train_args else default
    return {"attn": get("--attn", get("--compare", "?")), "dtype": get("--dtype", "bf16"),
            "checkpoint": get("--checkpoint", "none"), "seq": seq, "steps": []}


def sweep_groups(args):
    groups = []
    for dtype in args.dtypes:
        for ckpt in [c for c in CKPT_ORDER if c in args.checkpoint]:
            for attn in [a for a in args.attn]:
                if ckpt == "flashtrain-policy" and attn != "flashtrain":
                    continue
                groups.append((attn, dtype, ckpt))
    # Priority within the budget: the first dtype without checkpointing (all attentions: eager's
    # out-of-memory points belong in that table), then sdpa and flashtrain through the
    # checkpointing modes and the other dtype, eager's remaining groups last.
    first = args.dtypes[0] if args.dtypes else None

    def priority(group):
        attn, dtype, ckpt = group
        late_eager = attn == "eager" and not (dtype == first and ckpt == "none")
        return (late_eager, dtype != first or ckpt != "none", args.dtypes.index(dtype),
                CKPT_ORDER.index(ckpt))
    return sorted(groups, key=priority)


def run_sweep(args, deadline):
    out_json = os.path.join(args.out_dir, "sweep.json")
    logs_dir = os.path.join(args.out_dir, "logs")
    os.makedirs(logs_dir, exist_ok=True)
    groups = sweep_groups(args)
    log("sweep: %d groups x S in %s, %d steps each (%d warm-up), %d layers, %d tokens/step, "
        "budget %.0f s" % (len(groups), args.seqs, args.steps, args.warmup_steps, args.layers,
                           args.tokens_per_step, deadline - time.time()))
    if args.dry_run:
        for g in groups:
            log("  plan: attn=%s dtype=%s checkpoint=%s" % g)
        return
    data = {"kind": "sweep", "started": _now(), "commit": _commit(), "settings": {
        "seqs": args.seqs, "layers": args.layers, "tokens_per_step": args.tokens_per_step,
        "steps": args.steps, "warmup_steps": args.warmup_steps, "train_args": args.train_args,
        "tiny": args.tiny, "budget_seconds": args.budget_seconds}, "results": []}
    for i, (attn, dtype, ckpt) in enumerate(groups):
        label = "sweep_%s_%s_%s" % (attn, dtype, ckpt)
        left = deadline - time.time()
        log("group %d/%d: attn=%s dtype=%s checkpoint=%s (%.0f s of budget left)"
            % (i + 1, len(groups), attn, dtype, ckpt, left))
        train_args = ["--attn", attn, "--dtype", dtype, "--checkpoint", ckpt, "--layers",
                      str(args.layers), "--tokens-per-step", str(args.tokens_per_step),
                      "--warmup-steps", str(args.warmup_steps), "--log-every", "1"] + _common_args(args)
        data["results"] += run_group(args, label, train_args, args.seqs, deadline, logs_dir, args.steps)
        _write_json(out_json, data)
        write_report(args.out_dir, with_plots=False)
        for r in data["results"][-len(args.seqs):]:
            if r.get("attn") == attn and r.get("dtype") == dtype and r.get("checkpoint") == ckpt:
                log("  S=%-6d %-15s %s" % (r["seq"], r["status"], _short(r)))
    data["finished"] = _now()
    _write_json(out_json, data)
    log("sweep done: %s" % out_json)


def run_paired(args, deadline):
    out_json = os.path.join(args.out_dir, "paired.json")
    logs_dir = os.path.join(args.out_dir, "logs")
    os.makedirs(logs_dir, exist_ok=True)
    steps = args.paired_rounds + args.paired_warmup
    log("paired: --compare %s, %s, S in %s, %d rounds (%d warm-up), %d layers, %d tokens/step, "
        "budget %.0f s" % (",".join(args.paired_attn), ",".join(args.paired_dtypes), args.seqs, steps,
                           args.paired_warmup, args.layers, args.tokens_per_step, deadline - time.time()))
    if args.dry_run:
        for dtype in args.paired_dtypes:
            log("  plan: one process: --compare %s --dtype %s --checkpoint none --seq %s"
                % (",".join(args.paired_attn), dtype, ",".join(str(s) for s in args.seqs)))
        return
    data = {"kind": "paired", "started": _now(), "commit": _commit(), "settings": {
        "seqs": args.seqs, "attn": args.paired_attn, "dtypes": args.paired_dtypes,
        "layers": args.layers, "tokens_per_step": args.tokens_per_step, "rounds": steps,
        "warmup_rounds": args.paired_warmup, "train_args": args.train_args, "tiny": args.tiny,
        "budget_seconds": args.budget_seconds}, "results": []}
    for i, dtype in enumerate(args.paired_dtypes):
        share = (deadline - time.time()) / (len(args.paired_dtypes) - i)
        label = "paired_%s" % dtype
        log("paired run %d/%d: dtype=%s (%.0f s share)" % (i + 1, len(args.paired_dtypes), dtype, share))
        # Each S's rounds stop early at an equal part of the share, so every S gets measured.
        train_args = ["--compare", ",".join(args.paired_attn), "--dtype", dtype, "--checkpoint", "none",
                      "--layers", str(args.layers), "--tokens-per-step", str(args.tokens_per_step),
                      "--warmup-steps", str(args.paired_warmup), "--max-seconds",
                      "%.0f" % max(5.0, (share - MIN_GROUP_S) / len(args.seqs))] + _common_args(args)
        data["results"] += run_group(args, label, train_args, args.seqs, time.time() + share,
                                     logs_dir, steps)
        _write_json(out_json, data)
        write_report(args.out_dir, with_plots=False)
    data["finished"] = _now()
    _write_json(out_json, data)
    log("paired done: %s" % out_json)


def run_loss_curves(args, deadline):
    out_json = os.path.join(args.out_dir, "loss_curve.json")
    logs_dir = os.path.join(args.out_dir, "logs")
    os.makedirs(logs_dir, exist_ok=True)
    runs = [(attn, dtype) for dtype in args.lc_dtypes for attn in args.lc_attn]
    log("loss curves: %d runs (%s), %d steps at S=%d, %d layers, %d tokens/step, budget %.0f s"
        % (len(runs), ", ".join("%s/%s" % r for r in runs), args.lc_steps, args.lc_seq,
           args.lc_layers, args.lc_tokens_per_step, deadline - time.time()))
    if args.dry_run:
        return
    data = {"kind": "loss-curve", "started": _now(), "commit": _commit(), "settings": {
        "steps": args.lc_steps, "seq": args.lc_seq, "layers": args.lc_layers,
        "tokens_per_step": args.lc_tokens_per_step, "train_args": args.train_args,
        "tiny": args.tiny}, "results": []}
    for i, (attn, dtype) in enumerate(runs):
        left = deadline - time.time()
        share = left / (len(runs) - i)
        # Each run gets an equal share of what is left: its training loop stops early at
        # share - (startup estimate), so every curve gets drawn even when the budget is short.
        run_deadline = time.time() + share
        label = "losscurve_%s_%s" % (attn, dtype)
        log("loss-curve run %d/%d: attn=%s dtype=%s (%.0f s share)" % (i + 1, len(runs), attn, dtype, share))
        train_args = ["--attn", attn, "--dtype", dtype, "--checkpoint", "none", "--layers",
                      str(args.lc_layers), "--tokens-per-step", str(args.lc_tokens_per_step),
                      "--log-every", str(max(1, args.lc_steps // 20)),
                      "--max-seconds", "%.0f" % max(5.0, share - 10.0)] + _common_args(args)
        data["results"] += run_group(args, label, train_args, [args.lc_seq], run_deadline,
                                     logs_dir, args.lc_steps)
        r = data["results"][-1]
        log("  %s/%s: %s, %d steps, final loss %s, non-finite steps %s" % (
            attn, dtype, r["status"], len(r.get("steps", [])), _fmt(r.get("final_loss")),
            r.get("nonfinite_steps")))
        _write_json(out_json, data)
        write_report(args.out_dir, with_plots=False)
    data["finished"] = _now()
    data["comparison"] = compare_curves(data["results"])
    _write_json(out_json, data)
    for line in _comparison_lines(data["comparison"]):
        log(line)
    log("loss curves done: %s" % out_json)


# ----------------------------------------------------------------------------------------------
# Analysis and report


def _losses(r):
    return [s["loss"] if isinstance(s["loss"], (int, float)) else float("nan") for s in r.get("steps", [])]


def compare_curves(results, window=50):
    """Per dtype: each attention against sdpa over their common steps."""
    out = []
    by = {(r["attn"], r["dtype"]): r for r in results if r.get("steps")}
    for (attn, dtype), r in sorted(by.items()):
        ref = by.get(("sdpa", dtype))
        if attn == "sdpa" or ref is None:
            continue
        a, b = _losses(r), _losses(ref)
        n = min(len(a), len(b))
        if n == 0:
            continue
        w = min(window, n)
        diffs = [abs(x - y) for x, y in zip(a[:n], b[:n])]
        tail_a, tail_b = a[n - w:n], b[n - w:n]
        # Step-to-step noise of the reference curve: std of its first differences / sqrt(2).
        d1 = [tail_b[i + 1] - tail_b[i] for i in range(len(tail_b) - 1)]
        noise = _std(d1) / math.sqrt(2) if len(d1) > 1 else float("nan")
        out.append({"dtype": dtype, "attn": attn, "reference": "sdpa", "steps_compared": n,
                    "max_abs_diff": max(diffs), "mean_abs_diff_last": sum(diffs[n - w:]) / w,
                    "mean_loss_last": _mean(tail_a), "mean_loss_last_reference": _mean(tail_b),
                    "reference_step_noise_last": noise, "window": w,
                    "nonfinite_steps": r.get("nonfinite_steps"),
                    "nonfinite_steps_reference": ref.get("nonfinite_steps")})
    return out


def _comparison_lines(comparison):
    lines = []
    for c in comparison:
        lines.append("%s vs sdpa, %s: %d steps; |diff| max %.4f, mean over last %d %.4f (sdpa's "
                     "step-to-step noise there %.4f); mean loss last %d: %.4f vs %.4f; non-finite "
                     "steps %s vs %s" % (c["attn"], c["dtype"], c["steps_compared"], c["max_abs_diff"],
                                          c["window"], c["mean_abs_diff_last"],
                                          c["reference_step_noise_last"], c["window"],
                                          c["mean_loss_last"], c["mean_loss_last_reference"],
                                          c["nonfinite_steps"], c["nonfinite_steps_reference"]))
    return lines


def _mean(xs):
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


def _std(xs):
    m = _mean(xs)
    xs = [x for x in xs if x == x]
    return math.sqrt(sum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1)) if xs else float("nan")


def _fmt(x, digits=4):
    return "-" if x is None else ("%.*f" % (digits, x) if isinstance(x, float) else str(x))


def _short(r):
    if r.get("status") == "ok":
        return "%.0f tok/s, MFU %.1f%%, peak %s GiB, loss %s, non-finite %s" % (
            r.get("tokens_per_s", 0), 100 * r.get("mfu", 0), r.get("peak_mem_gib"),
            _fmt(r.get("final_loss")), r.get("nonfinite_steps"))
    return (r.get("error") or "")[:200]


def _cell_speed(r):
    if r is None:
        return "not run"
    st = r.get("status")
    if st == "ok":
        if "tokens_per_s" not in r:
            return "ok"
        return "%.1fk (%.0f%%)%s" % (r["tokens_per_s"] / 1e3, 100 * r["mfu"],
                                     "*" if r.get("stopped_early") else "")
    return {"oom": "OOM", "oom-skipped": "OOM\u2020", "skipped-budget": "budget"}.get(st, st)


def _cell_mem(r):
    if r is None or r.get("peak_mem_gib") is None:
        return "-" if r is None or r.get("status") != "oom" else "OOM"
    return "%.1f" % r["peak_mem_gib"]


def markdown(sweep, losscurve, paired, plot_files=()):
    lines = ["# End-to-end Llama training: eager vs torch SDPA vs flashtrain", ""]
    env = None
    for data in (sweep, losscurve, paired):
        for r in (data or {}).get("results", []):
            env = env or r.get("environment")
    if env:
        lines += ["Machine: %s (%s GiB), torch %s, CUDA %s, transformers %s." % (
            env.get("gpu", env.get("device")), env.get("gpu_memory_gib", "-"), env.get("torch"),
            env.get("cuda", "-"), env.get("transformers")), ""]
    lines += [
        "Written by `bench/e2e/run_e2e.py` from `sweep.json` / `paired.json` / `loss_curve.json`. "
        "Model: random-init LlamaForCausalLM with Llama-2-7B dimensions (hidden 4096, 32 heads, head "
        "dim 128, intermediate 11008, vocab 32000), cut to the layers below; synthetic token stream; "
        "AdamW, clip 1.0; bf16/fp16 = autocast over fp32 master weights (fp16 with a GradScaler).",
        "Tokens/s over the measured steps (after warm-up), MFU in parentheses: model FLOPs "
        "(6 x matmul parameters incl. lm_head + causal attention 6 x L x S x 4096 per token; no "
        "checkpoint recompute counted) / H200 dense bf16 peak 989 TFLOP/s. Memory: "
        "torch.cuda.max_memory_allocated over the run, GiB. OOM\u2020: not run because a shorter S "
        "ran out of memory; budget: not run within the time budget; *: stopped early by the budget "
        "(fewer measured steps).", ""]
    if sweep:
        st = sweep.get("settings", {})
        lines += ["## Sweep", "",
                  "Commit %s, %s. %s layers, %s tokens per step (one sequence when S is larger), %s "
                  "steps per configuration of which %s warm-up. Each configuration runs in its own "
                  "process, minutes apart: for speed ratios see the paired section." % (
                      sweep.get("commit", "?"), sweep.get("started", "?"), st.get("layers"),
                      st.get("tokens_per_step"), st.get("steps"), st.get("warmup_steps")), ""]
        res = sweep.get("results", [])
        idx = {(r["attn"], r["dtype"], r["checkpoint"], r["seq"]): r for r in res}
        attns = [a for a in ATTN_ORDER if any(r["attn"] == a for r in res)]
        combos = []
        for r in res:
            c = (r["dtype"], r["checkpoint"])
            if c not in combos:
                combos.append(c)
        seqs = sorted({r["seq"] for r in res})
        for dtype, ckpt in combos:
            present = [a for a in attns if any(k[0] == a and k[1] == dtype and k[2] == ckpt for k in idx)]
            lines += ["### %s, checkpointing: %s" % (dtype, ckpt), ""]
            head = ["S"] + ["%s tok/s (MFU)" % a for a in present] + ["%s GiB" % a for a in present]
            both = "sdpa" in present and "flashtrain" in present
            if both:
                head += ["flashtrain/sdpa speed", "flashtrain/sdpa memory"]
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for s in seqs:
                row = [_seq_label(s)]
                cells = [idx.get((a, dtype, ckpt, s)) for a in present]
                row += [_cell_speed(c) for c in cells] + [_cell_mem(c) for c in cells]
                if both:
                    f, q = idx.get(("flashtrain", dtype, ckpt, s)), idx.get(("sdpa", dtype, ckpt, s))
                    ok = f and q and f.get("tokens_per_s") and q.get("tokens_per_s")
                    row.append("%.2fx" % (f["tokens_per_s"] / q["tokens_per_s"]) if ok else "-")
                    okm = f and q and f.get("peak_mem_gib") and q.get("peak_mem_gib") and \
                        f.get("status") == "ok" and q.get("status") == "ok"
                    row.append("%.2fx" % (f["peak_mem_gib"] / q["peak_mem_gib"]) if okm else "-")
                lines.append("| " + " | ".join(row) + " |")
            lines.append("")
        bad = [r for r in res if r.get("status") not in ("ok", "oom", "oom-skipped", "skipped-budget")]
        nonfinite = [r for r in res if r.get("nonfinite_steps")]
        if bad or nonfinite:
            lines += ["Problems:", ""]
            for r in bad:
                lines.append("- %s %s %s S=%s: %s: %s" % (r["attn"], r["dtype"], r["checkpoint"], r["seq"],
                                                        r["status"], (r.get("error") or "")[:300]))
            for r in nonfinite:
                lines.append("- %s %s %s S=%s: %d non-finite steps of %d" % (
                    r["attn"], r["dtype"], r["checkpoint"], r["seq"], r["nonfinite_steps"], len(r["steps"])))
            lines.append("")
    if paired:
        lines += paired_markdown(paired)
    if losscurve:
        st = losscurve.get("settings", {})
        lines += ["## Loss curves", "",
                  "Commit %s, %s. %s steps at S=%s, %s layers, %s tokens per step; same "
                  "initialisation and data for every run." % (
                      losscurve.get("commit", "?"), losscurve.get("started", "?"), st.get("steps"),
                      st.get("seq"), st.get("layers"), st.get("tokens_per_step")), "",
                  "| attention | dtype | status | steps | first loss | final loss | non-finite steps "
                  "(loss / grad) | tokens/s |", "|---|---|---|---|---|---|---|---|"]
        for r in losscurve.get("results", []):
            lines.append("| %s | %s | %s | %d | %s | %s | %s (%s / %s) | %s |" % (
                r["attn"], r["dtype"], r["status"], len(r.get("steps", [])), _fmt(r.get("first_loss")),
                _fmt(r.get("final_loss")), r.get("nonfinite_steps", "-"), r.get("nonfinite_loss_steps", "-"),
                r.get("nonfinite_grad_steps", "-"),
                "%.0f" % r["tokens_per_s"] if r.get("tokens_per_s") else "-"))
        lines.append("")
        comp = losscurve.get("comparison") or compare_curves(losscurve.get("results", []))
        if comp:
            lines += ["| vs sdpa | dtype | steps | max \\|diff\\| | mean \\|diff\\| last N | sdpa step noise "
                      "last N | mean loss last N (this / sdpa) |", "|---|---|---|---|---|---|---|"]
            for c in comp:
                lines.append("| %s | %s | %d | %.4f | %.4f (N=%d) | %.4f | %.4f / %.4f |" % (
                    c["attn"], c["dtype"], c["steps_compared"], c["max_abs_diff"], c["mean_abs_diff_last"],
                    c["window"], c["reference_step_noise_last"], c["mean_loss_last"],
                    c["mean_loss_last_reference"]))
            lines.append("")
        lines += ["fp16 runs use a GradScaler that starts at 2^16: steps it skips while finding "
                  "its scale count as non-finite (grad) steps.", ""]
    if plot_files:
        lines += ["Plots: " + ", ".join("[%s](%s)" % (f, f) for f in plot_files), ""]
    return "\n".join(lines)


def _seq_label(s):
    return "%dk" % (s // 1024) if s % 1024 == 0 else str(s)


def _cell_ratio(p):
    ci = " (95%% %.3f-%.3f)" % tuple(p["ratio_ci95"]) if p.get("ratio_ci95") else ""
    return "%.3fx%s [%.3f, %.3f] (%d)" % (p["ratio"], ci, p["ratio_min"], p["ratio_max"], p["rounds"])


def paired_markdown(paired):
    st = paired.get("settings", {})
    res = paired.get("results", [])
    names = next((r["compare"] for r in res if r.get("compare")), st.get("attn") or [])
    if not names:
        return []
    ref, others = names[0], names[1:]
    lines = ["## Paired speed (same process, ABBA)", "",
             "Commit %s, %s. %s layers, %s tokens per step; per S one model and optimizer, %s rounds "
             "of which %s warm-up; in each round every attention runs one optimizer step, in the "
             "order %s in even rounds and reversed in odd ones. tok/s: tokens per step / median "
             "measured step time. Ratio: median over the measured rounds of that round's tokens/s "
             "ratio, the median's distribution-free 95%% interval where there are 6 or more rounds "
             "(sign test), [min, max] (rounds). GiB: the largest per-step torch.cuda.max_memory_allocated "
             "(weights and optimizer state shared). SDPA backend: torch's choice for these shapes." % (
                 paired.get("commit", "?"), paired.get("started", "?"), st.get("layers"),
                 st.get("tokens_per_step"), st.get("rounds"), st.get("warmup_rounds"),
                 ", ".join(names)), ""]
    head = (["S", "dtype"] + ["%s tok/s (MFU)" % a for a in names] + ["%s/%s" % (b, ref) for b in others]
            + ["%s GiB" % a for a in names] + ["SDPA backend"])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(res, key=lambda r: (r.get("dtype", ""), r["seq"])):
        runs = r.get("impls") or {a: {"status": r.get("status")} for a in names}
        ratios = [r.get("paired", {}).get(b) or {} for b in others]
        row = ([_seq_label(r["seq"]) + ("*" if r.get("stopped_early") else ""), r.get("dtype", "-")]
               + [_cell_speed(runs.get(a)) for a in names]
               + [_cell_ratio(p) if p.get("rounds") else "-" for p in ratios]
               + [_cell_mem(runs.get(a)) for a in names] + [r.get("sdpa_backend") or "-"])
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "tok/s (MFU); *: stopped early by the budget (fewer rounds); OOM\u2020: not run because "
              "a shorter S ran out of memory.", ""]
    return lines


def plots(out_dir, sweep, losscurve, paired):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not importable: no PNG plots (rerun with --report-only where it is)")
        return []
    written = []
    colors = {"eager": "tab:red", "sdpa": "tab:blue", "flashtrain": "tab:green"}
    styles = {"none": "-", "flashtrain-policy": "--", "full": ":"}
    if sweep and sweep.get("results"):
        res = sweep["results"]
        dtypes = sorted({r["dtype"] for r in res})
        for key, ylabel, fname in (("tokens_per_s", "tokens/s", "tokens_per_s.png"),
                                   ("peak_mem_gib", "peak memory (GiB)", "peak_memory.png")):
            fig, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 4.5), squeeze=False)
            for ax, dtype in zip(axes[0], dtypes):
                series = {}
                for r in res:
                    if r["dtype"] == dtype:
                        series.setdefault((r["attn"], r["checkpoint"]), []).append(r)
                for (attn, ckpt), rs in sorted(series.items()):
                    rs = sorted(rs, key=lambda r: r["seq"])
                    pts = [(r["seq"], r[key]) for r in rs if r.get("status") == "ok" and r.get(key)]
                    oom = [r["seq"] for r in rs if r.get("status") in ("oom", "oom-skipped")]
                    lab = "%s, ckpt %s" % (attn, ckpt)
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], styles.get(ckpt, "-"),
                                marker="o", color=colors.get(attn), label=lab)
                    if oom:
                        ax.plot(oom, [0] * len(oom), "x", color=colors.get(attn), markersize=10,
                                label=None if pts else lab + " (OOM)")
                if key == "peak_mem_gib":
                    gpu = next((r.get("environment", {}).get("gpu_memory_gib") for r in res
                                if r.get("environment")), None)
                    if gpu:
                        ax.axhline(gpu, color="gray", lw=0.8)
                ax.set_xscale("log", base=2)
                seqs = sorted({r["seq"] for r in res})
                ax.set_xticks(seqs)
                ax.set_xticklabels([_seq_label(x) for x in seqs])
                ax.set_ylim(bottom=0)
                _label_axes(ax, "sequence length S (x at 0: out of memory)", ylabel,
                            "%s vs S, %s" % (ylabel, dtype), 7)
            fig.tight_layout()
            fig.savefig(os.path.join(out_dir, fname), dpi=110)
            plt.close(fig)
            written.append(fname)
    rows = [(r, b, p) for r in (paired or {}).get("results", [])
            for b, p in r.get("paired", {}).items() if p.get("rounds")]
    if rows:
        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        for dtype, b, vs in sorted({(r["dtype"], b, p["vs"]) for r, b, p in rows}):
            pts = sorted(((r["seq"], p) for r, bb, p in rows if r["dtype"] == dtype and bb == b),
                         key=lambda t: t[0])
            bars = [p.get("ratio_ci95") or (p["ratio_min"], p["ratio_max"]) for _, p in pts]
            ax.errorbar([x for x, _ in pts], [p["ratio"] for _, p in pts],
                        yerr=[[p["ratio"] - lo for (_, p), (lo, _) in zip(pts, bars)],
                              [hi - p["ratio"] for (_, p), (_, hi) in zip(pts, bars)]],
                        fmt="o-" if dtype == "bf16" else "s:", capsize=4, color=colors.get(b),
                        label="%s / %s, %s" % (b, vs, dtype))
        ax.axhline(1.0, color="gray", ls="--", lw=1)
        ax.set_xscale("log", base=2)
        seqs = sorted({r["seq"] for r, _, _ in rows})
        ax.set_xticks(seqs)
        ax.set_xticklabels([_seq_label(x) for x in seqs])
        _label_axes(ax, "sequence length S", "tokens/s ratio (median; bars: its 95% interval,\nor min-max under 6 rounds)",
                    "paired speed ratio, same process (ABBA)", 8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "paired_ratio.png"), dpi=110)
        plt.close(fig)
        written.append("paired_ratio.png")
    if losscurve and losscurve.get("results"):
        res = [r for r in losscurve["results"] if r.get("steps")]
        dtypes = sorted({r["dtype"] for r in res})
        fig, axes = plt.subplots(2, max(1, len(dtypes)), figsize=(6.5 * max(1, len(dtypes)), 7),
                                 squeeze=False, sharex="col", gridspec_kw={"height_ratios": [3, 1]})
        for col, dtype in enumerate(dtypes):
            ax, dax = axes[0][col], axes[1][col]
            by = {r["attn"]: r for r in res if r["dtype"] == dtype}
            for attn, r in sorted(by.items()):
                ax.plot(range(1, len(r["steps"]) + 1), _losses(r), color=colors.get(attn), lw=1,
                        label="%s (non-finite steps %s)" % (attn, r.get("nonfinite_steps")))
            ref = by.get("sdpa")
            for attn, r in sorted(by.items()):
                if attn == "sdpa" or ref is None:
                    continue
                a, b = _losses(r), _losses(ref)
                n = min(len(a), len(b))
                dax.plot(range(1, n + 1), [a[i] - b[i] for i in range(n)], color=colors.get(attn), lw=1,
                         label="%s - sdpa" % attn)
            _label_axes(ax, None, "loss", "training loss, %s" % dtype, 8)
            dax.axhline(0, color="gray", lw=0.8)
            _label_axes(dax, "step", "loss difference", None, 8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "loss_curves.png"), dpi=110)
        plt.close(fig)
        written.append("loss_curves.png")
    return written


def _label_axes(ax, xlabel, ylabel, title, fontsize):
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=fontsize)


def write_report(out_dir, with_plots=True):
    sweep = _load_json(os.path.join(out_dir, "sweep.json"))
    losscurve = _load_json(os.path.join(out_dir, "loss_curve.json"))
    paired = _load_json(os.path.join(out_dir, "paired.json"))
    if not sweep and not losscurve and not paired:
        log("no sweep.json, paired.json or loss_curve.json in %s: nothing to report" % out_dir)
        return
    if with_plots:
        written = plots(out_dir, sweep, losscurve, paired)
    else:
        written = [f for f in ("tokens_per_s.png", "peak_memory.png", "paired_ratio.png", "loss_curves.png")
                   if os.path.exists(os.path.join(out_dir, f))]
    path = os.path.join(out_dir, "RESULTS.md")
    with open(path, "w") as f:
        f.write(markdown(sweep, losscurve, paired, written))
    log("wrote %s%s" % (path, "".join(", " + os.path.join(out_dir, w) for w in written)))


def _load_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def _write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def _now():
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def _commit():
    if os.environ.get("FLASHTRAIN_COMMIT"):  # the GPU machine's copy of the tree may carry a stale .git
        return os.environ["FLASHTRAIN_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                       stderr=subprocess.DEVNULL, universal_newlines=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    if args.report_only:
        write_report(args.out_dir)
        return 0
    start = time.time()
    deadline = start + args.budget_seconds
    log("mode %s, budget %.0f s, python %s, out-dir %s" % (args.mode, args.budget_seconds,
                                                           args.python, args.out_dir))
    kept = lambda *budgets: sum(budgets) if args.mode == "all" else 0.0  # for the later stages
    if args.mode in ("sweep", "all"):
        run_sweep(args, deadline - kept(args.paired_budget_seconds, args.lc_budget_seconds))
        if not args.dry_run:
            write_report(args.out_dir)
    if args.mode in ("paired", "all"):
        run_paired(args, deadline - kept(args.lc_budget_seconds))
        if not args.dry_run:
            write_report(args.out_dir)
    if args.mode in ("loss-curve", "all"):
        run_loss_curves(args, deadline)
        if not args.dry_run:
            write_report(args.out_dir)
    log("finished in %.0f s" % (time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
