#!/usr/bin/env python3
"""Float64 emulation of the sm90 bf16 backward's dQ = dS K with the scales of
src/cuda/sm90/bwd_ds_scale_sm90.h, at input magnitudes the GPU tests do not reach: does the scaled
fp16 dS keep dq at the error of an fp32 dS when dO is as small as in bf16 training (no loss
scaling), or V / K are large or small, and does the bound keep every scaled |dS| below 2^14?

For each case: dq's error (max |x - x64| / max |x64|, as the doctor measures it) with dS for the
dQ product
  bf16     rounded to bf16 (the kernels before 76543f0)
  kernel   fp16(dS_ij * s_i) and fp16(K_jd * 2^eK), undone exactly, with the kernel's formulas:
           f_i = 2^-b, max_k |dO_ik| < 2^b (the preprocess's do_scale, exponent clamped to
           [-100, 100]); per 128-key tile: vmax = max |V|, eK = 14 - b(max |K|) clamped to
           [-100, 100]; s_i = f_i 2^(14 - c), Dh vmax + |D_i| f_i < 2^c (exponent clamped to
           [-126, 126])
  exact    dS unrounded
and the largest |dS_ij s_i| over the tiles (must stay below 2^14 = 16384; fp16's max is 65504).
Every other rounding (P, out, the fp32 sums) is left out, so the columns isolate dS's.

Usage: python3 bench/results/2026-12-03_run13/ds_scale_extremes.py  (CPU, torch; about a minute)
"""
import math

import torch

S, D, H, TILE = 1024, 128, 4, 128


def exponent_above(x):
    """The least b with x < 2^b (elementwise; x >= 0), as the kernel's exponent_above for normals."""
    m, e = torch.frexp(x)  # x = m 2^e, 0.5 <= m < 1: x < 2^e, and 2^(e-1) <= x
    return torch.where(x > 0, e, torch.full_like(e, -126))


def rel_err(x, ref):
    return ((x - ref).abs().max() / ref.abs().max()).item()


def case(name, q_std, k_std, v_std, do_std, seed=0):
    g = torch.Generator().manual_seed(seed)

    def randn(std):
        return (torch.randn(H, S, D, generator=g, dtype=torch.float64) * std).to(torch.bfloat16).double()

    q, k, v, do = randn(q_std), randn(k_std), randn(v_std), randn(do_std)
    s = q @ k.transpose(-1, -2) / math.sqrt(D)
    p = torch.softmax(s, dim=-1)
    out = (p @ v).to(torch.bfloat16).double()
    dp = do @ v.transpose(-1, -2)
    dsum = (do * out).sum(-1, keepdim=True)
    ds = p * (dp - dsum)
    scale = 1.0 / math.sqrt(D)
    dq_exact = ds @ k * scale
    dq_bf16 = ds.to(torch.bfloat16).double() @ k * scale

    f_exp = -exponent_above(do.abs().amax(-1, keepdim=True)).clamp(-100, 100)  # f_i = 2^f_exp
    dq_kernel = torch.zeros_like(dq_exact)
    worst = 0.0
    for t in range(0, S, TILE):
        kt, vt, dst = k[:, t:t + TILE], v[:, t:t + TILE], ds[:, :, t:t + TILE]
        vmax = vt.abs().amax(dim=(-1, -2), keepdim=True)
        e_k = (14 - exponent_above(kt.abs().amax(dim=(-1, -2), keepdim=True))).clamp(-100, 100)
        f = torch.pow(2.0, f_exp.double())
        bound = D * vmax + dsum.abs() * f
        e_s = (f_exp + 14 - exponent_above(bound)).clamp(-126, 126)
        s_i = torch.pow(2.0, e_s.double())
        g_k = torch.pow(2.0, e_k.double())
        ds16 = (dst * s_i).to(torch.float16).double()
        k16 = (kt * g_k).to(torch.float16).double()
        worst = max(worst, (dst * s_i).abs().max().item())
        dq_kernel += (ds16 @ k16) / (s_i * g_k) * scale
    print(f"{name:44s} {rel_err(dq_bf16, dq_exact):9.2e} {rel_err(dq_kernel, dq_exact):9.2e}"
          f" {worst:10.1f}  max|dq| {dq_exact.abs().max().item():.2e}")


if __name__ == "__main__":
    print(f"H {H}, S {S}, D {D}, bf16 inputs; dq error of the dQ product against exact dS")
    print(f"{'case (q, k, v, dO std)':44s} {'bf16 dS':>9s} {'kernel':>9s} {'max|dS s|':>10s}")
    case("unit (1, 1, 1, 1)", 1, 1, 1, 1)
    case("bf16 training dO (1, 1, 1, 1e-7)", 1, 1, 1, 1e-7)
    case("tiny dO, large V (1, 1, 300, 1e-9)", 1, 1, 300, 1e-9)
    case("small K (1, 1e-3, 1, 1)", 1, 1e-3, 1, 1)
    case("large K, small q (1e-3, 1e3, 1, 1)", 1e-3, 1e3, 1, 1)
    case("issue #5 overflow scales (400, 0.01, 8, 3000)", 400, 0.01, 8, 3000)
    case("logits ~1e3 (30, 30, 1, 1)", 30, 30, 1, 1)
    case("huge dO (1, 1, 1, 1e30)", 1, 1, 1, 1e30)
    case("tiny V (1, 1, 1e-6, 1)", 1, 1, 1e-6, 1)
