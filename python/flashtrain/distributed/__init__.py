"""Attention over a sequence sharded across the ranks of a torch.distributed process group
(context parallelism). See ring.py."""
from . import ring
from .ring import (RingFlashAttnFunction, ring_flash_attn_func, zigzag_gather, zigzag_positions,
                   zigzag_shard, zigzag_unshard)

__all__ = ["ring"] + ring.__all__
