"""Ring attention: exact attention over a sequence sharded across the ranks of a process group.

Each of the N ranks holds its shard of q, k and v (BSHD, shard on the sequence dim). K/V blocks
travel around the ring with torch.distributed point-to-point (batch_isend_irecv: NCCL on GPU,
gloo on CPU); while block t+1 is in flight, rank r computes attention of its queries against
block t with flashtrain's fwd operator, so communication overlaps compute where the backend
runs it asynchronously (NCCL's own stream; gloo's threads). The partial results are merged
exactly with their log-sum-exp in fp32:

    lse = logaddexp(lse_a, lse_b),  out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)

Backward runs flashtrain's bwd operator per block with the *global* (merged) out and lse, so
each block's P = exp(S - lse) and D = rowsum(dO * O) are exactly the single-device ones and the
gradients are exact. dQ accumulates locally in fp32; the fp32 dK/dV partial sums travel around
the ring with their K/V block and arrive back at the block's owner after N hops.

Causal attention uses the zig-zag (load-balanced) sharding: the sequence is cut into 2N equal
chunks and rank r holds chunks r and 2N-1-r, concatenated (zigzag_shard). Every rank then does
the same work per step:
  step 0 (own K/V):   causal attention of the local 2c queries against the local 2c keys;
  K/V from rank s<r:  all local queries against the first chunk (chunk s) of the block, unmasked;
  K/V from rank s>r:  the second local query chunk (chunk 2N-1-r) against the whole block.
Non-causal attention takes any sharding of the sequence (contiguous or zig-zag), as long as every
rank holds the same number of keys.

GQA/MQA (Hq a multiple of Hk) and Dv != Dqk are handled by the operators themselves.
"""
import torch
import torch.distributed as dist

from .. import checkpoint, ops

__all__ = [
    "RingFlashAttnFunction",
    "ring_flash_attn_func",
    "zigzag_gather",
    "zigzag_positions",
    "zigzag_shard",
    "zigzag_unshard",
]


# ----------------------------------------------------------------------------------------------
# Sharding helpers


def _group_rank_and_size(group, rank, world_size):
    if rank is None:
        rank = dist.get_rank(group)
    if world_size is None:
        world_size = dist.get_world_size(group)
    return rank, world_size


def _check_zigzag_length(length, world_size, what):
    if length % (2 * world_size) != 0:
        raise ValueError("%s: the zig-zag sharding cuts the sequence into 2 * world_size = %d "
                         "equal chunks, but the sequence length is %d (not a multiple of %d)"
                         % (what, 2 * world_size, length, 2 * world_size))


def zigzag_shard(x, rank=None, world_size=None, dim=1, group=None):
    """The zig-zag shard of the full-sequence tensor x held by `rank` of `world_size`.

    x's dim `dim` (1 for BSHD q/k/v/out, 2 for lse [B, H, S]) is cut into 2 * world_size equal
    chunks; the shard is chunks rank and 2 * world_size - 1 - rank, concatenated (a new
    contiguous tensor). rank / world_size default to the group's (torch.distributed).
    """
    rank, world_size = _group_rank_and_size(group, rank, world_size)
    _check_zigzag_length(x.shape[dim], world_size, "zigzag_shard")
    chunks = x.chunk(2 * world_size, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world_size - 1 - rank]], dim=dim)


def zigzag_unshard(shards, dim=1):
    """The full-sequence tensor from every rank's zig-zag shard (a list in rank order)."""
    world_size = len(shards)
    chunks = [None] * (2 * world_size)
    for rank, shard in enumerate(shards):
        if shard.shape[dim] % 2 != 0:
            raise ValueError("zigzag_unshard: shard %d has odd length %d on dim %d; a zig-zag "
                             "shard holds two equal chunks" % (rank, shard.shape[dim], dim))
        first, second = shard.chunk(2, dim=dim)
        chunks[rank], chunks[2 * world_size - 1 - rank] = first, second
    return torch.cat(chunks, dim=dim)


def zigzag_gather(x, dim=1, group=None):
    """all_gather of every rank's zig-zag shard x, reassembled into the full sequence."""
    # Gathered as raw bytes: gloo's all_gather refuses bfloat16 (torch 1.13).
    raw = x.contiguous().view(torch.uint8)
    shards = [torch.empty_like(raw) for _ in range(dist.get_world_size(group))]
    dist.all_gather(shards, raw, group=group)
    return zigzag_unshard([shard.view(x.dtype) for shard in shards], dim=dim)


