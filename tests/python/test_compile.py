"""torch.compile (torch >= 2.4): the operators pass torch.library.opcheck (schema, fake tensor,
autograd registration, AOT dispatch) and the public functions compile with fullgraph=True,
forward and backward, giving eager's results."""
import pytest
import torch

import flashtrain
from cases import head_dims
from flashtrain import _compat

pytestmark = pytest.mark.skipif(not _compat.HAS_REGISTER_FAKE,
                                reason="torch.compile support needs torch >= 2.4")


def _dtype_and_dim(device):
    """float32 where the backend runs it (the CPU), else bfloat16; a head dim the build has."""
    try:
        return (torch.float32,) + head_dims(device, torch.float32, 32)[:1]
    except pytest.skip.Exception:
        return (torch.bfloat16,) + head_dims(device, torch.bfloat16, 32)[:1]


def _dense(device, requires_grad=False):
    dtype, d = _dtype_and_dim(device)
    return [torch.randn(*s, device=device).to(dtype).requires_grad_(requires_grad)
            for s in ((2, 7, 4, d), (2, 11, 2, d), (2, 11, 2, d))]


def _varlen(device):
    dtype, d = _dtype_and_dim(device)
    cu_q = torch.tensor([0, 3, 10], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 5, 11], dtype=torch.int32, device=device)
    tensors = [torch.randn(*s, device=device).to(dtype)
               for s in ((10, 4, d), (11, 2, d), (11, 2, d))]
    return tensors, cu_q, cu_k


def _fwd_args(q, k, v, cu_q=None, cu_k=None, max_q=0, max_k=0, dropout_p=0.0, rng_state=None):
    return (q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, None, True, False, -1, -1, 0.0, None,
            rng_state)


@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_opcheck_dense(device, dropout_p):
    q, k, v = _dense(device)
    rng_state = flashtrain.ops.draw_rng_state() if dropout_p else None
    args = _fwd_args(q, k, v, dropout_p=dropout_p, rng_state=rng_state)
    torch.library.opcheck(torch.ops.flashtrain.fwd.default, args)
    out, lse = torch.ops.flashtrain.fwd(*args)
    bwd_args = (torch.randn_like(out), q, k, v, out, lse) + args[3:] + (False,)
    torch.library.opcheck(torch.ops.flashtrain.bwd.default, bwd_args)
    # With the trailing report and precision arguments (precision=high).
    torch.library.opcheck(torch.ops.flashtrain.bwd.default,
                          bwd_args + (None, flashtrain.ops.PRECISION_HIGH))


def test_opcheck_varlen(device):
    (q, k, v), cu_q, cu_k = _varlen(device)
    args = _fwd_args(q, k, v, cu_q, cu_k, 7, 6)
    torch.library.opcheck(torch.ops.flashtrain.fwd.default, args)
    out, lse = torch.ops.flashtrain.fwd(*args)
    torch.library.opcheck(torch.ops.flashtrain.bwd.default,
                          (torch.randn_like(out), q, k, v, out, lse) + args[3:] + (True,))


def _eager_and_compiled(fn, inputs):
    results = []
    for f in (fn, torch.compile(fn, fullgraph=True)):
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        out = f(*leaves)
        out.backward(torch.ones_like(out))
        results.append([out.detach()] + [t.grad for t in leaves])
    return results


# Compiled code may fuse and reorder the surrounding torch ops, so results agree to a few units of
# the dtype's rounding, not bitwise.
_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _assert_same(results):
    eager, compiled = results
    for a, b in zip(eager, compiled):
        tol = _TOLERANCE[a.dtype]
        assert torch.allclose(a, b, rtol=tol, atol=tol)


def test_compile_flash_attn_func(device):
    fn = lambda q, k, v: flashtrain.flash_attn_func(q, k, v, causal=True, window_size=(4, -1),
                                                    softcap=3.0)
    _assert_same(_eager_and_compiled(fn, _dense(device)))


def test_compile_flash_attn_func_precision_high(device):
    fn = lambda q, k, v: flashtrain.flash_attn_func(q, k, v, causal=True, precision="high")
    _assert_same(_eager_and_compiled(fn, _dense(device)))


def test_compile_sdpa_in_a_block(device):
    dtype, d = _dtype_and_dim(device)
    w = torch.randn(d, d, device=device).to(dtype)

    def block(q, k, v):
        q = torch.matmul(q, w).transpose(1, 2)
        out = flashtrain.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2),
                                                      is_causal=True, enable_gqa=True)
        return torch.nn.functional.gelu(out)

    _assert_same(_eager_and_compiled(block, _dense(device)))


def test_compile_varlen(device):
    (q, k, v), cu_q, cu_k = _varlen(device)
    fn = lambda q, k, v: flashtrain.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 7, 6, causal=True)
    _assert_same(_eager_and_compiled(fn, [q, k, v]))


def test_compile_dropout_runs_and_differentiates(device):
    # Compiled code draws its own random numbers, so only shape, finiteness and gradient flow
    # are comparable with eager.
    fn = torch.compile(lambda q, k, v: flashtrain.flash_attn_func(q, k, v, dropout_p=0.3),
                       fullgraph=True)
    q, k, v = _dense(device, requires_grad=True)
    out = fn(q, k, v)
    out.sum().backward()
    assert out.shape == q.shape and bool(torch.isfinite(out).all())
    assert all(bool(t.grad.abs().sum() > 0) for t in (q, k, v))
