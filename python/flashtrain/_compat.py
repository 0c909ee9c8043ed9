"""What the running torch can do. flashtrain works eagerly on torch 1.13 (Debian's) and adds
torch.compile support (fake registrations, selective checkpointing) on torch >= 2.4."""
import torch


def _parse_version(text):
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


TORCH_VERSION = _parse_version(torch.__version__)

# torch.library.register_fake and torch.utils.checkpoint's CheckpointPolicy appeared in 2.4.
HAS_REGISTER_FAKE = hasattr(torch.library, "register_fake")
HAS_SELECTIVE_CHECKPOINT = TORCH_VERSION >= (2, 4)


def is_compiling():
    """True while torch.compile (dynamo) traces the caller."""
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling"):
        return compiler.is_compiling()
    dynamo = getattr(torch, "_dynamo", None)
    if dynamo is not None and hasattr(dynamo, "is_compiling"):
        return dynamo.is_compiling()
    return False
