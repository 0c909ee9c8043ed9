"""Autograd for flashtrain attention: one torch.autograd.Function over the fwd/bwd operators.

It saves only what backward needs: q, k, v, out, lse and the dropout RNG state (seed, offset),
plus the small index/bias inputs (cu_seqlens, alibi_slopes) when given. Backward recomputes the
attention probabilities from them, so memory stays O(sequence length).
"""
import torch

from . import checkpoint, numerics, ops


def _last_dim_contiguous(t):
    # The operators take any strides except on the last dim; a gradient from .sum() or .expand()
    # can arrive with stride 0 there.
    return t if t.stride(-1) == 1 else t.contiguous()


# The precision keyword of the Python API and the operator's values for it.
PRECISIONS = {"default": ops.PRECISION_DEFAULT, "high": ops.PRECISION_HIGH}


def _precision_code(precision):
    if isinstance(precision, str) and precision in PRECISIONS:
        return PRECISIONS[precision]
    raise ValueError("precision must be one of %s, got %r"
                     % (", ".join(repr(p) for p in PRECISIONS), precision))


class FlashAttentionFunction(torch.autograd.Function):
    """apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    softmax_scale, causal, causal_top_left, window_left, window_right, softcap, alibi_slopes,
    rng_state, deterministic, precision=ops.PRECISION_DEFAULT) -> (out, lse); lse is not
    differentiable. precision (ops.PRECISION_DEFAULT or ops.PRECISION_HIGH) is backward's."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, causal_top_left, window_left, window_right, softcap,
                alibi_slopes, rng_state, deterministic, precision=ops.PRECISION_DEFAULT):
        # The monitor open now also receives this call's backward telemetry.
        ctx.report = numerics.active_report()
        out, lse = ops.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p, softmax_scale, causal, causal_top_left, window_left,
                           window_right, softcap, alibi_slopes, rng_state, ctx.report)
        ctx.save_for_backward(q, k, v, out, lse, rng_state, cu_seqlens_q, cu_seqlens_k,
                              alibi_slopes)
        ctx.options = (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
                       causal_top_left, window_left, window_right, softcap)
        ctx.deterministic = deterministic
        ctx.precision = precision
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse, rng_state, cu_seqlens_q, cu_seqlens_k, alibi_slopes = ctx.saved_tensors
        (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, causal_top_left,
         window_left, window_right, softcap) = ctx.options
        dq, dk, dv = ops.bwd(_last_dim_contiguous(dout), q, k, v, out, lse, cu_seqlens_q,
                             cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                             causal, causal_top_left, window_left, window_right, softcap,
                             alibi_slopes, rng_state, ctx.deterministic, ctx.report,
                             ctx.precision)
        # One None per other input; torch drops the last when precision was left out of apply().
        return (dq, dk, dv) + (None,) * 15


def attention(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
              dropout_p=0.0, softmax_scale=None, causal=False, causal_top_left=False,
              window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
              precision="default"):
    """Differentiable attention on BSHD (or varlen) tensors; returns (out, lse).

    precision="high" makes the backward keep P and dS beyond the input dtype's precision (on CUDA
    each split into two 16-bit halves: a slower backward); "default" lets the CUDA kernels round
    them to the input dtype, as FlashAttention does. The CPU keeps them in fp32 either way, and
    the forward is the same either way. Anything else raises ValueError.

    Draws the dropout RNG state when dropout_p > 0 (see ops.draw_rng_state) and reports a
    forward run inside a checkpoint recomputation (see flashtrain.checkpoint).
    """
    precision_code = _precision_code(precision)
    checkpoint.warn_if_recomputing()
    window_left, window_right = window_size
    rng_state = ops.draw_rng_state() if dropout_p > 0 else None
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    return FlashAttentionFunction.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, dropout_p, softmax_scale, causal,
                                        causal_top_left, window_left, window_right, softcap,
                                        alibi_slopes, rng_state, deterministic, precision_code)
