"""specplug: speculative decoding, decided, configured and launched for your serving stack.

The Python API mirrors the CLI with the same parameter names; it loads lazily so that importing specplug
(and its CLI) stays fast::

    import specplug
    plan = specplug.recommend(model="llama-3.1-70b", gpu="h100", num_gpus=4, batch_size=1, workload="chat")
    est = specplug.estimate(model="vicuna-7b", method="eagle", gpu="a100", batch_size=1)
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "recommend": "specplug.planning",
    "estimate": "specplug.planning",
    "plan_from_config": "specplug.planning",
    "render": "specplug.rendering",
    "launch": "specplug.launcher",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'specplug' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
