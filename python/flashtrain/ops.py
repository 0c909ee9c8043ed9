"""The raw operators torch.ops.flashtrain.fwd / bwd (BSHD layout, no autograd), and their fake
registrations so torch.compile (torch >= 2.4) can trace them without running them.

fwd(q, k, v, ...) -> (out, lse); bwd(dout, q, k, v, out, lse, ...) -> (dq, dk, dv);
backend(q, k, v, ...) -> "cpu" | "cuda", the backend fwd would choose.
rng_state is a CPU int64 tensor (seed, offset) that keys the dropout mask, or None when
dropout_p == 0. report is None or a CPU float64 tensor that the call merges its numerics telemetry
into (flashtrain.numerics: new_report_tensor() and FIELDS). bwd's precision is PRECISION_DEFAULT
or PRECISION_HIGH (backward keeps P and dS beyond the input dtype; slower on CUDA). Errors in the
inputs raise ValueError with the C++ library's message.
"""
import torch

from . import _compat, _load

_load.load()
_NAMESPACE = _load.namespace()
_ops = getattr(torch.ops, _NAMESPACE)

# Element count of rng_state: (seed, offset).
RNG_STATE_ELEMENTS = 2
# bwd's precision argument (flashtrain::Precision): P and dS rounded to the input dtype in
# backward, or kept beyond it (a slower CUDA backward; include/flashtrain/attention.h).
PRECISION_DEFAULT = 0
PRECISION_HIGH = 1
# Seeds and offsets are drawn below 2**62 so that they stay positive int64 values on every torch.
_RNG_HIGH = 2 ** 62


# The extension raises invalid-input errors through libc10 (c10::detail::torchCheckFail, a
# RuntimeError in Python) with this tag in front of the library's message, rather than throwing a
# C++ exception of its own into torch (bindings/torch/attention_ops.cpp says why); _call turns
# them back into the ValueError this module documents.
_VALUE_ERROR_TAG = "[flashtrain ValueError] "


def _call(op, *args):
    if _compat.is_compiling():  # traced calls run later, outside this frame
        return op(*args)
    try:
        return op(*args)
    except RuntimeError as error:
        message = str(error)
        at = message.find(_VALUE_ERROR_TAG)
        if at < 0:
            raise
        raise ValueError(message[at + len(_VALUE_ERROR_TAG):].rstrip()) from None


def _int_argument(name, value):
    # bool is an int in Python but not a value the operator's int arguments mean.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("%s must be an int, got %r" % (name, value))
    return value


def draw_rng_state():
    """(seed, offset) for one dropout call, from torch's default (CPU) generator.

    The CPU generator is used for every device: torch.manual_seed() makes dropout reproducible,
    and torch.utils.checkpoint restores it before recomputing (it always saves the CPU RNG
    state), so a recomputed forward drops exactly the same elements.
    """
    return torch.randint(0, _RNG_HIGH, (RNG_STATE_ELEMENTS,), dtype=torch.int64)


def fwd(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
        dropout_p=0.0, softmax_scale=None, causal=False, causal_top_left=False, window_left=-1,
        window_right=-1, softcap=0.0, alibi_slopes=None, rng_state=None, report=None):
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, float(dropout_p),
            None if softmax_scale is None else float(softmax_scale), bool(causal),
            bool(causal_top_left), int(window_left), int(window_right), float(softcap),
            alibi_slopes, rng_state)
    # Without a report the call has the operator's original arity (report defaults to None).
    return _call(_ops.fwd, *args) if report is None else _call(_ops.fwd, *args, report)


def bwd(dout, q, k, v, out, lse, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0,
        max_seqlen_k=0, dropout_p=0.0, softmax_scale=None, causal=False, causal_top_left=False,
        window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None, rng_state=None,
        deterministic=False, report=None, precision=PRECISION_DEFAULT):
    """precision: PRECISION_DEFAULT (0) or PRECISION_HIGH (1), flashtrain::Precision's values;
    any other value raises ValueError."""
    args = (dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
            float(dropout_p), None if softmax_scale is None else float(softmax_scale),
            bool(causal), bool(causal_top_left), int(window_left), int(window_right),
            float(softcap), alibi_slopes, rng_state, bool(deterministic))
    if report is None and precision == PRECISION_DEFAULT:
        return _call(_ops.bwd, *args)  # the operator's original arity
    return _call(_ops.bwd, *args, report, _int_argument("precision", precision))


def backend(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0,
            dropout_p=0.0, softmax_scale=None, causal=False, causal_top_left=False,
            window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None):
    """The backend fwd would run for these inputs: "cpu" or "cuda". Raises ValueError with every
    reason when none can (for example a head dim the CUDA build did not instantiate)."""
    return _call(_ops.backend, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                        float(dropout_p), None if softmax_scale is None else float(softmax_scale),
                        bool(causal), bool(causal_top_left), int(window_left), int(window_right),
                        float(softcap), alibi_slopes)


def _check_rank(q):
    if q.dim() not in (3, 4):
        raise ValueError("q must have rank 4 [B, S, H, D] or rank 3 [total, H, D] (varlen), got "
                         "rank %d with shape %s" % (q.dim(), list(q.shape)))


def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
              softmax_scale, causal, causal_top_left, window_left, window_right, softcap,
              alibi_slopes, rng_state, report=None):
    # Shapes only; the C++ operator allocates the same contiguous tensors.
    _check_rank(q)
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    if q.dim() == 3:
        lse = q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    return out, lse


def _bwd_fake(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
              dropout_p, softmax_scale, causal, causal_top_left, window_left, window_right,
              softcap, alibi_slopes, rng_state, deterministic, report=None,
              precision=PRECISION_DEFAULT):
    _check_rank(q)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


if _compat.HAS_REGISTER_FAKE:
    torch.library.register_fake(_NAMESPACE + "::fwd")(_fwd_fake)
    torch.library.register_fake(_NAMESPACE + "::bwd")(_bwd_fake)
