"""Measuring a live endpoint: load generator, per-stack metric readers, verify, calibrate, reports.

Nothing here is imported by ``specplug`` at start-up; the bench/verify/calibrate commands import these
modules when they run (httpx and matplotlib come with the ``[bench]`` extra). The modules that need httpx
import it as ``client.py`` does, so a missing extra is one clear error (:func:`missing_httpx`), not a crash.
"""

from __future__ import annotations

from specplug.errors import MissingExtra


def missing_httpx() -> MissingExtra:
    """The error for httpx not being installed, naming the extra that brings it (the CLI names its command)."""
    return MissingExtra(
        "Measuring an endpoint (specplug.bench)", "httpx", "bench",
        "httpx (and matplotlib, for bench.png) come with specplug's [bench] extra.",
    )
