"""Hugging Face transformers: attn_implementation="flashtrain".

    import flashtrain.integrations.transformers
    flashtrain.integrations.transformers.register()
    model = LlamaForCausalLM.from_pretrained(path, attn_implementation="flashtrain")

register() adds an attention function and its mask function to transformers' AttentionInterface
and AttentionMaskInterface. Like FlashAttention-2's integration, the mask function hands over the
2D padding mask (or None when nothing is padded); the attention function turns it into the
varlen layout (padding removed, cu_seqlens) and scatters the result back, so padded query rows
come out as zeros. Batches packed by position_ids (positions restarting at 0) or given
cu_seq_lens_q/k (transformers' DataCollatorWithFlattening) run as varlen too.

Causal attention is aligned bottom-right (FlashAttention's convention), which is what decoding
with a KV cache needs. Unpadding reads the mask's values, so a padded batch breaks a
torch.compile graph there; an unpadded batch compiles with fullgraph=True.
"""
import weakref

import torch

from .. import _compat
from ..interface import flash_attn_func, flash_attn_varlen_func

NAME = "flashtrain"


def attention_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                   attention_mask=None, **kwargs):
    """Mask function for AttentionMaskInterface: the bool padding mask [B, kv_length]
    (True = a real token), or None when no token is padded."""
    if attention_mask is None:
        return None
    # Sliding-window layers see the last kv_length positions of the mask.
    attention_mask = attention_mask[:, -kv_length:]
    if attention_mask.shape[1] == kv_length and bool(attention_mask.all()):
        return None
    return attention_mask


def _cu_seqlens(lengths):
    cu = torch.zeros(lengths.shape[0] + 1, dtype=torch.int32, device=lengths.device)
    cu[1:] = torch.cumsum(lengths, dim=0)
    return cu


def _unpad(mask):
    """mask bool [B, S] -> (flat token indices, cu_seqlens int32 [B + 1], max length)."""
    lengths = mask.sum(dim=1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten(), as_tuple=False).flatten()
    return indices, _cu_seqlens(lengths), int(lengths.max())


def _packed_from_position_ids(position_ids, tokens):
    """cu_seqlens for tokens packed in one row whose positions restart at 0 at each sequence
    start, or None when the positions do not describe a packed batch."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.numel() != tokens:
        return None
    flat = position_ids.flatten()
    starts = torch.nonzero(flat == 0, as_tuple=False).flatten()
    rows, seqlen = position_ids.shape
    if starts.numel() == 0 or int(starts[0]) != 0:
        return None
    row_starts = torch.arange(rows, device=starts.device) * seqlen
    if starts.numel() == rows and torch.equal(starts, row_starts):
        return None  # one sequence per row: the dense path is the same and cheaper
    ends = torch.cat([starts[1:], starts.new_tensor([tokens])])
    lengths = (ends - starts).to(torch.int32)
    return _cu_seqlens(lengths), int(lengths.max())


# The last position_ids tensor seen and what it described: every layer of a forward (and its
# checkpoint recompute) gets the same tensor, so only the first layer pays the device sync of
# reading it. A weak reference plus the tensor's version counter keep a new or modified tensor
# from matching.
_packed_memo = {"ref": None, "version": None, "tokens": None, "result": None}


def _packed_memoized(position_ids, tokens):
    memo = _packed_memo
    if position_ids is None:
        return None
    ref = memo["ref"]
    if (ref is not None and ref() is position_ids and memo["version"] == position_ids._version
            and memo["tokens"] == tokens):
        return memo["result"]
    result = _packed_from_position_ids(position_ids, tokens)
    try:
        memo.update(ref=weakref.ref(position_ids), version=position_ids._version, tokens=tokens,
                    result=result)
    except TypeError:  # an object without weak references: no memo
        memo.update(ref=None)
    return result


def _autocast_inputs(query, key, value):
    """Under autocast, RoPE leaves q and k in float32 while v comes out of a projection in the
    autocast dtype; run attention in the autocast dtype, as torch's own fused kernels do."""
    device = query.device.type
    if not any(t.dtype == torch.float32 for t in (query, key, value)):
        return query, key, value
    if hasattr(torch, "get_autocast_dtype"):
        enabled = torch.is_autocast_enabled(device)  # torch >= 2.4 takes the device type
        dtype = torch.get_autocast_dtype(device) if enabled else None
    elif device == "cuda":
        dtype = torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
    else:
        dtype = torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    if dtype is None:
        return query, key, value
    return query.to(dtype), key.to(dtype), value.to(dtype)


def _varlen(q, k, v, cu_q, cu_k, max_q, max_k, options):
    """BSHD q, k, v whose tokens are all real, concatenated along B * S."""
    b, sq = q.shape[:2]
    out = flash_attn_varlen_func(q.reshape(b * sq, *q.shape[2:]), k.reshape(-1, *k.shape[2:]),
                                 v.reshape(-1, *v.shape[2:]), cu_q, cu_k, max_q, max_k, **options)
    return out.view(b, sq, *out.shape[1:])


