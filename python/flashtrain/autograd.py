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


class FlashAttentionFunction(torch.autograd.Function):
    """apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
    softmax_scale, causal, causal_top_left, window_left, window_right, softcap, alibi_slopes,
    rng_state, deterministic) -> (out, lse); lse is not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                softmax_scale, causal, causal_top_left, window_left, window_right, softcap,
                alibi_slopes, rng_state, deterministic):
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
                             alibi_slopes, rng_state, ctx.deterministic, ctx.report)
        return (dq, dk, dv) + (None,) * 14


def attention(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
              dropout_p=0.0, softmax_scale=None, causal=False, causal_top_left=False,
              window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False):
    """Differentiable attention on BSHD (or varlen) tensors; returns (out, lse).

    Draws the dropout RNG state when dropout_p > 0 (see ops.draw_rng_state) and reports a
    forward run inside a checkpoint recomputation (see flashtrain.checkpoint).
    """
    checkpoint.warn_if_recomputing()
    window_left, window_right = window_size
    rng_state = ops.draw_rng_state() if dropout_p > 0 else None
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    return FlashAttentionFunction.apply(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                        max_seqlen_k, dropout_p, softmax_scale, causal,
                                        causal_top_left, window_left, window_right, softcap,
                                        alibi_slopes, rng_state, deterministic)
