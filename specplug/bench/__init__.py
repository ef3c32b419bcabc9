"""Measuring a live endpoint: load generator, per-stack metric readers, verify, calibrate, reports.

Nothing here is imported by ``specplug`` at start-up; the bench/verify/calibrate commands import these
modules when they run (httpx and matplotlib come with the ``[bench]`` extra). The modules that need httpx
import it as ``client.py`` does, so a missing extra is one clear error (:func:`missing_httpx`), not a crash.
"""

from __future__ import annotations

from specplug.errors import SpecplugError


def missing_httpx() -> SpecplugError:
    """The error for httpx not being installed, naming the command that needs it and the extra that brings it."""
    import click

    ctx = click.get_current_context(silent=True)
    what = ctx.command_path if ctx is not None else "Measuring an endpoint (specplug.bench)"
    return SpecplugError(
        f"{what} needs httpx: pip install 'specplug[bench]'",
        "httpx (and matplotlib, for bench.png) come with specplug's [bench] extra.",
    )
