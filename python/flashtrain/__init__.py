"""flashtrain: FlashAttention-style attention for training, as a drop-in for PyTorch.

    from flashtrain import flash_attn_func                    # FlashAttention-2's API
    from flashtrain import scaled_dot_product_attention       # torch SDPA's API
    flashtrain.integrations.transformers.register()           # attn_implementation="flashtrain"
"""
from . import checkpoint, integrations, numerics, ops
from .interface import (flash_attn_func, flash_attn_kvpacked_func, flash_attn_qkvpacked_func,
                        flash_attn_varlen_func, scaled_dot_product_attention)

__version__ = "0.1.0"

__all__ = [
    "checkpoint",
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "integrations",
    "numerics",
    "ops",
    "scaled_dot_product_attention",
]
