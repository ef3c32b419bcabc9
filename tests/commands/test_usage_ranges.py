"""Numbers out of an option's range are usage errors (exit 2) in every command, refused before anything loads."""

from __future__ import annotations

import sys

import pytest


@pytest.mark.parametrize(
    "args,option",
    [
        (["-k", "0"], "-k"),
        (["-k", "-3"], "-k"),
        (["--max-tokens", "-1"], "--max-tokens"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--temperature", "-1"], "--temperature"),
        (["--top-p", "0"], "--top-p"),
        (["--top-k", "-1"], "--top-k"),
    ],
)
def test_generate_ranges_are_usage_errors_before_any_model_load(run_cli, monkeypatch, args, option):
    # No torch: a range checked after the runtime's import would fail on the missing extra (exit 1) instead.
    monkeypatch.setitem(sys.modules, "torch", None)
    res = run_cli("generate", *args, "--prompt", "x")
    assert res.exit_code == 2, res.stdout + res.stderr
    assert f"Invalid value for '{option}'" in res.stderr
    assert "specplug[runtime]" not in res.stderr


def test_k_zero_is_the_same_usage_error_in_generate_and_estimate(run_cli):
    gen = run_cli("generate", "-k", "0", "--prompt", "x")
    est = run_cli("estimate", "--model", "llama-3.1-8b", "--method", "ngram", "-k", "0")
    assert gen.exit_code == est.exit_code == 2, (gen.stderr, est.stderr)
    assert "0 is not in the range 1<=x<=64" in gen.stderr and "0 is not in the range 1<=x<=64" in est.stderr
