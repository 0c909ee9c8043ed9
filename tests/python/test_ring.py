"""Ring attention (flashtrain.distributed) on N ranks of one machine: gloo ranks on the CPU always,
NCCL ranks when two or more GPUs are present.

The parent process draws the full-sequence inputs, spawns the ranks once per (backend, N), and
each rank runs ring_flash_attn_func forward and backward on its shard of every case; rank 0
gathers the full out, lse, dq, dk and dv. The parent then applies the DESIGN.md §4 rule twice:
against the float64 reference (with plain attention in the input dtype as Xnaive), and against
single-process flashtrain (the ring must be as close to it as naive attention is to float64).
"""
import collections
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import flashtrain
from attention_reference import assert_rule, atol_for, max_error, reference
from cases import float64_leaves, head_dims
from flashtrain.distributed import (ring_flash_attn_func, zigzag_gather, zigzag_positions,
                                    zigzag_shard, zigzag_unshard)

# A case: full-sequence shapes and how they are sharded. "zigzag" shards cut the sequence into
# 2N chunks of `chunk` tokens; "contiguous" shards (non-causal only) give each rank `chunk`
# queries and `chunk_k` keys.
Case = collections.namedtuple("Case", "name batch chunk chunk_k heads_q heads_k dim dim_v "
                                      "causal shard dtype")

_CPU_SHAPES = [
    # name                   B  chunk chunk_k Hq Hk  D   Dv  causal shard
    ("causal-gqa-chunk3",    2, 3,    3,      4, 2, 24, 16, True,  "zigzag"),
    ("causal-mqa-chunk1",    1, 1,    1,      3, 1, 8,  8,  True,  "zigzag"),
    ("causal-chunk17",       1, 17,   17,     2, 2, 40, 40, True,  "zigzag"),
    ("full-zigzag-chunk5",   2, 5,    5,      4, 1, 24, 16, False, "zigzag"),
    ("full-contiguous-q7k5", 1, 7,    5,      4, 2, 16, 16, False, "contiguous"),
]
CPU_CASES = ([Case(*shape, dtype) for shape in _CPU_SHAPES
              for dtype in (torch.float32, torch.bfloat16)]
             + [Case(*_CPU_SHAPES[0], torch.float16)])
CPU_WORLD_SIZES = (2, 4)
GPU_WORLD_SIZES = (2, 4)
# Seconds the spawned ranks may take before the test fails (a hang in the ring, say).
SPAWN_TIMEOUT = 120


def _case_id(case):
    return "%s-%s" % (case.name, str(case.dtype).replace("torch.", ""))


def _seqlens(case, world_size):
    if case.shard == "zigzag":
        return 2 * world_size * case.chunk, 2 * world_size * case.chunk_k
    return world_size * case.chunk, world_size * case.chunk_k


def _draw_inputs(case, world_size):
    """Full-sequence q, k, v, dout in the case's dtype, on the CPU, from N(0, 1)."""
    seqlen_q, seqlen_k = _seqlens(case, world_size)
    shapes = [(case.batch, seqlen_q, case.heads_q, case.dim),
              (case.batch, seqlen_k, case.heads_k, case.dim),
              (case.batch, seqlen_k, case.heads_k, case.dim_v),
              (case.batch, seqlen_q, case.heads_q, case.dim_v)]
    return [torch.randn(*s).to(case.dtype) for s in shapes]


# ------------------------------------------------------------------------------------------------
# What each rank runs


def _load(path):
    try:
        return torch.load(path, weights_only=False)  # torch >= 2.6 defaults to weights only
    except TypeError:
        return torch.load(path)


def _shard(x, case, rank, world_size, dim=1):
    if case.shard == "zigzag":
        return zigzag_shard(x, rank, world_size, dim=dim)
    return x.chunk(world_size, dim=dim)[rank].contiguous()


def _gather(x, case, dim=1, group=None):
    if case.shard == "zigzag":
        return zigzag_gather(x, dim=dim, group=group)
    raw = x.contiguous().view(torch.uint8)  # gloo's all_gather refuses bfloat16 (torch 1.13)
    parts = [torch.empty_like(raw) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, raw, group=group)
    return torch.cat([part.view(x.dtype) for part in parts], dim=dim)


