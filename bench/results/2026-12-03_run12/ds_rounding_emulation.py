#!/usr/bin/env python3
"""Float64 emulation of the default backward's roundings on the doctor's bf16 cases, to find which
one sets the dq error above the floor, and what a cheaper remedy than precision="high" would buy.

The GPU default backward (sm90 and sm80) rounds P to the input dtype for dV = P^T dO and dS for
dK = dS^T Q and dQ = dS K, takes D = rowsum(dO * out) from the stored (rounded) out, and rounds
each gradient to the dtype at the end. Here every product is exact (float64) and only those
roundings are applied, one at a time, so each line isolates one term. dS for the dQ product:
  bf16           as the kernels do now
  fp16 row-exact dS * 2^e_i rounded to fp16, e_i from the row's largest |dS| (largest value below
                 2^15), K rounded to fp16 (a bf16 K inside fp16's range converts exactly)
  fp16 row-bound the same with e_i from a bound the kernel can know before the row's dS exists:
                 |dS_ij| <= |dP_ij| + |D_i| <= 2 |dO_i| max_j |V_j|
  exact          no rounding of dS (the floor the other roundings leave)
  fp16 row-exact, dK fp16 head  as fp16 row-exact, and dS for dK in fp16 too, one exponent per
                 head (dK = dS^T Q sums over the rows, so a row's exponent cannot be undone after
                 the sum), Q rounded to fp16
Errors are the doctor's (max |x - x64| / max |x64|, python/flashtrain/doctor.py compare()).

Usage: FLASHTRAIN_TORCH_LIBRARY=... PYTHONPATH=python python3 bench/results/2026-12-03_run12/ds_rounding_emulation.py
       [--case NAME] [--seed N]
"""
import argparse
import math

import torch

from flashtrain import doctor


def rnd(x, dtype):
    return x.to(dtype).double()


def fp16_rows(ds, exponent_of_max):
    """ds rounded to fp16 after scaling each row by 2^(14 - exponent_of_max), scaled back."""
    scale = torch.pow(2.0, 14.0 - exponent_of_max)
    return rnd(ds * scale, torch.float16) / scale


def emulate(case, q, k, v, dout):
    dt = case.dtype
    group = case.hq // case.hk
    # (B, H, S, D) views, K and V repeated over the query heads of their group.
    qh, doh = q.transpose(1, 2), dout.transpose(1, 2)
    kh = k.repeat_interleave(group, dim=2).transpose(1, 2)
    vh = v.repeat_interleave(group, dim=2).transpose(1, 2)
    scale = 1.0 / math.sqrt(case.d)
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    seen = case.mask()
    s = s.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.exp(s - lse)
    out = rnd(torch.matmul(p, vh), dt)  # the stored forward output
    dp = torch.matmul(doh, vh.transpose(-1, -2))
    dsum = (doh * out).sum(-1, keepdim=True)
    ds = p * (dp - dsum)

    def fold(x):  # (B, Hq, S, D) gradient of K or V -> (B, S, Hk, D), summed over the group
        b, hq, n, d = x.shape
        return x.view(b, hq // group, group, n, d).sum(2).transpose(1, 2)

    dv = rnd(fold(torch.matmul(rnd(p, dt).transpose(-1, -2), doh)), dt)
    dk = rnd(fold(torch.matmul(rnd(ds, dt).transpose(-1, -2), qh) * scale), dt)
    row_max = ds.abs().amax(-1, keepdim=True).clamp_min(1e-300)
    bound = 2 * doh.norm(dim=-1, keepdim=True) * vh.norm(dim=-1).amax(-1, keepdim=True).unsqueeze(-1)
    kh16 = rnd(kh, torch.float16)
    variants = {
        "bf16": (rnd(ds, dt), kh),
        "fp16 row-exact": (fp16_rows(ds, torch.floor(torch.log2(row_max))), kh16),
        "fp16 row-bound": (fp16_rows(ds, torch.floor(torch.log2(bound.clamp_min(1e-300)))), kh16),
        "exact": (ds, kh),
    }
    o = out.transpose(1, 2)
    results = {}
    for name, (ds_q, k_q) in variants.items():
        dq = rnd(torch.matmul(ds_q, k_q) * scale, dt).transpose(1, 2)
        results[name] = (o, dq, dk, dv)
    # dK = dS^T Q sums over query rows, so a per-row exponent would have to be undone inside the
    # sum: one exponent per head instead (Q here fits fp16 unscaled).
    head_max = ds.abs().amax(dim=(-1, -2), keepdim=True).clamp_min(1e-300)
    ds_k = fp16_rows(ds, torch.floor(torch.log2(head_max)))
    dk16 = rnd(fold(torch.matmul(ds_k.transpose(-1, -2), rnd(qh, torch.float16)) * scale), dt)
    results["fp16 row-exact, dK fp16 head"] = (o, results["fp16 row-exact"][1], dk16, dv)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", help="doctor cases whose name contains this (default: the bf16 ones"
                    " without masks)")
    ap.add_argument("--seed", type=int, action="append", help="input seeds (default 0)")
    args = ap.parse_args()
    wanted = args.case or ["GQA 16:1", "logits ~1e3 bf16"]
    for seed in args.seed or [0]:
        for case in doctor.stress_cases(False):
            if not any(w in case.name for w in wanted) or case.dtype != torch.bfloat16:
                continue
            q, k, v, dout = doctor.make_inputs(case, seed)
            ref = doctor.reference(case, q, k, v, dout)
            print("%s, seed %d: dS for dQ as      out       dq        dk        dv" % (case.name, seed))
            for name, got in emulate(case, q, k, v, dout).items():
                errors, _ = doctor.compare(case, got, ref)
                print("  %-28s %9.2e %9.2e %9.2e %9.2e" % (name, *errors))


if __name__ == "__main__":
    main()
