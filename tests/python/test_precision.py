"""precision="high" (issue #5): the backward keeps P and dS beyond the input dtype's precision
(Precision::kHigh). It passes the §4 rule through every entry point, its dq/dk error is no worse
than the default's where logits are large, bad values raise ValueError naming the argument, and
the operator without the argument runs the default."""
import re

import pytest
import torch

import flashtrain
from attention_reference import assert_rule, max_error, reference
from cases import check_against_reference, float64_leaves, head_dims, random_inputs
from flashtrain import ops

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _flash(q, k, v, **kwargs):
    out, lse, _ = flashtrain.flash_attn_func(q, k, v, return_attn_probs=True, precision="high",
                                             **kwargs)
    return out, lse


# (B, Sq, Sk, Hq, Hk, D): odd lengths, Sq != Sk both ways, GQA and MQA, seqlen 1.
SHAPES = [(2, 13, 17, 4, 2, 32), (1, 1, 9, 2, 1, 16), (1, 37, 21, 3, 3, 24)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("causal,window", [(False, (-1, -1)), (True, (-1, -1)), (False, (5, 3))],
                         ids=str)
def test_high_matches_reference(device, dtype, shape, causal, window):
    b, sq, sk, hq, hk, d = shape
    d, _ = head_dims(device, dtype, d)
    inputs = random_inputs([(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d)], dtype, device)
    check_against_reference(lambda q, k, v: _flash(q, k, v, causal=causal, window_size=window),
                            inputs, (b, sq, hq, d), dict(causal=causal, window=window), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_high_with_softcap_alibi_scale(device, dtype):
    b, sq, sk, hq, hk = 2, 11, 19, 4, 2
    d, _ = head_dims(device, dtype, 32)
    inputs = random_inputs([(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d)], dtype, device)
    slopes = torch.rand(b, hq, dtype=torch.float32) * 0.5
    check_against_reference(
        lambda q, k, v: _flash(q, k, v, causal=True, alibi_slopes=slopes.to(device),
                               softcap=2.5, softmax_scale=0.3),
        inputs, (b, sq, hq, d), dict(causal=True, alibi=slopes, scale=0.3, softcap=2.5), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_high_varlen(device, dtype):
    hq, hk = 4, 2
    d, _ = head_dims(device, dtype, 32)
    cu_q = torch.tensor([0, 5, 17, 18], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 19, 23], dtype=torch.int32)
    inputs = random_inputs([(18, hq, d), (23, hk, d), (23, hk, d)], dtype, device)

    def run(q, k, v):
        out, lse, _ = flashtrain.flash_attn_varlen_func(
            q, k, v, cu_q.to(device), cu_k.to(device), 12, 12, causal=True,
            return_attn_probs=True, precision="high")
        return out, lse

    check_against_reference(run, inputs, (18, hq, d),
                            dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k), dtype)


def _assert_same(got, want, device):
    """Bitwise on the CPU. On CUDA the strides of a packed or transposed input may pick another
    forward kernel (the same function, rounded in another order): a few units of rounding."""
    for a, b in zip(got, want):
        if device == "cpu":
            assert torch.equal(a, b)
        else:
            eps = torch.finfo(b.dtype).eps
            torch.testing.assert_close(a, b, atol=8 * eps * max(float(b.abs().max()), 1.0),
                                       rtol=8 * eps)


def _grads(fn, inputs, dout):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return torch.autograd.grad(out, leaves, dout)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sdpa_and_packed_variants_pass_precision(device, dtype):
    # Each entry point with precision="high" gives the gradients of flash_attn_func with it (the
    # same operators on the same values), and "default" runs too.
    b, s, h = 2, 9, 2
    d, _ = head_dims(device, dtype, 16)
    q, k, v = random_inputs([(b, s, h, d)] * 3, dtype, device)
    dout = torch.randn(b, s, h, d).to(dtype).to(device)
    det = dict(deterministic=True)
    want = _grads(lambda q, k, v: flashtrain.flash_attn_func(q, k, v, causal=True,
                                                            precision="high", **det),
                  [q, k, v], dout)

    qkv = torch.stack([q, k, v], dim=2)
    (g,) = _grads(lambda t: flashtrain.flash_attn_qkvpacked_func(t, causal=True,
                                                                precision="high", **det),
                  [qkv], dout)
    _assert_same(g.unbind(dim=2), want, device)

    kv = torch.stack([k, v], dim=2)
    gq, gkv = _grads(lambda q, kv: flashtrain.flash_attn_kvpacked_func(q, kv, causal=True,
                                                                       precision="high", **det),
                     [q, kv], dout)
    _assert_same((gq,) + gkv.unbind(dim=2), want, device)

    # SDPA's layout (B, H, S, D) and top-left causal, which equals bottom-right when Sq == Sk.
    got = _grads(lambda q, k, v: flashtrain.scaled_dot_product_attention(
        q, k, v, is_causal=True, precision="high").transpose(1, 2),
        [t.transpose(1, 2) for t in (q, k, v)], dout)
    _assert_same([t.transpose(1, 2) for t in got], want, device)
    for f in (lambda: flashtrain.flash_attn_qkvpacked_func(qkv, precision="default"),
              lambda: flashtrain.scaled_dot_product_attention(q, k, v, precision="default")):
        assert bool(torch.isfinite(f()).all())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_high_is_no_worse_than_default_with_large_logits(device, dtype, causal):
    # Logits around 1e3 (q ~ 30 N(0, 1), keys 30 * (shared + 0.1 N(0, 1)) per head): the keys of a
    # head nearly agree, so P spreads over several keys instead of being one-hot (where the true
    # dq and dk are ~0 and every backend's error is fp32 noise). The CPU keeps P and dS in fp32 at
    # both settings (equal errors); on CUDA "high" removes the default's 16-bit rounding of P and
    # dS, so its dq/dk error must not exceed the default's. The margin covers what both share:
    # D = rowsum(dO * out) with out in the input dtype, and the rounding of the stored gradients.
    b, sq, sk, hq, hk = 1, 29, 35, 4, 2
    d, _ = head_dims(device, dtype, 32)
    q = (30.0 * torch.randn(b, sq, hq, d)).to(dtype).to(device)
    k = (30.0 * (torch.randn(b, 1, hk, d) + 0.1 * torch.randn(b, sk, hk, d))).to(dtype).to(device)
    v = torch.randn(b, sk, hk, d).to(dtype).to(device)
    dout = torch.randn(b, sq, hq, d).to(dtype).to(device)
    results = {}
    for round_to in (None, dtype):
        leaves = float64_leaves([q, k, v])
        ref_out, _ = reference(*leaves, causal=causal, round_to=round_to)
        results[round_to] = torch.autograd.grad(ref_out, leaves, dout.cpu().double())
    errors = {}
    for precision in ("default", "high"):
        grads = _grads(lambda q, k, v: flashtrain.flash_attn_func(q, k, v, causal=causal,
                                                                 precision=precision),
                       [q, k, v], dout)
        for name, g, x64, xnaive in zip(("dq", "dk", "dv"), grads, results[None], results[dtype]):
            assert bool(torch.isfinite(g).all()), (precision, name)
            # fp32's dot products of ~5e3 carry a few ulps that the naive reference (exact products
            # rounded once) lacks, at both settings: the rule is checked in the 16-bit dtypes.
            if precision == "high" and dtype != torch.float32:
                assert_rule(name + " (precision=high)", g.cpu(), x64, xnaive, dtype)
            errors[precision, name] = max_error(g, x64)
    for i, name in enumerate(("dq", "dk")):
        x64 = results[None][i]
        assert float(x64.abs().max()) > 0.1  # P is spread: the gradients are not ~0
        tiny = torch.finfo(torch.float32).eps * float(x64.abs().max())
        assert errors["high", name] <= 1.25 * errors["default", name] + tiny, (
            "%s: precision=high error %.3g vs default %.3g"
            % (name, errors["high", name], errors["default", name]))


@pytest.mark.parametrize("bad", ["fast", "HIGH", 1, None, True])
def test_bad_precision_raises(device, bad):
    q, k, v = (torch.randn(1, 5, 2, 16, device=device) for _ in range(3))
    message = r"precision must be one of 'default', 'high', got " + re.escape(repr(bad))
    for call in (lambda: flashtrain.flash_attn_func(q, k, v, precision=bad),
                 lambda: flashtrain.flash_attn_qkvpacked_func(torch.stack([q, k, v], 2),
                                                              precision=bad),
                 lambda: flashtrain.flash_attn_varlen_func(
                     q[0], k[0], v[0], torch.tensor([0, 5], dtype=torch.int32, device=device),
                     torch.tensor([0, 5], dtype=torch.int32, device=device), 5, 5,
                     precision=bad),
                 lambda: flashtrain.scaled_dot_product_attention(q, k, v, precision=bad)):
        with pytest.raises(ValueError, match=message):
            call()


def test_operator_rejects_bad_precision(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    d, _ = head_dims(device, dtype, 16)
    q, k, v = (torch.randn(1, 5, 2, d).to(dtype).to(device) for _ in range(3))
    out, lse = ops.fwd(q, k, v)
    with pytest.raises(ValueError, match=r"precision must be 0 \(default\) or 1 \(high\), got 2"):
        ops.bwd(torch.ones_like(out), q, k, v, out, lse, precision=2)
    with pytest.raises(ValueError, match=r"precision must be an int, got 'high'"):
        ops.bwd(torch.ones_like(out), q, k, v, out, lse, precision="high")
