"""The transformers integration's helpers that need no transformers: the memo of the packed
position_ids analysis (one device sync per forward, never a stale answer) and the cast to the
autocast dtype (RoPE leaves q and k in float32 under autocast while v is in the autocast dtype)."""
import torch

from flashtrain.integrations import transformers as ft_hf


def _positions(*lengths):
    return torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)


def test_packed_memo_reuses_the_answer_for_the_same_tensor_only():
    pos = _positions(3, 5)
    cu, max_len = ft_hf._packed_memoized(pos, 8)
    assert cu.tolist() == [0, 3, 8] and max_len == 5
    assert ft_hf._packed_memoized(pos, 8)[0] is cu  # memo hit: the same tensor object back

    other = _positions(4, 4)  # a new tensor, different packing
    cu2, max2 = ft_hf._packed_memoized(other, 8)
    assert cu2.tolist() == [0, 4, 8] and max2 == 4

    other[0, 2] = 0  # modified in place: its version changes, so the memo must not answer
    cu3, _ = ft_hf._packed_memoized(other, 8)
    assert cu3.tolist() == [0, 2, 4, 8]


def test_packed_memo_keeps_dense_rows_dense():
    pos = torch.arange(6).repeat(2, 1)  # one sequence per row: the dense path
    assert ft_hf._packed_memoized(pos, 12) is None
    assert ft_hf._packed_memoized(None, 12) is None


def test_autocast_inputs_cast_to_the_autocast_dtype():
    q = torch.randn(1, 2, 5, 8)
    k = torch.randn(1, 2, 5, 8)
    v = torch.randn(1, 2, 5, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cq, ck, cv = ft_hf._autocast_inputs(q, k, v)
    assert cq.dtype == ck.dtype == cv.dtype == torch.bfloat16
    assert torch.equal(cq, q.to(torch.bfloat16))
    # Outside autocast nothing is cast (mismatched dtypes then fail validation, as they should).
    same = ft_hf._autocast_inputs(q, k, v)
    assert same[0] is q and same[1] is k and same[2] is v
