"""The drop-in entry points.

flash_attn_func / flash_attn_varlen_func / the packed variants follow FlashAttention-2's
signatures and return conventions (BSHD layout, causal aligned bottom-right). With
return_attn_probs=True they return (out, softmax_lse, None): flashtrain never materialises the
attention probabilities, so the third element (FlashAttention-2's S_dmask) is None.
softmax_lse is float32 [B, Hq, Sq] (dense) or [Hq, total_q] (varlen) and is not differentiable.

scaled_dot_product_attention follows torch.nn.functional.scaled_dot_product_attention in the
(B, H, S, D) layout, with is_causal aligned top-left as torch does.

Every entry point takes precision="default" | "high" (keyword, last): "high" makes the backward
keep P and dS beyond the input dtype's precision, a slower CUDA backward (autograd.attention).

Dropout draws its (seed, offset) from torch's default CPU generator (ops.draw_rng_state), whatever
the device: torch.manual_seed() reproduces it, and backward reuses the same (seed, offset).
"""
from .autograd import attention


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False, precision="default"):
    """q [B, Sq, Hq, D], k [B, Sk, Hk, D], v [B, Sk, Hk, Dv] -> out [B, Sq, Hq, Dv]."""
    out, lse = attention(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale,
                         causal=causal, window_size=window_size, softcap=softcap,
                         alibi_slopes=alibi_slopes, deterministic=deterministic,
                         precision=precision)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                           softcap=0.0, alibi_slopes=None, deterministic=False,
                           return_attn_probs=False, block_table=None, precision="default"):
    """q [total_q, Hq, D], k [total_k, Hk, D], v [total_k, Hk, Dv]; cu_seqlens_q/k int32 [B + 1]
    prefix sums of the sequence lengths (on q's device) -> out [total_q, Hq, Dv]."""
    if block_table is not None:
        raise NotImplementedError("flash_attn_varlen_func: block_table (paged KV cache) is not "
                                  "supported by flashtrain; pass block_table=None")
    out, lse = attention(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                         int(max_seqlen_k), dropout_p=dropout_p, softmax_scale=softmax_scale,
                         causal=causal, window_size=window_size, softcap=softcap,
                         alibi_slopes=alibi_slopes, deterministic=deterministic,
                         precision=precision)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False,
                              window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                              deterministic=False, return_attn_probs=False,
                              precision="default"):
    """qkv [B, S, 3, H, D]; the gradient flows back into qkv through the views."""
    q, k, v = qkv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, precision=precision)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False,
                             window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                             deterministic=False, return_attn_probs=False,
                             precision="default"):
    """q [B, Sq, Hq, D], kv [B, Sk, 2, Hk, D]."""
    k, v = kv.unbind(dim=2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs, precision=precision)


def _describe(t):
    return "a %s tensor of shape %s" % (str(t.dtype).replace("torch.", ""), list(t.shape))


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False,
                                 precision="default"):
    """torch.nn.functional.scaled_dot_product_attention for (B, H, S, D) tensors.

    query [B, Hq, Sq, D], key [B, Hk, Sk, D], value [B, Hk, Sk, Dv] -> [B, Hq, Sq, Dv].
    is_causal masks key j > query i (top-left). attn_mask is not supported yet: it raises
    NotImplementedError naming the mask; use is_causal, or flash_attn_func's window_size and
    alibi_slopes, or flash_attn_varlen_func for padded batches.
    """
    if attn_mask is not None:
        raise NotImplementedError(
            "flashtrain.scaled_dot_product_attention: attn_mask (%s) is not supported yet; "
            "flashtrain takes no explicit mask. Use attn_mask=None with is_causal=True for a "
            "causal mask, flash_attn_func(window_size=..., alibi_slopes=...) for sliding-window "
            "or ALiBi masks, or flash_attn_varlen_func for padded batches." % _describe(attn_mask))
    for name, t in (("query", query), ("key", key), ("value", value)):
        if t.dim() != 4:
            raise ValueError("scaled_dot_product_attention: %s must have rank 4 (B, H, S, D), "
                             "got shape %s" % (name, list(t.shape)))
    if not enable_gqa and query.shape[1] != key.shape[1]:
        raise ValueError("scaled_dot_product_attention: query has %d heads but key has %d; pass "
                         "enable_gqa=True for grouped-query attention"
                         % (query.shape[1], key.shape[1]))
    # (B, H, S, D) -> (B, S, H, D) views: the operators take any strides but the last dim's.
    out, _ = attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                       dropout_p=dropout_p, softmax_scale=scale, causal=is_causal,
                       causal_top_left=True, precision=precision)
    return out.transpose(1, 2)
