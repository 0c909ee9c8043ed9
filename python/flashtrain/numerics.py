"""Numerics telemetry from Python (DESIGN.md §3), off by default and free when off.

    with flashtrain.numerics.monitor() as m:
        out = flashtrain.flash_attn_func(q, k, v)
        out.sum().backward()
    print(m.max_abs_scaled_logit, m.safe_mode_reruns, m.max_abs_ds)

Inside the block every flashtrain forward, and the backward of every forward run inside it
(wherever that backward runs: autograd may call it from another thread), merges its telemetry into
the monitor, as the C++ API merges into a NumericsReport: maxima, minima and counts over the calls.
Asking for telemetry synchronises each call with the GPU; on CUDA the forward takes the sm80
kernels, which collect it. Calls traced by torch.compile are not monitored. A monitor nested in
another adds what it saw to the outer one when it closes.
"""
import contextlib
import threading

import torch

from . import _compat

# The NumericsReport fields, in the order of the report tensor the operators fill
# (bindings/torch/attention_ops.cpp, ReportTensor).
FIELDS = ("max_abs_scaled_logit", "lse_min", "lse_max", "fully_masked_rows", "safe_mode_reruns",
          "max_abs_ds", "forward_calls", "backward_calls")
_COUNTS = ("fully_masked_rows", "safe_mode_reruns", "forward_calls", "backward_calls")
_MERGE = {"max_abs_scaled_logit": max, "lse_min": min, "lse_max": max, "max_abs_ds": max}


def new_report_tensor():
    """A report tensor with NumericsReport's initial values (lse range empty, all else 0)."""
    t = torch.zeros(len(FIELDS), dtype=torch.float64)
    t[FIELDS.index("lse_min")] = float("inf")
    t[FIELDS.index("lse_max")] = float("-inf")
    return t


class Monitor:
    """The telemetry one monitor() block collected; read its fields as attributes."""

    def __init__(self):
        self.tensor = new_report_tensor()

    def __getattr__(self, name):
        if name in FIELDS:
            value = self.tensor[FIELDS.index(name)].item()
            return int(value) if name in _COUNTS else value
        raise AttributeError(name)

    def as_dict(self):
        return {name: getattr(self, name) for name in FIELDS}

    def merge(self, other):
        """Adds another monitor's telemetry to this one."""
        for name in FIELDS:
            i = FIELDS.index(name)
            a, b = self.tensor[i].item(), other.tensor[i].item()
            self.tensor[i] = _MERGE[name](a, b) if name in _MERGE else a + b

    def __repr__(self):
        return "Monitor(%s)" % ", ".join("%s=%s" % kv for kv in self.as_dict().items())


# Open monitors, innermost last. Process-wide, not thread-local: autograd runs CUDA backward on
# its own threads.
_open = []
_lock = threading.Lock()


def active_report():
    """The report tensor of the innermost open monitor, or None (no monitor, or tracing)."""
    if not _open or _compat.is_compiling():
        return None
    with _lock:
        return _open[-1].tensor if _open else None


@contextlib.contextmanager
def monitor():
    """Collects the telemetry of the flashtrain calls made inside the block (see the module doc)."""
    m = Monitor()
    with _lock:
        _open.append(m)
    try:
        yield m
    finally:
        with _lock:
            _open.remove(m)
            outer = _open[-1] if _open else None
        if outer is not None:
            outer.merge(m)
