"""Running another benchmark client with the server's ``/metrics`` scraped before and after it.

Client reports (GuideLLM's always, vLLM's when no draft token moved) carry no speculation figures; the server's
counters, read around the client's run, give its acceptance the way ``specplug bench`` reads it. The client runs
as the argv list it was given (never through a shell), its output going to stderr so that specplug's own
(``--output json``) stays alone on stdout, and must exit 0.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass, field

try:
    import httpx
except ImportError:  # the [bench] extra is not installed
    from specplug.bench import missing_httpx

    raise missing_httpx() from None

from specplug.bench.client import Endpoint, parse_endpoint
from specplug.bench.metrics import (
    Acceptance,
    Snapshot,
    detect_stack,
    needs_sampling,
    parse_exposition,
    read_acceptance,
)
from specplug.errors import SpecplugError

SAMPLE_EVERY_S = 1.0  # gauge-only stacks (SGLang) show the latest batch: sample them while the client runs


@dataclass
class Scraped:
    before: Snapshot | None
    after: Snapshot | None
    during: list[Snapshot] = field(default_factory=list)
    stack: str | None = None
    acceptance: Acceptance | None = None
    note: str = ""


def scrape_once(client: httpx.Client, ep: Endpoint) -> Snapshot | None:
    try:
        r = client.get(ep.metrics_url, timeout=10.0)
    except httpx.HTTPError:
        return None
    return parse_exposition(r.text) if r.status_code == 200 else None


def _stderr_fd() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a captured stream: the client keeps its own stdout
        return None


def run_client(argv: list[str], endpoint: str, api_key: str | None = None, stack: str | None = None,
               timeout_s: float | None = None) -> Scraped:
    """Scrape ``endpoint``'s /metrics, run ``argv`` to its end, scrape again; the acceptance in between."""
    ep = Endpoint(parse_endpoint(endpoint, "--endpoint"), api_key=api_key)
    with httpx.Client(headers=ep.headers()) as http:
        before = scrape_once(http, ep)
        if before is None:
            raise SpecplugError(
                f"{ep.metrics_url} did not answer with metrics, so the run's acceptance cannot be read.",
                "Check the URL and that the server exposes /metrics (SGLang: --enable-metrics; llama.cpp: --metrics).",
            )
        sample = needs_sampling(before)
        during: list[Snapshot] = []
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdout=_stderr_fd())
        except OSError as exc:
            raise SpecplugError(f"Cannot run the client '{argv[0]}': {exc.strerror or exc}.",
                                "Check the command after '--' (it runs without a shell).") from None
        try:
            while proc.poll() is None:
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    proc.kill()
                    proc.wait()
                    raise SpecplugError(f"The client ran past {timeout_s:.0f} s and was stopped.")
                time.sleep(SAMPLE_EVERY_S if sample else 0.2)
                if sample and (snap := scrape_once(http, ep)) is not None:
                    during.append(snap)
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait()
            raise
        if proc.returncode != 0:
            raise SpecplugError(f"The client exited with status {proc.returncode}; its report is not read.",
                                "Fix the client's command line (its own output is above) and run again.")
        after = scrape_once(http, ep)
    stack = stack or detect_stack(after)
    acc = read_acceptance(before, after, during, stack=stack)
    note = (f"Acceptance read from {ep.metrics_url}, scraped before and after the client ran."
            if acc is not None and acc.draft_tokens != 0
            else f"{ep.metrics_url} showed no speculative-decoding counters moving during the client's run.")
    return Scraped(before, after, during, stack, acc, note)
