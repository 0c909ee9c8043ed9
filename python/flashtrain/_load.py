"""Finds and loads the compiled extension (libflashtrain_torch.so), which registers the
torch.ops.flashtrain operators. It is a plain shared library loaded with torch.ops.load_library,
so one build serves every Python interpreter of the same torch."""
import os

import torch

LIBRARY_NAME = "libflashtrain_torch.so"
# Points at a library built outside the package (scripts/test_python.sh, CMake build trees).
LIBRARY_ENV = "FLASHTRAIN_TORCH_LIBRARY"
# The torch.ops namespace that library registers its operators in (CMake's
# FLASHTRAIN_TORCH_OP_NAMESPACE): flashtrain, unless a second build made under another name is
# loaded alone, e.g. build B of scripts/gpu_ab.sh under Nsight Compute.
NAMESPACE_ENV = "FLASHTRAIN_TORCH_OP_NAMESPACE"


def namespace():
    """The operators' torch.ops namespace: $FLASHTRAIN_TORCH_OP_NAMESPACE, or flashtrain."""
    return os.environ.get(NAMESPACE_ENV) or "flashtrain"

_loaded_path = None


def _candidates():
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        return [explicit]
    return [os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)]


def load():
    """Loads the extension once; returns its path. Raises ImportError saying how to build it."""
    global _loaded_path
    if _loaded_path is not None:
        return _loaded_path
    candidates = _candidates()
    for path in candidates:
        if os.path.isfile(path):
            torch.ops.load_library(path)
            _loaded_path = path
            return path
    raise ImportError(
        "flashtrain: the compiled extension %s was not found (looked at: %s). Build it with "
        "`pip install --no-build-isolation .` in the flashtrain checkout, or with CMake "
        "(-DFLASHTRAIN_TORCH=ON) and set %s to the built library."
        % (LIBRARY_NAME, ", ".join(candidates), LIBRARY_ENV))
