"""Click parameter types whose choices come from the adapter registry, checked when a command runs (so that
starting the CLI never scans installed plugins)."""

from __future__ import annotations

from typing import Any

import click


class StackChoice(click.ParamType):
    """A registered stack name (built-in or plugin); ``extra`` adds pseudo-stacks a command understands."""

    name = "stack"

    def __init__(self, extra: tuple[str, ...] = ()) -> None:
        self.extra = extra

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        from specplug.stacks.registry import STACK_PREFERENCE

        return "[" + "|".join((*STACK_PREFERENCE, *self.extra, "...")) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from specplug.stacks.registry import is_stack, stack_names

        if isinstance(value, str) and (value in self.extra or is_stack(value)):
            return value
        self.fail(f"'{value}' is not a registered stack. Choose from: {', '.join((*stack_names(), *self.extra))}.", param, ctx)
