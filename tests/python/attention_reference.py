"""Plain attention in torch, the ground truth of the Python tests (DESIGN.md §4).

reference(..., round_to=None) computes in float64: X64. reference(..., round_to=dtype) computes
the same naive attention but rounds every materialised intermediate (S, softcapped S, P, dropped
P, out, and their gradients in backward) to `dtype`: Xnaive, the error a plain PyTorch
implementation in that dtype makes. A flashtrain result X passes when, for every output,
max|X - X64| <= 2 * max|Xnaive - X64| + atol.

Layout is flashtrain's (BSHD; varlen [total, H, D] with int32 cu_seqlens). Semantics follow
include/flashtrain/attention.h's header comment.
"""
import math

import torch


class _RoundTo(torch.autograd.Function):
    """Identity in float64 that rounds the value, and the gradient, through `dtype`."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = dtype
        return x.to(dtype).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        return grad.to(ctx.dtype).to(grad.dtype), None


def _stage(x, round_to):
    return x if round_to is None else _RoundTo.apply(x, round_to)


def _dense(q, k, v, causal, top_left, window, softcap, alibi, scale, keep, dropout_p, round_to):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hk, *] float64 -> out [B, Sq, Hq, Dv], lse [B, Hq, Sq]."""
    batch, seqlen_q, heads_q, dim = q.shape
    seqlen_k, heads_k = k.shape[1], k.shape[2]
    group = heads_q // heads_k
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    scale = 1.0 / math.sqrt(dim) if scale is None else scale

    s = _stage(torch.matmul(qh, kh.transpose(-1, -2)) * scale, round_to)
    if softcap > 0:
        s = _stage(softcap * torch.tanh(s / softcap), round_to)
    offset = 0 if top_left else seqlen_k - seqlen_q
    rows = torch.arange(seqlen_q, dtype=torch.float64).view(-1, 1) + offset
    cols = torch.arange(seqlen_k, dtype=torch.float64).view(1, -1)
    if alibi is not None:
        slopes = alibi.to(torch.float64)
        slopes = slopes.view(1, heads_q, 1, 1) if slopes.dim() == 1 else slopes.view(batch, heads_q, 1, 1)
        s = _stage(s - slopes * (rows - cols).abs(), round_to)

    masked = torch.zeros(seqlen_q, seqlen_k, dtype=torch.bool)
    window_left, window_right = window
    if causal:
        window_right = 0
    if window_right >= 0:
        masked |= cols > rows + window_right
    if window_left >= 0:
        masked |= cols < rows - window_left
    s = s.masked_fill(masked, -math.inf)

    # Softmax with the row max detached (it cancels mathematically) and fully masked rows kept
    # finite, so autograd gives exact zeros there instead of NaN.
    visible = ~masked.all(dim=-1)
    row_max = s.detach().amax(dim=-1, keepdim=True)
    row_max = torch.where(visible.view(-1, 1), row_max, torch.zeros_like(row_max))
    e = torch.exp(s - row_max)
    total = e.sum(dim=-1, keepdim=True)
    total = torch.where(visible.view(-1, 1), total, torch.ones_like(total))
    p = _stage(e / total, round_to)
    lse = torch.where(visible, (row_max + torch.log(total)).squeeze(-1),
                      torch.full_like(total.squeeze(-1), -math.inf))
    if dropout_p > 0:
        p = _stage(p * keep.to(torch.float64) / (1.0 - dropout_p), round_to)
    out = _stage(torch.matmul(p, vh), round_to)
    return out.transpose(1, 2), lse


def reference(q, k, v, causal=False, top_left=False, window=(-1, -1), softcap=0.0, alibi=None,
              scale=None, keep=None, dropout_p=0.0, cu_seqlens_q=None, cu_seqlens_k=None,
              round_to=None):
    """Differentiable plain attention in float64 on float64 leaves q, k, v; returns (out, lse).

    keep: bool [B, Hq, Sq, Sk] dropout keep-mask (dense) or a list of [Hq, Sq_b, Sk_b] (varlen).
    """
    args = (causal, top_left, window, softcap)
    if cu_seqlens_q is None:
        return _dense(q, k, v, *args, alibi, scale, keep, dropout_p, round_to)
    outs, lses = [], []
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(len(cq) - 1):
        slope = None if alibi is None else (alibi if alibi.dim() == 1 else alibi[b])
        keep_b = None if keep is None else keep[b].unsqueeze(0)
        out, lse = _dense(q[cq[b]:cq[b + 1]].unsqueeze(0), k[ck[b]:ck[b + 1]].unsqueeze(0),
                          v[ck[b]:ck[b + 1]].unsqueeze(0), *args, slope, scale, keep_b,
                          dropout_p, round_to)
        outs.append(out[0])
        lses.append(lse[0])
    return torch.cat(outs, dim=0), torch.cat(lses, dim=1)


def max_error(x, ref):
    """max |x - ref| in float64; entries where ref is infinite must match exactly."""
    # The float64 reference may live on the CPU while x is on the GPU: compare on the CPU.
    x, ref = x.detach().to("cpu", torch.float64), ref.detach().to("cpu", torch.float64)
    infinite = torch.isinf(ref)
    if bool(infinite.any()):
        assert torch.equal(x[infinite], ref[infinite]), "infinite entries differ"
    diff = (x - ref).masked_fill(infinite, 0.0).abs()
    return float(diff.max()) if diff.numel() else 0.0


# atol of the §4 rule, in units of the dtype's epsilon relative to the largest |X64| (at least 1):
# it matters only where the naive error is tiny, e.g. a gradient that cancels to ~0 in float64
# (a row seeing one key has dS = P (dP - D) = 0) while a tiled kernel keeps a few ulps of |dP|,
# which is O(sqrt(D)) for N(0, 1) inputs.
ATOL_ULPS = 32


def atol_for(dtype, ref):
    finite = ref.detach()[torch.isfinite(ref.detach())]
    magnitude = float(finite.abs().max()) if finite.numel() else 1.0
    return ATOL_ULPS * torch.finfo(dtype).eps * max(magnitude, 1.0)


def assert_rule(name, x, x64, xnaive, dtype):
    """DESIGN.md §4: max|X - X64| <= 2 * max|Xnaive - X64| + atol."""
    err = max_error(x, x64)
    bound = 2.0 * max_error(xnaive, x64) + atol_for(dtype, x64)
    assert err <= bound, "%s: error %.3g exceeds 2 * naive error + atol = %.3g" % (name, err, bound)
