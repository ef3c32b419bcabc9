"""The adapter API's old home, kept so that plugins written against it still load: new code imports from
specplug.stacks (protocol, base, windows, metrics, registry)."""

from __future__ import annotations

import warnings

from specplug.stacks.base import BaseAdapter, distribution_version, load_compat, program_output
from specplug.stacks.metrics import (
    NO_METRICS,
    Counters,
    Gauges,
    IterationStats,
    ResponseTimings,
    SkippedTokens,
    StackMetrics,
    spec_decode_counters,
)
from specplug.stacks.protocol import Adapter, LaunchSpec, Problem, StackImage, raise_problems
from specplug.stacks.registry import adapters, default_stack, get_adapter, is_stack, stack_names
from specplug.stacks.windows import (
    Window,
    describe_windows,
    pick_floor,
    spelling,
    version_at_least,
    version_in,
)
from specplug.versions import version_key

__all__ = [
    "NO_METRICS", "Adapter", "BaseAdapter", "Counters", "Gauges", "IterationStats", "LaunchSpec", "Problem",
    "ResponseTimings", "SkippedTokens", "StackImage", "StackMetrics", "Window", "adapters", "default_stack",
    "describe_windows", "distribution_version", "get_adapter", "is_stack", "load_compat", "pick_floor",
    "program_output", "raise_problems", "spec_decode_counters", "spelling", "stack_names", "version_at_least",
    "version_in", "version_key",
]

warnings.warn("specplug.adapter is deprecated: import from specplug.stacks.base, .protocol, .windows, .metrics or "
              ".registry", DeprecationWarning, stacklevel=2)