def zigzag_positions(seqlen, rank=None, world_size=None, group=None, device=None):
    """int64 global positions [seqlen / world_size] of the tokens in `rank`'s zig-zag shard of a
    sequence of length `seqlen` (for rotary embeddings and the like)."""
    rank, world_size = _group_rank_and_size(group, rank, world_size)
    _check_zigzag_length(seqlen, world_size, "zigzag_positions")
    return zigzag_shard(torch.arange(seqlen, device=device), rank, world_size, dim=0)


# ----------------------------------------------------------------------------------------------
# Communication


def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    if hasattr(dist, "get_global_rank"):
        return dist.get_global_rank(group, group_rank)
    return dist.distributed_c10d._get_global_rank(group, group_rank)  # torch < 1.13


class _Ring:
    """Sends tensors to the next rank and receives the previous rank's, asynchronously."""

    def __init__(self, group):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.next = _global_rank(group, (self.rank + 1) % self.world_size)
        self.prev = _global_rank(group, (self.rank - 1) % self.world_size)

    def start(self, tensors, tag=0):
        """Starts sending `tensors` (contiguous) to the next rank and receiving tensors of the
        same shapes and dtypes from the previous one; returns (received buffers, requests).

        Every rank posts the same sequence of transfers, so they pair up in order; `tag` keeps
        the K/V and dK/dV streams apart on backends that match by tag (gloo).
        """
        received = [torch.empty_like(t) for t in tensors]
        ops_ = [dist.P2POp(dist.isend, t, self.next, self.group, tag) for t in tensors]
        ops_ += [dist.P2POp(dist.irecv, t, self.prev, self.group, tag) for t in received]
        return received, dist.batch_isend_irecv(ops_)

    @staticmethod
    def wait(requests):
        for request in requests:
            request.wait()


# ----------------------------------------------------------------------------------------------
# Forward and backward


def _merge(out, lse, block_out, block_lse):
    """Merges a block's (out [B, S, H, Dv] any dtype, lse [B, H, S] fp32) into the fp32
    accumulators (out, lse), in place. Rows with lse = -inf on both sides stay (0, -inf)."""
    new_lse = torch.logaddexp(lse, block_lse)
    finite = torch.isfinite(new_lse)
    safe = torch.where(finite, new_lse, torch.zeros_like(new_lse))
    old_w = torch.where(finite, torch.exp(lse - safe), torch.zeros_like(lse))
    new_w = torch.where(finite, torch.exp(block_lse - safe), torch.zeros_like(block_lse))
    # [B, H, S] -> [B, S, H, 1] to scale BSHD rows.
    out.mul_(old_w.transpose(1, 2).unsqueeze(-1))
    out.add_(block_out.float() * new_w.transpose(1, 2).unsqueeze(-1))
    lse.copy_(new_lse)


def _contiguous(t):
    return t if t.is_contiguous() else t.contiguous()


def _block_plan(step, rank, world_size, causal, half_q, half_k):
    """(q rows, k rows, causal) for the K/V block that came from rank (rank - step) mod N:
    the slices of the local q and of the block that attend to each other, and whether the
    causal mask applies inside them (only for the rank's own block)."""
    everything = slice(None)
    if not causal:
        return everything, everything, False
    if step == 0:
        return everything, everything, True
    source = (rank - step) % world_size
    if source < rank:
        return everything, slice(0, half_k), False
    return slice(half_q, None), everything, False


def _check_inputs(q, k, v, causal, world_size):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError("ring_flash_attn_func: %s must have rank 4 [B, S_local, H, D], got "
                             "shape %s" % (name, list(t.shape)))
    if k.shape[:3] != v.shape[:3]:
        raise ValueError("ring_flash_attn_func: k %s and v %s must agree on [B, S_local, Hk]"
                         % (list(k.shape), list(v.shape)))
    if causal:
        if q.shape[1] != k.shape[1]:
            raise ValueError("ring_flash_attn_func: causal ring attention is self-attention: q "
                             "holds %d tokens per rank but k holds %d"
                             % (q.shape[1], k.shape[1]))
        if world_size > 1 and q.shape[1] % 2 != 0:
            raise ValueError("ring_flash_attn_func: causal ring attention needs zig-zag shards "
                             "(zigzag_shard): two equal chunks per rank, but the local sequence "
                             "length is %d (odd)" % q.shape[1])


