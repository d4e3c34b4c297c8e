"""TEST-ONLY stand-in for SGLang's CUDA-only ``sgl_kernel`` package (sglang-kernel).

Never shipped: it lives under tests/ and is put first on PYTHONPATH only by the tests of
``make test-sglang``, which run the real SGLang 0.5.23 on a machine without a GPU. The
real package fails to import there (its ``common_ops`` library needs libcuda), and SGLang
imports names from it at module level even on the CPU path. Plain serving on a CPU
without AMX calls none of those kernels, so every name here is a function that raises
when it is called: an import succeeds, a kernel call fails loudly, nothing is faked.
Submodules (``sgl_kernel.x.y``) are stand-ins of the same kind, except the few that are
plain Python tables with no kernel in them (``REAL``): those are the installed package's
own files, loaded as they are.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types
from typing import Any

__version__ = "0.0.0+sweeper-test-stand-in"
STAND_IN = True

# names Python and typing probe for: a stand-in module must say it has none of them
_PROBED = frozenset({"__path__", "__file__", "__spec__", "__loader__", "__all__",
                     "__wrapped__", "__origin__", "__annotations__", "__getattr__"})


def _kernel(qualname: str) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{qualname}: sgl_kernel is a test-only stand-in here (tests/sglang/stand_in); "
            "no CUDA or CPU kernel is available on this machine")
    kernel.__name__ = qualname.rsplit(".", 1)[-1]
    kernel.__qualname__ = qualname
    return kernel


def _module_getattr(module_name: str) -> Any:
    def getattr_(name: str) -> Any:
        if name.startswith("__") or name in _PROBED:
            raise AttributeError(name)
        return _kernel(f"{module_name}.{name}")
    return getattr_


# Pure-Python submodules of the real package (no compiled op, no torch.ops at import):
# SGLang reads data from them at import time (e.g. quantization's scalar_types).
REAL = frozenset({"scalar_type"})


def _real_file(sub: str) -> str | None:
    try:
        path = importlib.metadata.distribution("sglang-kernel").locate_file(
            f"sgl_kernel/{sub}.py")
    except importlib.metadata.PackageNotFoundError:
        return None
    return str(path) if path.exists() else None  # type: ignore[union-attr]


class _SubmoduleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any ``sgl_kernel.<sub>`` import gets a stand-in module."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith(__name__ + "."):
            return None
        sub = fullname[len(__name__) + 1:]
        real = _real_file(sub) if sub in REAL else None
        if real is not None:
            return importlib.machinery.ModuleSpec(
                fullname, importlib.machinery.SourceFileLoader(fullname, real), origin=real)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def copy_all_layer_kv_cache_cpu(data_ptrs: Any, strides: Any, tgt_loc: Any, src_loc: Any
                                ) -> None:
    """SGLang's KV pool warms its copy kernel up at start-up (with speculative decoding) by
    copying slot 0 onto itself: that changes nothing, so it is done here by doing nothing.
    Any real copy (a slot onto another) raises, as every other kernel here does."""
    import torch

    if torch.equal(torch.as_tensor(tgt_loc), torch.as_tensor(src_loc)):
        return
    _kernel(f"{__name__}.copy_all_layer_kv_cache_cpu")()


__getattr__ = _module_getattr(__name__)
sys.meta_path.insert(0, _SubmoduleFinder())
