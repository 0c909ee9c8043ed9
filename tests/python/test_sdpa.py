"""scaled_dot_product_attention in torch's (B, H, S, D) layout: is_causal aligned top-left, GQA
with enable_gqa, scale, dropout; against the float64 reference, and against torch's own SDPA
where this torch has it (>= 2.0)."""
import pytest
import torch

import flashtrain
from attention_reference import assert_rule
from cases import check_against_reference, head_dims, random_inputs


def _to_bshd(t):
    return t.transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(9, 14), (14, 9), (1, 5)])
def test_sdpa_against_reference(device, dtype, is_causal, sq, sk):
    b, hq, hk = 2, 4, 2
    d, _ = head_dims(device, dtype, 32)
    bhsd = random_inputs([(b, hq, sq, d), (b, hk, sk, d), (b, hk, sk, d)], dtype, device)

    def run(q, k, v):
        # The reference sees BSHD views; flashtrain gets torch's (B, H, S, D) tensors.
        out = flashtrain.scaled_dot_product_attention(_to_bshd(q), _to_bshd(k), _to_bshd(v),
                                                      is_causal=is_causal, scale=0.2,
                                                      enable_gqa=True)
        assert out.shape == (b, hq, sq, d)
        # lse is not part of SDPA's API; recompute it through the raw operator to check it too.
        _, lse = flashtrain.ops.fwd(q, k, v, softmax_scale=0.2, causal=is_causal,
                                    causal_top_left=True)
        return _to_bshd(out), lse

    bshd = [_to_bshd(t.detach()).requires_grad_() for t in bhsd]
    check_against_reference(run, bshd, (b, sq, hq, d),
                            dict(causal=is_causal, top_left=True, scale=0.2), dtype)


@pytest.mark.skipif(not hasattr(torch.nn.functional, "scaled_dot_product_attention"),
                    reason="torch < 2.0 has no scaled_dot_product_attention to compare with")
@pytest.mark.parametrize("is_causal", [False, True])
def test_matches_torch_sdpa(device, is_causal):
    # torch's SDPA in float64 is X64 and in bfloat16 Xnaive for the §4 rule.
    dtype = torch.bfloat16
    d, _ = head_dims(device, dtype, 16)
    q, k, v = (torch.randn(2, 3, s, d).to(dtype).double() for s in (7, 11, 11))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    expected = sdpa(q, k, v, is_causal=is_causal)
    naive = sdpa(q.to(dtype), k.to(dtype), v.to(dtype), is_causal=is_causal)
    out = flashtrain.scaled_dot_product_attention(q.to(dtype).to(device), k.to(dtype).to(device),
                                                  v.to(dtype).to(device), is_causal=is_causal)
    assert_rule("out", out.cpu(), expected, naive, dtype)


def test_sdpa_dropout_reproducible(device):
    d, _ = head_dims(device, torch.bfloat16, 16)
    q = torch.randn(1, 2, 8, d, device=device).to(torch.bfloat16)
    torch.manual_seed(3)
    a = flashtrain.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    torch.manual_seed(3)
    b = flashtrain.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    assert torch.equal(a, b)
    assert not torch.equal(a, flashtrain.scaled_dot_product_attention(q, q, q))