def _misuse_messages(device):
    """The ValueError messages of inputs the ring refuses (raised before any communication,
    identically on every rank)."""
    messages = {}
    q = torch.randn(1, 3, 2, 8, device=device)
    for label, args in (("odd-causal", (q, q, q)), ("kv-mismatch", (q, q, q[:, :2]))):
        try:
            ring_flash_attn_func(*args, causal=True)
            messages[label] = None
        except ValueError as error:
            messages[label] = str(error)
    return messages


def _ring_case(case, inputs, rank, world_size, device, group):
    """This rank's ring forward and backward of the case; the gathered out, lse, dq, dk, dv."""
    q, k, v, dout = (_shard(t, case, rank, world_size).to(device) for t in inputs)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, lse = ring_flash_attn_func(q, k, v, causal=case.causal, group=group, return_lse=True)
    out.backward(dout)
    gathered = [_gather(out, case, group=group), _gather(lse, case, dim=2, group=group),
                _gather(q.grad, case, group=group), _gather(k.grad, case, group=group),
                _gather(v.grad, case, group=group)]
    return [t.detach().cpu() for t in gathered]


def _rank_main(rank, world_size, backend, init_file, cases_file, results_file):
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group(backend, init_method="file://" + init_file, rank=rank,
                            world_size=world_size)
    results = {}
    cases = _load(cases_file)
    for case, inputs in cases:
        results[_case_id(case)] = _ring_case(case, inputs, rank, world_size, device, None)
    results["misuse"] = _misuse_messages(device)
    if world_size == 4:
        # Two rings of two in sub-groups: ring [2, 3] needs its group ranks mapped to global
        # ranks. Rank 2 reports its ring's result for the first case.
        groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        result = _ring_case(*cases[0], rank % 2, 2, device, groups[rank // 2])
        if rank == 2:
            torch.save(result, results_file + ".subgroup")
    dist.barrier()
    if rank == 0:
        results["subgroup"] = (_load(results_file + ".subgroup") if world_size == 4 else None)
        torch.save(results, results_file)
    dist.barrier()
    dist.destroy_process_group()


def _spawn(backend, world_size, cases):
    """Runs the cases on world_size spawned ranks; returns rank 0's results by case id."""
    with tempfile.TemporaryDirectory(prefix="flashtrain-ring-") as tmp:
        cases_file, results_file = os.path.join(tmp, "cases.pt"), os.path.join(tmp, "results.pt")
        torch.manual_seed(20261202 + world_size)
        torch.save([(case, _draw_inputs(case, world_size)) for case in cases], cases_file)
        context = mp.spawn(_rank_main, nprocs=world_size, join=False,
                           args=(world_size, backend, os.path.join(tmp, "init"), cases_file,
                                 results_file))
        deadline = time.time() + SPAWN_TIMEOUT
        while not context.join(timeout=1):
            if time.time() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.kill()
                pytest.fail("%d %s ranks did not finish within %d s" % (world_size, backend,
                                                                        SPAWN_TIMEOUT))
        inputs = dict((_case_id(case), tensors) for case, tensors in _load(cases_file))
        return _load(results_file), inputs


# ------------------------------------------------------------------------------------------------
# What the parent checks


def _check_case(case, inputs, ring, device):
    """§4 rule for the ring's out, lse, dq, dk, dv against float64 and against single-process
    flashtrain on `device`."""
    q, k, v, dout = inputs
    names = ("out", "lse", "dq", "dk", "dv")
    for name, x in zip(names, ring):
        assert bool(torch.isfinite(x).all()), "%s has non-finite entries" % name
    assert ring[0].dtype == case.dtype and ring[1].dtype == torch.float32
    assert [t.shape for t in ring[2:]] == [q.shape, k.shape, v.shape]

    references = {}
    for label, round_to in (("x64", None), ("naive", case.dtype)):
        leaves = float64_leaves((q, k, v))
        ref_out, ref_lse = reference(*leaves, causal=case.causal, round_to=round_to)
        ref_out.backward(dout.to(torch.float64))
        references[label] = [ref_out, ref_lse] + [t.grad for t in leaves]

    single_inputs = [t.detach().clone().to(device).requires_grad_() for t in (q, k, v)]
    out, lse, _ = flashtrain.flash_attn_func(*single_inputs, causal=case.causal,
                                             return_attn_probs=True)
    out.backward(dout.to(device))
    single = [out, lse] + [t.grad for t in single_inputs]

    for i, name in enumerate(names):
        dtype = torch.float32 if name == "lse" else case.dtype
        x64, naive = references["x64"][i], references["naive"][i]
        assert_rule(name + " vs float64", ring[i], x64, naive, dtype)
        # As close to single-process flashtrain as naive attention is to float64.
        err = max_error(ring[i], single[i].cpu())
        bound = 2.0 * max_error(naive, x64) + atol_for(dtype, x64)
        assert err <= bound, ("%s: ring differs from single-process flashtrain by %.3g, more "
                              "than 2 * naive error + atol = %.3g" % (name, err, bound))


def _check_misuse(messages):
    odd, mismatch = messages["odd-causal"], messages["kv-mismatch"]
    assert odd is not None and "zigzag_shard" in odd and "is 3 (odd)" in odd, odd
    assert mismatch is not None and "[1, 3, 2, 8]" in mismatch and "[1, 2, 2, 8]" in mismatch, mismatch


@pytest.fixture(scope="module")
def cpu_runs():
    """(results, inputs) of the CPU cases on gloo, per world size, spawned once each."""
    return dict((n, _spawn("gloo", n, CPU_CASES)) for n in CPU_WORLD_SIZES)


@pytest.mark.parametrize("world_size", CPU_WORLD_SIZES)
@pytest.mark.parametrize("case", CPU_CASES, ids=_case_id)
def test_ring_cpu_gloo(cpu_runs, world_size, case):
    results, inputs = cpu_runs[world_size]
    _check_case(case, inputs[_case_id(case)], results[_case_id(case)], "cpu")


def test_ring_in_subgroups(cpu_runs):
    """Two rings of two ranks each inside a world of four (process groups other than WORLD)."""
    results, inputs = cpu_runs[4]
    case = CPU_CASES[0]
    _check_case(case, inputs[_case_id(case)], results["subgroup"], "cpu")


@pytest.mark.parametrize("world_size", CPU_WORLD_SIZES)
def test_ring_refuses_bad_shards(cpu_runs, world_size):
    _check_misuse(cpu_runs[world_size][0]["misuse"])


def test_zigzag_shard_roundtrip():
    x = torch.randn(2, 24, 3, 5)
    for world_size in (1, 2, 3, 4):
        shards = [zigzag_shard(x, r, world_size) for r in range(world_size)]
        assert all(s.shape[1] == 24 // world_size for s in shards)
        assert torch.equal(zigzag_unshard(shards), x)
        positions = [zigzag_positions(24, r, world_size) for r in range(world_size)]
        assert torch.equal(torch.sort(torch.cat(positions)).values, torch.arange(24))
        assert torch.equal(torch.cat([x[:, p] for p in positions], dim=1),
                           torch.cat(shards, dim=1))
    # Rank 1 of 2 holds chunks 1 and 2 of 4.
    assert zigzag_positions(8, 1, 2).tolist() == [2, 3, 4, 5]


def test_zigzag_shard_refuses_uneven_length():
    with pytest.raises(ValueError, match=r"2 \* world_size = 4 .* length is 10"):
        zigzag_shard(torch.randn(1, 10, 1, 4), 0, 2)


# ------------------------------------------------------------------------------------------------
# NCCL on two or more GPUs


def _gpu_cases():
    dim, dim_v = head_dims("cuda", torch.bfloat16, 64)
    shapes = [("causal-gqa-chunk67", 2, 67, 67, 8, 2, dim, dim_v, True, "zigzag"),
              ("causal-chunk1", 1, 1, 1, 4, 4, dim, dim_v, True, "zigzag"),
              ("full-contiguous-q131k97", 1, 131, 97, 4, 1, dim, dim_v, False, "contiguous")]
    return [Case(*shape, dtype) for shape in shapes for dtype in (torch.bfloat16, torch.float16)]


@pytest.mark.parametrize("world_size", GPU_WORLD_SIZES)
def test_ring_gpu_nccl(world_size):
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if available < world_size:
        pytest.skip("ring attention on %d NCCL ranks needs %d GPUs; torch sees %d"
                    % (world_size, world_size, available))
    if not dist.is_nccl_available():
        pytest.skip("this torch was built without NCCL")
    cases = _gpu_cases()
    results, inputs = _spawn("nccl", world_size, cases)
    _check_misuse(results["misuse"])
    for case in cases:
        _check_case(case, inputs[_case_id(case)], results[_case_id(case)], "cuda")
