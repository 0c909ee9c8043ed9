"""Bad input raises a Python exception whose message names the argument and the values seen,
with the C++ library's own message (the binding adds no validation of its own)."""
import pytest
import torch

import flashtrain


def _qkv(device, dtype=torch.float32, b=2, sq=5, sk=7, hq=4, hk=2, d=16):
    return (torch.randn(b, sq, hq, d, device=device).to(dtype),
            torch.randn(b, sk, hk, d, device=device).to(dtype),
            torch.randn(b, sk, hk, d, device=device).to(dtype))


def test_head_dim_mismatch(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"k has head dim 8 but q gives 16"):
        flashtrain.flash_attn_func(q, k[..., :8], v)


def test_heads_must_divide(device):
    q, k, v = _qkv(device, hq=4, hk=3)
    with pytest.raises(ValueError, match=r"k has 3 heads, which must divide q's 4 heads"):
        flashtrain.flash_attn_func(q, k, v)


def test_dtype_mismatch(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"v has dtype bfloat16 but q has dtype float32"):
        flashtrain.flash_attn_func(q, k, v.bfloat16())


def test_unsupported_dtype_names_argument(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"q has dtype Long"):
        flashtrain.flash_attn_func(q.long(), k, v)


def test_rank(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"q has rank 5"):
        flashtrain.flash_attn_func(q.unsqueeze(0), k, v)


def test_dropout_p_range(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"dropout_p = 1 must be in \[0, 1\)"):
        flashtrain.flash_attn_func(q, k, v, dropout_p=1.0)


def test_window(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"window \(left, right\) = \(-3, 2\)"):
        flashtrain.flash_attn_func(q, k, v, window_size=(-3, 2))
    with pytest.raises(ValueError, match=r"window_right = 2 conflicts with causal"):
        flashtrain.flash_attn_func(q, k, v, causal=True, window_size=(-1, 2))


def test_softcap_and_scale(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"softcap = -1"):
        flashtrain.flash_attn_func(q, k, v, softcap=-1.0)
    with pytest.raises(ValueError, match=r"softmax_scale = 0 must be finite and > 0"):
        flashtrain.flash_attn_func(q, k, v, softmax_scale=0.0)


def test_alibi_shape(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"alibi_slopes has shape \[3\] but must be \[4\]"):
        flashtrain.flash_attn_func(q, k, v, alibi_slopes=torch.ones(3, device=device))


def test_cu_seqlens(device):
    q = torch.randn(10, 2, 16, device=device)
    cu = torch.tensor([0, 4, 10], dtype=torch.int64, device=device)
    with pytest.raises(ValueError, match=r"cu_seqlens_q has dtype Long"):
        flashtrain.flash_attn_varlen_func(q, q, q, cu, cu, 6, 6)
    if device == "cpu":  # values are read (and so checked) only from host memory
        bad = torch.tensor([0, 6, 4], dtype=torch.int32)
        with pytest.raises(ValueError, match=r"cu_seqlens_q decreases at index 2: 6 then 4"):
            flashtrain.flash_attn_varlen_func(q, q, q, bad, bad, 6, 6)


def test_several_problems_reported_at_once(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError) as info:
        flashtrain.flash_attn_func(q, k, v, dropout_p=2.0, softcap=-1.0)
    assert "dropout_p = 2" in str(info.value) and "softcap = -1" in str(info.value)


def test_raw_op_rng_state_required(device):
    q, k, v = _qkv(device)
    with pytest.raises(ValueError, match=r"rng_state \(seed, offset\) is required"):
        flashtrain.ops.fwd(q, k, v, dropout_p=0.1)


def test_sdpa_mask_is_named(device):
    q = torch.randn(2, 4, 5, 16, device=device)
    mask = torch.ones(5, 5, dtype=torch.bool, device=device)
    with pytest.raises(NotImplementedError, match=r"attn_mask \(a bool tensor of shape \[5, 5\]\)"):
        flashtrain.scaled_dot_product_attention(q, q, q, attn_mask=mask)


def test_sdpa_gqa_needs_enable_gqa(device):
    q, kv = torch.randn(2, 4, 5, 16, device=device), torch.randn(2, 2, 5, 16, device=device)
    with pytest.raises(ValueError, match=r"query has 4 heads but key has 2; pass enable_gqa"):
        flashtrain.scaled_dot_product_attention(q, kv, kv)


def test_block_table_is_refused(device):
    q = torch.randn(10, 2, 16, device=device)
    cu = torch.tensor([0, 10], dtype=torch.int32, device=device)
    with pytest.raises(NotImplementedError, match=r"block_table"):
        flashtrain.flash_attn_varlen_func(q, q, q, cu, cu, 10, 10, block_table=cu)