def _padded(q, k, v, mask, options):
    """q [B, Sq, ...], k/v [B, Sk, ...] with a padding mask [B, Sk]: attention over the real
    tokens only; padded query rows are zeros."""
    b, sq, hq = q.shape[:3]
    sk = k.shape[1]
    k_index, cu_k, max_k = _unpad(mask)
    if sq == sk:
        q_index, cu_q, max_q = k_index, cu_k, max_k
    elif sq == 1:  # decoding: each sequence's single query is real
        q_index = torch.arange(b, device=q.device)
        cu_q, max_q = torch.arange(b + 1, dtype=torch.int32, device=q.device), 1
    else:  # a chunk of new queries after cached keys: their mask is the last sq columns
        q_index, cu_q, max_q = _unpad(mask[:, -sq:])
    q_flat = q.reshape(b * sq, hq, q.shape[-1]).index_select(0, q_index)
    k_flat = k.reshape(b * sk, *k.shape[2:]).index_select(0, k_index)
    v_flat = v.reshape(b * sk, *v.shape[2:]).index_select(0, k_index)
    out = flash_attn_varlen_func(q_flat, k_flat, v_flat, cu_q, cu_k, max_q, max_k, **options)
    full = out.new_zeros(b * sq, hq, out.shape[-1]).index_copy(0, q_index, out)
    return full.view(b, sq, hq, out.shape[-1])


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                      sliding_window=None, softcap=None, is_causal=None, s_aux=None, **kwargs):
    """AttentionInterface function: query [B, Hq, Sq, D], key/value [B, Hk, Sk, D] ->
    ([B, Sq, Hq, Dv], None). GQA needs no repeat: flashtrain takes Hk dividing Hq."""
    if s_aux is not None:
        raise NotImplementedError("flashtrain attention: s_aux (learned attention sinks) is not "
                                  "supported; use attn_implementation='sdpa' for this model")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise NotImplementedError(
            "flashtrain attention: a %dD attention_mask of shape %s is not supported; flashtrain "
            "takes the 2D padding mask its mask function produces (did the model build a custom "
            "4D mask?)" % (attention_mask.dim(), list(attention_mask.shape)))
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = (-1, -1)
    if sliding_window is not None:
        # transformers' sliding window of W lets a query see itself and the W - 1 keys before it.
        window = (sliding_window - 1, 0 if causal else sliding_window - 1)
    options = dict(dropout_p=dropout, softmax_scale=scaling, causal=causal, window_size=window,
                   softcap=softcap or 0.0)
    query, key, value = _autocast_inputs(query, key, value)
    # (B, H, S, D) -> BSHD views; the operators take any strides but the last dim's.
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))

    if attention_mask is not None:
        return _padded(q, k, v, attention_mask, options), None
    if kwargs.get("cu_seq_lens_q") is not None:
        out = _varlen(q, k, v, kwargs["cu_seq_lens_q"], kwargs["cu_seq_lens_k"],
                      kwargs["max_length_q"], kwargs["max_length_k"], options)
        return out, None
    if not _compat.is_compiling() and q.shape[1] == k.shape[1]:
        packed = _packed_memoized(kwargs.get("position_ids"), q.shape[0] * q.shape[1])
        if packed is not None:
            cu, max_len = packed
            return _varlen(q, k, v, cu, cu, max_len, max_len, options), None
    return flash_attn_func(q, k, v, **options), None


def _serve_flash_loader(name):
    """transformers (5.x) treats every attn_implementation whose name contains "flash" as a
    FlashAttention kernel: selecting it makes transformers load that kernel's functions
    (modeling_flash_attention_utils._lazy_imports), which fails for a name it does not know.
    Answer that load for `name` with flashtrain's FlashAttention-2-compatible functions, so the
    model can select it and any transformers code calling the loaded functions runs flashtrain."""
    try:
        from transformers import modeling_flash_attention_utils as flash_utils
    except ImportError:
        return
    loader = getattr(flash_utils, "_lazy_imports", None)
    if loader is None:  # a transformers without this loader does not need it answered
        return
    served = getattr(loader, "flashtrain_names", None)
    if served is not None:
        served.add(name)
        return

    def lazy_imports(implementation, *args, **kwargs):
        if implementation is not None and implementation.split("|")[-1] in lazy_imports.flashtrain_names:
            return (flash_attn_func, flash_attn_varlen_func, None, flash_utils._pad_input,
                    flash_utils._unpad_input)
        return loader(implementation, *args, **kwargs)

    lazy_imports.flashtrain_names = {name}
    flash_utils._lazy_imports = lazy_imports


def register(name=NAME):
    """Registers attn_implementation=`name` (default "flashtrain") with transformers; returns it."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    if "flash" in name:
        _serve_flash_loader(name)
    return name
