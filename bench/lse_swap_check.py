#!/usr/bin/env python3
"""Issue 5 diagnostic: which forward output makes flashtrain's backward less accurate than
FlashAttention-2's on the fp16 logits~1e3 case? Runs flashtrain's and torch's FlashAttention-2
forward on the doctor's inputs, reports each lse against the float64 one (and the exponent offset
the backward derives from it, lse * log2e in fp32) and where the two lse differ (how many rows,
correlation with the lse and with the row's top-2 logit gap, the rows that differ most next to the
float64 and cuBLAS fp32 row maxima), then runs both backwards with every combination of (out,
lse) and prints the dq / dk / dv errors (max |err| / max |ref|).

Usage (GPU, extension built): FLASHTRAIN_TORCH_LIBRARY=... PYTHONPATH=python \
    python3 bench/lse_swap_check.py [--case 'logits ~1e3 fp16']
"""
import argparse
import math

import torch

doctor = ops = None  # flashtrain's, imported by main() (so that --help needs no build)


def rel(x, ref):
    return ((x.double().cpu() - ref).abs().max() / ref.abs().max()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="logits ~1e3 fp16", help="a doctor case name (exact)")
    args = parser.parse_args()
    global doctor, ops
    from flashtrain import doctor, ops
    case = next(c for c in doctor.stress_cases(False) if c.name == args.case)
    q64, k64, v64, do64 = doctor.make_inputs(case)
    ref_out, ref_dq, ref_dk, ref_dv = doctor.reference(case, q64, k64, v64, do64)
    s = torch.matmul(q64.transpose(1, 2), k64.transpose(1, 2).transpose(-1, -2)) / math.sqrt(case.d)
    lse_exact = torch.logsumexp(s, dim=-1)  # [B, H, S]
    dev = dict(device="cuda", dtype=case.dtype)
    q, k, v, do = (t.to(**dev).contiguous() for t in (q64, k64, v64, do64))
    scale = 1.0 / math.sqrt(case.d)

    out_ft, lse_ft = ops.fwd(q, k, v, softmax_scale=scale)
    bhsd = lambda t: t.transpose(1, 2)
    fa = torch.ops.aten._scaled_dot_product_flash_attention(bhsd(q), bhsd(k), bhsd(v), 0.0, False, False,
                                                            scale=scale)
    out_fa, lse_fa = fa[0].transpose(1, 2).contiguous(), fa[1].contiguous()
    log2e = torch.tensor(1 / math.log(2), dtype=torch.float32)
    print("case %r: forward outputs against float64" % case.name)
    for name, o, l in (("flashtrain", out_ft, lse_ft), ("FA2", out_fa, lse_fa)):
        l = l.float().cpu()
        off = (l * log2e).double()  # the backward's exponent offset, rounded in fp32
        print("  %-10s out err %.3e   max|lse - exact| %.3e   max|lse*log2e - exact*log2e| %.3e" % (
            name, rel(o, ref_out), (l.double() - lse_exact).abs().max().item(),
            (off - lse_exact / math.log(2)).abs().max().item()))
    print("  max|lse_flashtrain - lse_FA2| %.3e" % (lse_ft.float() - lse_fa.float()).abs().max().item())
    # Where the two forwards' lse differ: rows, and how their difference relates to the row's logits.
    d = (lse_ft.double() - lse_fa.double()).cpu()
    top2 = torch.topk(s, 2, dim=-1).values  # float64 logits (scaled)
    gap = top2[..., 0] - top2[..., 1]
    torch.backends.cuda.matmul.allow_tf32 = False
    s32 = torch.matmul(bhsd(q).float(), bhsd(k).float().transpose(-1, -2)).double().cpu() * scale  # cuBLAS fp32
    print("  lse_flashtrain - lse_FA2: mean %.2e, rows above 1e-4: %d of %d, corr with lse %.3f, corr with gap %.3f" % (
        d.mean().item(), int((d.abs() > 1e-4).sum()), d.numel(),
        torch.corrcoef(torch.stack([d.flatten(), lse_exact.flatten()]))[0, 1].item(),
        torch.corrcoef(torch.stack([d.abs().flatten(), gap.flatten()]))[0, 1].item()))
    idx = torch.topk(d.abs().flatten(), 6).indices
    print("  rows with the largest difference (b, h, i): lse exact / flashtrain / FA2, top-2 gap, max S*scale exact / cuBLAS fp32")
    for f in idx.tolist():
        b_, rest = divmod(f, d.shape[1] * d.shape[2])
        h_, i_ = divmod(rest, d.shape[2])
        print("    (%d,%2d,%4d)  %.6f / %.6f / %.6f  gap %.3g  max %.6f / %.6f" % (
            b_, h_, i_, lse_exact[b_, h_, i_].item(), lse_ft[b_, h_, i_].item(), lse_fa[b_, h_, i_].item(),
            gap[b_, h_, i_].item(), top2[b_, h_, i_, 0].item(), s32[b_, h_, i_].max().item()))
    # The same rows' top dot product alone: one query, one key (its argmax), so lse = S * scale
    # exactly up to its own rounding, and each forward's S can be read off its lse. Equal values
    # mean the forwards compute q.k alike and the difference above comes from the row statistics.
    picks = []
    for f in idx.tolist():
        b_, rest = divmod(f, d.shape[1] * d.shape[2])
        h_, i_ = divmod(rest, d.shape[2])
        picks.append((b_, h_, i_, int(torch.argmax(s[b_, h_, i_]).item())))
    q1 = torch.stack([q64[b_, i_, h_] for b_, h_, i_, _ in picks]).view(len(picks), 1, 1, case.d)
    k1 = torch.stack([k64[b_, j_, h_] for b_, h_, _, j_ in picks]).view(len(picks), 1, 1, case.d)
    q1, k1 = q1.to(**dev).contiguous(), k1.to(**dev).contiguous()
    v1 = torch.ones_like(k1)
    _, lse1_ft = ops.fwd(q1, k1, v1, softmax_scale=scale)
    lse1_fa = torch.ops.aten._scaled_dot_product_flash_attention(bhsd(q1), bhsd(k1), bhsd(v1), 0.0, False, False,
                                                                 scale=scale)[1]
    s1_32 = (q1.float().view(len(picks), case.d) * k1.float().view(len(picks), case.d)).double().cpu()
    print("  one query, one key (the row's argmax): S = lse / scale; exact / flashtrain / FA2 / fp32 sum in order")
    for n, (b_, h_, i_, j_) in enumerate(picks):
        exact = (q64[b_, i_, h_] * k64[b_, j_, h_]).sum().item()
        ordered = 0.0
        for t in s1_32[n].tolist():  # sequential fp32 sum over d of the exact products
            ordered = float(torch.tensor(ordered + t, dtype=torch.float32))
        print("    (%d,%2d,%4d) key %4d  %.4f / %.4f / %.4f / %.4f" % (
            b_, h_, i_, j_, exact, lse1_ft.flatten()[n].item() / scale, lse1_fa.flatten()[n].item() / scale, ordered))

    def ft_bwd(o, l):
        return ops.bwd(do, q, k, v, o, l.contiguous(), softmax_scale=scale)

    def fa_bwd(o, l):
        fwd = torch.ops.aten._scaled_dot_product_flash_attention(bhsd(q), bhsd(k), bhsd(v), 0.0, False, False,
                                                                 scale=scale)
        g = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            bhsd(do), bhsd(q), bhsd(k), bhsd(v), bhsd(o), l, fwd[2], fwd[3], fwd[4], fwd[5], 0.0, False,
            fwd[6], fwd[7], scale=scale)
        return tuple(t.transpose(1, 2) for t in g[:3])

    print("backward errors (dq, dk, dv) by which forward's out and lse it is given:")
    for bname, bwd in (("flashtrain", ft_bwd), ("FA2", fa_bwd)):
        for oname, o in (("flashtrain", out_ft), ("FA2", out_fa)):
            for lname, l in (("flashtrain", lse_ft), ("FA2", lse_fa)):
                dq, dk, dv = bwd(o, l)
                torch.cuda.synchronize()
                print("  bwd %-10s out %-10s lse %-10s  dq %.3e  dk %.3e  dv %.3e" % (
                    bname, oname, lname, rel(dq, ref_dq), rel(dk, ref_dk), rel(dv, ref_dv)))


if __name__ == "__main__":
    main()
