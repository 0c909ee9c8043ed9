"""Runs flashtrain and the float64 / naive references on the same inputs and applies the §4 rule
to out, lse, dq, dk and dv."""
import pytest
import torch

import flashtrain
from attention_reference import assert_rule, reference

# Head dims a CUDA build instantiates (FLASHTRAIN_HDIMS picks a subset), most common first.
CUDA_HEAD_DIMS = (64, 128, 96, 192, 256)


def head_dims(device, dtype, dim, dim_v=None, **options):
    """(dim, dim_v) when the device's backend runs them. On CUDA, whose kernels exist only for
    the head dims (and dtypes) the build instantiated, falls back to the first built head dim,
    and skips with the library's reasons when none runs. The CPU runs every size: no fallback,
    so a refusal there fails the test."""
    dim_v = dim if dim_v is None else dim_v
    candidates = [(dim, dim_v)]
    if device == "cuda":
        candidates += [(d, d) for d in CUDA_HEAD_DIMS]
    reasons = []
    for d, dv in candidates:
        q = torch.empty(1, 1, 1, d, dtype=dtype, device=device)
        v = torch.empty(1, 1, 1, dv, dtype=dtype, device=device)
        try:
            flashtrain.ops.backend(q, q, v, **options)
            return d, dv
        except ValueError as error:
            if device == "cpu":
                raise
            reasons.append(str(error))
    pytest.skip("the CUDA build runs none of head dims %s for %s: %s"
                % ([c[0] for c in candidates], dtype, reasons[-1]))


def random_inputs(shapes, dtype, device):
    """Leaves in `dtype` on `device` with requires_grad, from N(0, 1)."""
    return [torch.randn(*s, dtype=torch.float32).to(dtype).to(device).requires_grad_()
            for s in shapes]


def float64_leaves(tensors):
    return [t.detach().cpu().to(torch.float64).requires_grad_() for t in tensors]


def check_against_reference(run, inputs, dout_shape, ref_kwargs, dtype, grads=True):
    """run(q, k, v) -> (out, lse) with flashtrain; compares with reference(q, k, v, **ref_kwargs).

    Both see the same input values; the float64 result is X64, the naive `dtype` one Xnaive.
    """
    q, k, v = inputs
    out, lse = run(q, k, v)
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert bool(torch.isfinite(out).all()), "out has non-finite entries"
    dout = torch.randn(*dout_shape).to(dtype).to(out.device)

    results = {}
    for label, round_to in (("x64", None), ("naive", dtype)):
        leaves = float64_leaves(inputs)
        ref_out, ref_lse = reference(*leaves, round_to=round_to, **ref_kwargs)
        if grads:
            ref_out.backward(dout.cpu().to(torch.float64))
        results[label] = (ref_out, ref_lse) + (tuple(t.grad for t in leaves) if grads else ())
    assert_rule("out", out, results["x64"][0], results["naive"][0], dtype)
    assert_rule("lse", lse, results["x64"][1], results["naive"][1], torch.float32)
    if not grads:
        return
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
    for i, (name, g) in enumerate((("dq", dq), ("dk", dk), ("dv", dv))):
        assert g.shape == inputs[i].shape and g.dtype == dtype
        assert_rule(name, g.cpu(), results["x64"][2 + i], results["naive"][2 + i], dtype)
