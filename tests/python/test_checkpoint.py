"""The checkpoint guard warns once when a flashtrain forward is recomputed by
torch.utils.checkpoint, and flashtrain.checkpoint.policy() (torch >= 2.4) saves the attention
outputs so that recomputation skips attention."""
import warnings

import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint

import flashtrain
from cases import head_dims
from flashtrain import _compat


def _block(x, w):
    # A projection, attention, a projection: the shape of a transformer block. Deterministic
    # gradients let checkpointed and plain runs be compared bitwise.
    b, s, h, d = x.shape
    qkv = torch.matmul(x, w).view(b, s, h, 3, d)
    out = flashtrain.flash_attn_func(qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :], causal=True,
                                     deterministic=True)
    return torch.matmul(out, w[:, :d])


def _inputs(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    d, _ = head_dims(device, dtype, 16)
    x = torch.randn(2, 9, 2, d, device=device).to(dtype).requires_grad_()
    w = (torch.randn(d, 3 * d, device=device) / d ** 0.5).to(dtype).requires_grad_()
    return x, w


def _recompute_warnings(run):
    flashtrain.checkpoint.reset_warning()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [w for w in caught if "checkpoint recomputation" in str(w.message)]


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_warns_once_inside_recompute(device, use_reentrant):
    x, w = _inputs(device)

    def run():
        for _ in range(2):
            out = torch_checkpoint.checkpoint(_block, x, w, use_reentrant=use_reentrant)
            out.sum().backward()

    found = _recompute_warnings(run)
    assert len(found) == 1
    message = str(found[0].message)
    assert "more attention compute" in message and "flashtrain.checkpoint.policy()" in message


def test_no_warning_without_checkpoint(device):
    x, w = _inputs(device)
    assert _recompute_warnings(lambda: _block(x, w).sum().backward()) == []


@pytest.mark.filterwarnings("ignore:flashtrain. attention forward is running inside")
def test_checkpointed_gradients_match(device):
    x, w = _inputs(device)
    _block(x, w).sum().backward()
    expected = (x.grad.clone(), w.grad.clone())
    x.grad, w.grad = None, None
    torch_checkpoint.checkpoint(_block, x, w, use_reentrant=False).sum().backward()
    assert torch.equal(x.grad, expected[0]) and torch.equal(w.grad, expected[1])


@pytest.mark.filterwarnings("ignore:flashtrain. attention forward is running inside")
def test_dropout_mask_survives_recompute(device):
    # checkpoint restores the CPU RNG state before recomputing, and flashtrain draws dropout's
    # (seed, offset) from it, so the recomputed forward drops the same elements.
    x, w = _inputs(device)

    def block(x, w):
        qkv = torch.matmul(x, w).view(*x.shape[:3], 3, x.shape[3])
        return flashtrain.flash_attn_func(*qkv.unbind(3), dropout_p=0.4, deterministic=True)

    torch.manual_seed(5)
    block(x, w).square().sum().backward()
    expected = (x.grad.clone(), w.grad.clone())
    x.grad, w.grad = None, None
    torch.manual_seed(5)
    torch_checkpoint.checkpoint(block, x, w, use_reentrant=False).square().sum().backward()
    assert torch.equal(x.grad, expected[0]) and torch.equal(w.grad, expected[1])


def _count_attention_forwards(run):
    """Runs `run` and returns how often the flashtrain forward kernel actually executed.

    The counting mode is entered first, so it sits below the checkpoint's caching mode: a call
    that the selective-checkpoint cache answers never reaches it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.flashtrain.fwd.default:
                Count.calls += 1
            return func(*args, **(kwargs or {}))

    with Count():
        run()
    return Count.calls


@pytest.mark.skipif(not _compat.HAS_SELECTIVE_CHECKPOINT,
                    reason="selective activation checkpointing needs torch >= 2.4")
@pytest.mark.filterwarnings("ignore:flashtrain. attention forward is running inside")
def test_policy_saves_attention(device):
    x, w = _inputs(device)
    _block(x, w).sum().backward()
    expected = (x.grad.clone(), w.grad.clone())

    def run(**checkpoint_kwargs):
        x.grad, w.grad = None, None
        out = torch_checkpoint.checkpoint(_block, x, w, use_reentrant=False, **checkpoint_kwargs)
        out.sum().backward()

    assert _count_attention_forwards(run) == 2  # plain checkpoint: forward and recompute
    found = []
    calls = _count_attention_forwards(lambda: found.extend(_recompute_warnings(
        lambda: run(context_fn=flashtrain.checkpoint.policy()))))
    assert calls == 1 and found == []
    assert torch.equal(x.grad, expected[0]) and torch.equal(w.grad, expected[1])


@pytest.mark.skipif(not _compat.HAS_SELECTIVE_CHECKPOINT,
                    reason="selective activation checkpointing needs torch >= 2.4")
def test_policy_decisions():
    from torch.utils.checkpoint import CheckpointPolicy

    fn = flashtrain.checkpoint.policy_fn
    assert fn(None, torch.ops.flashtrain.fwd.default) == CheckpointPolicy.MUST_SAVE
    assert fn(None, torch.ops.aten.mm.default) == CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.skipif(_compat.HAS_SELECTIVE_CHECKPOINT, reason="torch >= 2.4 has the policy")
def test_policy_explains_old_torch():
    with pytest.raises(RuntimeError, match=r"needs torch >= 2.4"):
        flashtrain.checkpoint.policy()
