"""--launch-baseline: start the same deployment with speculation off, through the stack's adapter."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def launched_baseline(
    enabled: bool, config_path: str | None, stack: str | None = None, model: str | None = None,
    port: int | None = None, timeout_s: float = 900.0,
) -> Iterator[str | None]:
    """Yield the baseline's URL while it runs (None when not asked for); it is stopped on the way out,
    Ctrl-C included, so a bench never leaves a server behind."""
    if not enabled:
        yield None
        return
    from specplug.configfile import read_config
    from specplug.launcher import launch

    cfg, _ = read_config(config_path)
    stack_name = stack or cfg.stack.name
    # One port above the configured one: the speculative endpoint usually holds the configured port.
    use_port = port or cfg.serve.port + 1
    sys.stderr.write(f"Starting a baseline ({stack_name}, speculation off) on port {use_port}...\n")
    result = launch(
        stack_name, config_path=config_path, model=model, method="none", port=use_port, wait=False,
        timeout=timeout_s, out=sys.stderr,
    )
    host = result.plan.serve.host
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    try:
        yield f"http://{host}:{result.plan.serve.port}"
    finally:
        if result.server is not None:
            result.server.stop()
