"""flashtrain and activation checkpointing.

flashtrain's attention already keeps only O(N) state for backward (q, k, v, out, lse), so
wrapping it in torch.utils.checkpoint saves no memory inside attention and makes backward run the
attention forward a second time. This module:

- warns once when a flashtrain forward runs inside a torch.utils.checkpoint recomputation, with
  the cost and the fix (warn_if_recomputing, called by every flashtrain entry point);
- provides policy(), a selective-activation-checkpointing context for torch >= 2.4 that saves the
  attention outputs and recomputes everything else:

      torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False,
                                        context_fn=flashtrain.checkpoint.policy())
"""
import functools
import os
import sys
import warnings

import torch

from . import _compat, ops

# Attention forward FLOPs are 4*B*H*Sq*Sk*D and backward 2.5x that (DESIGN.md §5), so a recomputed
# forward adds 1 / (1 + 2.5) of attention's training cost.
_FORWARD_SHARE_OF_TRAINING = 1.0 / (1.0 + 2.5)

RECOMPUTE_WARNING = (
    "flashtrain: attention forward is running inside a torch.utils.checkpoint recomputation. "
    "flashtrain already keeps only q, k, v, out and lse (O(seq_len)) for backward, so "
    "checkpointing it saves no attention memory and runs the attention forward twice: about "
    "{share:.0%} more attention compute per training step. Keep checkpointing the rest of the "
    "block and save the attention outputs: torch.utils.checkpoint.checkpoint(fn, *args, "
    "use_reentrant=False, context_fn=flashtrain.checkpoint.policy()) (torch >= 2.4). "
    "This warning is shown once.").format(share=_FORWARD_SHARE_OF_TRAINING)

# Functions of torch/utils/checkpoint.py that re-run the checkpointed function during backward:
# reentrant CheckpointFunction.backward (all versions), the non-reentrant saved-tensor unpack hook
# (torch 1.13: "unpack") and its recompute closure (torch >= 2.0: "recompute_fn").
_RECOMPUTE_FRAMES = frozenset({"backward", "unpack", "recompute_fn"})
_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
# Frames from a flashtrain call up to torch's checkpoint code (model layers, hooks, autograd).
_MAX_FRAMES_SEARCHED = 200

_warned = False


def _inside_backward():
    """True/False when torch can tell whether autograd is running backward; None when it cannot."""
    graph_task_id = getattr(torch._C, "_current_graph_task_id", None)
    if graph_task_id is None:
        return None
    return graph_task_id() != -1


def _called_from_checkpoint_recompute():
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES_SEARCHED):
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name in _RECOMPUTE_FRAMES and code.co_filename.endswith(_CHECKPOINT_FILE):
            return True
        frame = frame.f_back
    return False


def _attention_output_cached():
    """True when a selective-checkpoint policy replays saved flashtrain outputs (no recompute)."""
    if not _compat.HAS_SELECTIVE_CHECKPOINT:
        return False
    from torch.utils import checkpoint as tc
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    op = ops._ops.fwd.default
    for mode in _get_current_dispatch_mode_stack():
        if not isinstance(mode, tc._CachedTorchDispatchMode):
            continue
        policy = getattr(mode, "policy_fn", None)
        if policy is not None:  # torch 2.4 - 2.1x: ask the policy
            decision = policy(tc.SelectiveCheckpointContext(is_recompute=True), op)
            if isinstance(decision, bool):
                return decision
            return decision in (tc.CheckpointPolicy.MUST_SAVE, tc.CheckpointPolicy.PREFER_SAVE)
        # Newer torch keeps no policy in the replay mode, only what the forward stored per op:
        # {call index: saved outputs, or a recompute marker}.
        entries = getattr(mode, "storage", {}).get(op)
        if not entries:
            return False
        recompute = getattr(tc, "_RECOMPUTE", None)
        values = entries.values() if isinstance(entries, dict) else entries
        return any(v is not recompute for v in values)
    return False


def is_recomputing():
    """True when the caller runs inside torch.utils.checkpoint's recomputation of a forward."""
    if not torch.is_grad_enabled() or _compat.is_compiling():
        return False
    if _inside_backward() is False:
        return False
    return _called_from_checkpoint_recompute() and not _attention_output_cached()


def warn_if_recomputing():
    """Warns once per process when a flashtrain forward is being recomputed by a checkpoint."""
    global _warned
    if _warned or not is_recomputing():
        return
    _warned = True
    # stacklevel 4: the caller of flash_attn_func / scaled_dot_product_attention.
    warnings.warn(RECOMPUTE_WARNING, UserWarning, stacklevel=4)


def reset_warning():
    """Lets the recompute warning be shown again (for tests and long-running notebooks)."""
    global _warned
    _warned = False


def attention_ops():
    """The operators whose outputs policy() saves."""
    return (ops._ops.fwd.default,)


def policy_fn(ctx, op, *args, **kwargs):
    """Selective checkpointing decision: save flashtrain attention outputs, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    if op in attention_ops():
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def policy():
    """context_fn for torch.utils.checkpoint.checkpoint(..., use_reentrant=False) (torch >= 2.4)
    that saves the outputs of flashtrain attention (out and lse) and recomputes everything else."""
    if not _compat.HAS_SELECTIVE_CHECKPOINT:
        raise RuntimeError("flashtrain.checkpoint.policy() needs torch >= 2.4 (selective "
                           "activation checkpointing); this is torch %s" % torch.__version__)
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return functools.partial(create_selective_checkpoint_contexts, policy_fn)
