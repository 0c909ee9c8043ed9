"""Integrations with other libraries. Each submodule is imported on first use
(flashtrain.integrations.transformers), so flashtrain itself never requires those libraries."""
import importlib

_SUBMODULES = ("transformers",)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
