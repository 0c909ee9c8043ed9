"""Dropout: reproducible under torch.manual_seed, the kept fraction is 1 - p, and forward and
backward use one mask, checked against the reference run with the mask the operator applied.

The mask is read back from the operator itself: with v = identity (Dv >= Sk, v[j] = e_j) the
output row i is dropout(P)[i, :], so out == 0 exactly where an element was dropped (P > 0 on
every visible key). The mask depends only on (seed, offset, b, h, i, j), not on q, k, v.
"""
import pytest
import torch

import flashtrain
from cases import check_against_reference, head_dims, random_inputs

P = 0.3


def _identity_values(batch, seqlen_k, heads_k, dim, dtype, device):
    eye = torch.eye(seqlen_k, dim).to(dtype=dtype, device=device)
    return eye.view(1, seqlen_k, 1, dim).expand(batch, seqlen_k, heads_k, dim).contiguous()


def _keep_mask(rng_state, q, k, causal, device):
    """bool [B, Hq, Sq, Sk]: the elements the operator keeps for this rng_state."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    assert d >= sk, "v = identity needs a head dim >= Sk"
    v = _identity_values(b, sk, hk, d, q.dtype, device)
    out, _ = flashtrain.ops.fwd(q.detach(), k.detach(), v, dropout_p=P, causal=causal,
                                rng_state=rng_state)
    return (out[..., :sk] != 0).permute(0, 2, 1, 3).cpu()


def test_same_seed_same_result(device):
    d, _ = head_dims(device, torch.bfloat16, 32)
    q, k, v = random_inputs([(2, 17, 4, d), (2, 23, 2, d), (2, 23, 2, d)], torch.bfloat16,
                            device)
    results = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        out = flashtrain.flash_attn_func(q, k, v, dropout_p=P, causal=True, deterministic=True)
        results.append((out,) + torch.autograd.grad(out.float().square().sum(), (q, k, v)))
    assert all(torch.equal(a, b) for a, b in zip(results[0], results[1]))
    assert not torch.equal(results[0][0], results[2][0])


def test_kept_fraction(device):
    # 2 * 4 * 64 * 64 = 32768 Bernoulli(1 - p) draws: the standard deviation of the kept
    # fraction is sqrt(p (1 - p) / n) ~ 0.0025; 5 sigma stays far from flakiness.
    d, _ = head_dims(device, torch.bfloat16, 64)
    q, k, _ = random_inputs([(2, 64, 4, d), (2, 64, 4, d), (2, 64, 4, d)], torch.bfloat16,
                            device)
    keep = _keep_mask(flashtrain.ops.draw_rng_state(), q, k, False, device)
    sigma = (P * (1 - P) / keep.numel()) ** 0.5
    assert abs(float(keep.float().mean()) - (1 - P)) < 5 * sigma


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_matches_reference_with_recovered_mask(device, dtype, causal):
    b, sq, sk, hq, hk = 2, 13, 19, 4, 2
    d, _ = head_dims(device, dtype, 32)
    q, k, v = random_inputs([(b, sq, hq, d), (b, sk, hk, d), (b, sk, hk, d)], dtype, device)
    rng_state = flashtrain.ops.draw_rng_state()
    keep = _keep_mask(rng_state, q, k, causal, device)
    assert 0 < int(keep.sum()) < keep.numel()

    def run(q, k, v):
        return flashtrain.autograd.FlashAttentionFunction.apply(
            q, k, v, None, None, 0, 0, P, None, causal, False, -1, -1, 0.0, None, rng_state,
            False)

    check_against_reference(run, [q, k, v], (b, sq, hq, d),
                            dict(causal=causal, keep=keep, dropout_p=P), dtype)


def test_varlen_matches_reference_with_recovered_mask(device):
    dtype, hq, hk = torch.bfloat16, 2, 1
    d, _ = head_dims(device, dtype, 16)
    lens_q, lens_k = [5, 9], [7, 9]
    cu_q = torch.tensor([0, 5, 14], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 7, 16], dtype=torch.int32, device=device)
    q, k, v = random_inputs([(14, hq, d), (16, hk, d), (16, hk, d)], dtype, device)
    rng_state = flashtrain.ops.draw_rng_state()
    # Element (b, h, i, j) uses i, j inside sequence b, so each sequence's mask equals the dense
    # mask of a batch whose entry b has that sequence's length.
    keep = []
    for b, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        qd = torch.randn(len(lens_q), lq, hq, d, device=device).to(dtype)
        kd = torch.randn(len(lens_q), lk, hk, d, device=device).to(dtype)
        keep.append(_keep_mask(rng_state, qd, kd, True, device)[b])

    def run(q, k, v):
        return flashtrain.autograd.FlashAttentionFunction.apply(
            q, k, v, cu_q, cu_k, 9, 9, P, None, True, False, -1, -1, 0.0, None, rng_state, False)

    check_against_reference(run, [q, k, v], (14, hq, d),
                            dict(causal=True, keep=keep, dropout_p=P, cu_seqlens_q=cu_q.cpu(),
                                 cu_seqlens_k=cu_k.cpu()), dtype)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU to compare with the CPU")
def test_cuda_drops_the_same_elements_as_cpu():
    d, _ = head_dims("cuda", torch.bfloat16, 64)
    q, k, _ = random_inputs([(2, 33, 4, d), (2, 47, 2, d), (2, 47, 2, d)], torch.bfloat16,
                            "cpu")
    rng_state = flashtrain.ops.draw_rng_state()
    cpu = _keep_mask(rng_state, q, k, True, "cpu")
    cuda = _keep_mask(rng_state, q.cuda(), k.cuda(), True, "cuda")
    assert torch.equal(cpu, cuda)
