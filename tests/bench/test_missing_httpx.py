"""Without the [bench] extra (no httpx), bench and verify say which extra to install: a user error, exit 1."""

from __future__ import annotations

import sys

import pytest

# The modules that import httpx, dropped from sys.modules so the commands import them afresh without it.
NEEDS_HTTPX = ("specplug.bench.client", "specplug.bench.loadgen", "specplug.bench.clientrun", "specplug.bench.verify")


@pytest.fixture
def without_httpx(monkeypatch):
    import specplug.bench as pkg

    monkeypatch.setitem(sys.modules, "httpx", None)  # 'import httpx' raises ImportError, as when it is missing
    for name in NEEDS_HTTPX:
        monkeypatch.delitem(sys.modules, name, raising=False)
        short = name.rsplit(".", 1)[1]
        if hasattr(pkg, short):
            monkeypatch.setattr(pkg, short, getattr(pkg, short))  # put back after the test, as the module is


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "--endpoint", "http://127.0.0.1:9", "--concurrency", "1"),
        ("verify", "--endpoint", "http://127.0.0.1:9", "--baseline", "http://127.0.0.1:10"),
    ],
    ids=["bench", "verify"],
)
def test_missing_httpx_names_the_bench_extra(run_cli, without_httpx, argv):
    res = run_cli(*argv)
    text = res.stdout + res.stderr
    assert res.exit_code == 1, text
    assert f"Error: specplug {argv[0]} needs httpx: pip install 'specplug[bench]'" in res.stderr, text
    assert "Internal error" not in text and "Traceback" not in text
