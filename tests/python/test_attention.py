"""flash_attn_func / flash_attn_varlen_func / the packed variants against the float64 reference
with the §4 rule: odd sizes, Sq != Sk, seqlen 1, GQA/MQA, Dv != D, causal, windows, softcap,
ALiBi, fully masked rows."""
import pytest
import torch

import flashtrain
from cases import check_against_reference, head_dims, random_inputs

DTYPES = [torch.float32, torch.bfloat16, torch.float16]

# (B, Sq, Sk, Hq, Hk, D, Dv): odd lengths, Sq > Sk and Sq < Sk, seqlen 1, MQA, GQA, Dv < D.
SHAPES = [
    (2, 13, 17, 4, 2, 32, 32),
    (1, 1, 9, 2, 1, 16, 16),
    (2, 21, 6, 3, 3, 24, 24),
    (1, 37, 45, 6, 2, 64, 40),
]

# (causal, window_size)
MASKS = [
    (False, (-1, -1)),
    (True, (-1, -1)),
    (False, (5, 3)),
    (True, (7, -1)),
    (False, (0, 0)),
]


def _flash(q, k, v, **kwargs):
    out, lse, probs = flashtrain.flash_attn_func(q, k, v, return_attn_probs=True, **kwargs)
    assert probs is None
    return out, lse


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("causal,window", MASKS, ids=str)
def test_dense(device, dtype, shape, causal, window):
    b, sq, sk, hq, hk, d, dv = shape
    d, dv = head_dims(device, dtype, d, dv)
    inputs = random_inputs([(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, dv)], dtype, device)
    check_against_reference(
        lambda q, k, v: _flash(q, k, v, causal=causal, window_size=window), inputs,
        (b, sq, hq, dv), dict(causal=causal, window=window), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_softcap_alibi_scale(device, dtype, causal):
    b, sq, sk, hq, hk, d = 2, 11, 19, 4, 2, 32
    d, _ = head_dims(device, dtype, d)
    inputs = random_inputs([(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d)], dtype, device)
    slopes = torch.rand(b, hq, dtype=torch.float32) * 0.5
    kwargs = dict(softcap=2.5, softmax_scale=0.3)
    check_against_reference(
        lambda q, k, v: _flash(q, k, v, causal=causal, alibi_slopes=slopes.to(device), **kwargs),
        inputs, (b, sq, hq, d), dict(causal=causal, alibi=slopes, scale=0.3, softcap=2.5), dtype)


def test_alibi_per_head(device):
    dtype = torch.bfloat16
    d, _ = head_dims(device, dtype, 16)
    inputs = random_inputs([(2, 9, 4, d), (2, 9, 4, d), (2, 9, 4, d)], dtype, device)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625])
    check_against_reference(
        lambda q, k, v: _flash(q, k, v, causal=True, alibi_slopes=slopes.to(device)),
        inputs, (2, 9, 4, d), dict(causal=True, alibi=slopes), dtype)


def _cu_seqlens(lengths, device):
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.tensor(lengths).cumsum(0)
    return cu.to(device)


# Per-sequence lengths; includes an empty sequence and Sq > Sk (fully masked rows when causal).
VARLEN = [
    ([5, 12, 1, 7], [7, 12, 4, 3]),
    ([9, 0, 16], [9, 5, 16]),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lengths", VARLEN, ids=str)
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (3, 2))],
                         ids=str)
def test_varlen(device, dtype, lengths, causal, window):
    lens_q, lens_k = lengths
    hq, hk = 4, 2
    d, _ = head_dims(device, dtype, 32)
    cu_q, cu_k = _cu_seqlens(lens_q, device), _cu_seqlens(lens_k, device)
    inputs = random_inputs([(sum(lens_q), hq, d), (sum(lens_k), hk, d), (sum(lens_k), hk, d)],
                           dtype, device)

    def run(q, k, v):
        out, lse, _ = flashtrain.flash_attn_varlen_func(
            q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, window_size=window,
            return_attn_probs=True)
        assert lse.shape == (hq, sum(lens_q))
        return out, lse

    check_against_reference(run, inputs, (sum(lens_q), hq, d),
                            dict(causal=causal, window=window, cu_seqlens_q=cu_q.cpu(),
                                 cu_seqlens_k=cu_k.cpu()), dtype)


def test_fully_masked_rows_are_zero(device):
    # Causal bottom-right with Sq > Sk: the first Sq - Sk rows see no key.
    d, _ = head_dims(device, torch.bfloat16, 16)
    q, k, v = random_inputs([(1, 8, 2, d), (1, 3, 2, d), (1, 3, 2, d)], torch.bfloat16, device)
    out, lse, _ = flashtrain.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    assert torch.equal(out[:, :5], torch.zeros_like(out[:, :5]))
    assert bool(torch.isneginf(lse[:, :, :5]).all())
    out.sum().backward()
    assert bool(torch.isfinite(q.grad).all()) and torch.equal(q.grad[:, :5],
                                                              torch.zeros_like(q.grad[:, :5]))


def test_packed_variants_match_unpacked(device):
    dtype = torch.bfloat16
    d, _ = head_dims(device, dtype, 32)
    (qkv,) = random_inputs([(2, 10, 3, 4, d)], dtype, device)
    out = flashtrain.flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = qkv.detach().unbind(2)
    assert torch.equal(out, flashtrain.flash_attn_func(q, k, v, causal=True))
    out.sum().backward()
    assert qkv.grad.shape == qkv.shape and bool(qkv.grad.abs().sum() > 0)

    q, kv = random_inputs([(2, 7, 4, d), (2, 9, 2, 2, d)], dtype, device)
    out = flashtrain.flash_attn_kvpacked_func(q, kv)
    k, v = kv.detach().unbind(2)
    assert torch.equal(out, flashtrain.flash_attn_func(q.detach(), k, v))


def test_noncontiguous_inputs_and_gradient(device):
    # (B, H, S, D) storage viewed as BSHD, and an upstream gradient with stride 0 in every dim.
    dtype = torch.bfloat16
    d, _ = head_dims(device, dtype, 16)
    base = random_inputs([(2, 4, 11, d)] * 3, dtype, device)
    views = [t.transpose(1, 2) for t in base]
    out = flashtrain.flash_attn_func(*views, causal=True, deterministic=True)
    out.sum().backward()
    contiguous = [t.detach().transpose(1, 2).contiguous().requires_grad_() for t in base]
    ref = flashtrain.flash_attn_func(*contiguous, causal=True, deterministic=True)
    ref.backward(torch.ones_like(ref))
    assert torch.equal(out, ref)
    for a, b in zip(base, contiguous):
        assert torch.equal(a.grad.transpose(1, 2), b.grad)


def test_deterministic_gradients_are_bitwise_identical(device):
    d, _ = head_dims(device, torch.bfloat16, 32)
    inputs = random_inputs([(2, 29, 4, d), (2, 31, 2, d), (2, 31, 2, d)], torch.bfloat16,
                           device)
    dout = torch.randn(2, 29, 4, d).to(torch.bfloat16).to(device)
    grads = []
    for _ in range(3):
        out = flashtrain.flash_attn_func(*inputs, causal=True, deterministic=True)
        grads.append(torch.autograd.grad(out, inputs, dout))
    for other in grads[1:]:
        for a, b in zip(grads[0], other):
            assert torch.equal(a, b)