def _ring_forward(q, k, v, causal, softmax_scale, group):
    ring = _Ring(group)
    rank, world_size = ring.rank, ring.world_size
    half_q, half_k = q.shape[1] // 2, k.shape[1] // 2
    out = lse = None  # fp32 accumulators; step 0 covers every row
    kv = [_contiguous(k), _contiguous(v)]
    for step in range(world_size):
        pending = None
        if step + 1 < world_size:
            received, pending = ring.start(kv)
        rows, cols, block_causal = _block_plan(step, rank, world_size, causal, half_q, half_k)
        block_out, block_lse = ops.fwd(q[:, rows], kv[0][:, cols], kv[1][:, cols],
                                       softmax_scale=softmax_scale, causal=block_causal)
        if step == 0:
            out, lse = block_out.float(), block_lse
        else:
            _merge(out[:, rows], lse[:, :, rows], block_out, block_lse)
        if pending is not None:
            ring.wait(pending)
            kv = received
    return out.to(q.dtype), lse


def _ring_backward(dout, q, k, v, out, lse, causal, softmax_scale, group, deterministic):
    ring = _Ring(group)
    rank, world_size = ring.rank, ring.world_size
    half_q, half_k = q.shape[1] // 2, k.shape[1] // 2
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    kv = [_contiguous(k), _contiguous(v)]
    dkv = None            # fp32 dK/dV partial sums of the K/V block this rank holds
    dkv_pending = None    # (buffers, requests) of the partial sums arriving from the previous rank
    for step in range(world_size):
        kv_pending = None
        if step + 1 < world_size:
            kv_received, kv_pending = ring.start(kv)
        rows, cols, block_causal = _block_plan(step, rank, world_size, causal, half_q, half_k)
        dq_b, dk_b, dv_b = ops.bwd(dout[:, rows], q[:, rows], kv[0][:, cols], kv[1][:, cols],
                                   out[:, rows], lse[:, :, rows], softmax_scale=softmax_scale,
                                   causal=block_causal, deterministic=deterministic)
        dq[:, rows] += dq_b
        if dkv_pending is None:
            dkv = [torch.zeros(kv[0].shape, dtype=torch.float32, device=q.device),
                   torch.zeros(kv[1].shape, dtype=torch.float32, device=q.device)]
        else:
            ring.wait(dkv_pending[1])
            dkv = dkv_pending[0]
        dkv[0][:, cols] += dk_b
        dkv[1][:, cols] += dv_b
        # The partial sums follow their K/V block to the next rank; after the last step they
        # make the final hop home to the block's owner.
        dkv_pending = ring.start(dkv, tag=1) if world_size > 1 else None
        if kv_pending is not None:
            ring.wait(kv_pending)
            kv = kv_received
    if dkv_pending is not None:
        ring.wait(dkv_pending[1])
        dkv = dkv_pending[0]
    return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype)


class RingFlashAttnFunction(torch.autograd.Function):
    """apply(q, k, v, causal, softmax_scale, group, deterministic) -> (out, lse).

    q [B, S_local, Hq, D], k [B, S_local_k, Hk, D], v [B, S_local_k, Hk, Dv]: this rank's
    shards (zig-zag shards when causal). out [B, S_local, Hq, Dv] in q's dtype and lse float32
    [B, Hq, S_local] are this rank's shards of the full attention's; lse is not differentiable.
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, group, deterministic):
        out, lse = _ring_forward(q, k, v, causal, softmax_scale, group)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.options = (causal, softmax_scale, group, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        causal, softmax_scale, group, deterministic = ctx.options
        if dout.stride(-1) != 1:
            dout = dout.contiguous()
        dq, dk, dv = _ring_backward(dout, q, k, v, out, lse, causal, softmax_scale, group,
                                    deterministic)
        return dq, dk, dv, None, None, None, None


def ring_flash_attn_func(q, k, v, causal=False, softmax_scale=None, group=None,
                         deterministic=False, return_lse=False):
    """Exact attention over a sequence sharded across the ranks of `group` (default: WORLD).

    q [B, S_local, Hq, D], k [B, S_local_k, Hk, D], v [B, S_local_k, Hk, Dv] are this rank's
    shards; every rank of the group must call it with shards of the same shapes. causal=True
    needs zig-zag shards (zigzag_shard / zigzag_positions; causal alignment is the usual
    self-attention diagonal). Returns this rank's shard of out [B, S_local, Hq, Dv], and with
    return_lse=True also lse float32 [B, Hq, S_local]. Differentiable in q, k and v.
    """
    world_size = dist.get_world_size(group)
    _check_inputs(q, k, v, causal, world_size)
    checkpoint.warn_if_recomputing()
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    out, lse = RingFlashAttnFunction.apply(q, k, v, bool(causal), softmax_scale, group,
                                           bool(deterministic))
    return (out, lse) if return_lse else out
