"""Prompt sets and the mistakes users make on the command line: one clear error, exit 1, no traceback."""

from __future__ import annotations

import json
import socket

import pytest

from specplug.bench.client import parse_endpoint
from specplug.bench.prompts import builtin_workloads, load_workload, parse_jsonl, select
from specplug.errors import SpecplugError


def test_builtin_workloads_ship_with_realistic_lengths():
    assert set(builtin_workloads()) >= {"chat", "code", "code-edit", "rag", "summarization"}
    chars = {w: [len(p.text()) for p in load_workload(w)] for w in builtin_workloads()}
    assert all(len(v) >= 10 for v in chars.values())
    # Long-context sets carry passages/code (hundreds of tokens); chat stays short.
    for w in ("code-edit", "rag", "summarization"):
        assert min(chars[w]) > 900, w
    assert max(chars["chat"]) < 400


def test_code_edit_prompts_contain_the_code_to_repeat():
    for p in load_workload("code-edit"):
        text = p.text()
        assert "```" in text and "return" in text.lower()


def test_rag_prompts_ask_to_quote_passages():
    for p in load_workload("rag"):
        assert p.messages and p.messages[0]["role"] == "system" and "Quote" in p.messages[0]["content"]
        assert "[1]" in p.text() and "Question:" in p.text()


def test_workload_readme_states_origin_and_licence():
    from importlib import resources

    text = resources.files("specplug.bench").joinpath("workloads", "README.md").read_text()
    assert "Apache-2.0" in text and "written for specplug" in text


def test_jsonl_forms_and_cycling():
    ps = parse_jsonl('{"prompt": "a"}\n\n{"messages": [{"role": "user", "content": "b"}], "max_tokens": 5, "id": "x"}\n', "f")
    assert ps[0].api("auto") == "completions" and ps[1].api("auto") == "chat" and ps[1].id == "x"
    assert ps[1].max_tokens == 5 and ps[0].as_messages() == [{"role": "user", "content": "a"}]
    assert [p.id for p in select(ps, 5)] == ["f-1", "x", "f-1", "x", "f-1"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "holds no prompts"),
        ('{"prompt": "ok"}\nnot json\n', "line 2: not valid JSON"),
        ('["a"]\n', "expected a JSON object"),
        ('{"prompt": ""}\n', "'prompt' must be a non-empty string"),
        ('{"prompt": "a", "messages": []}\n', "exactly one of"),
        ('{"messages": [{"role": "user"}]}\n', "'messages' must be"),
        ('{"prompt": "a", "max_tokens": 0}\n', "'max_tokens' must be a positive integer"),
    ],
)
def test_bad_jsonl_is_a_clear_error(text, message):
    with pytest.raises(SpecplugError, match=message):
        parse_jsonl(text, "prompts.jsonl")


def test_endpoint_urls_are_normalised():
    assert parse_endpoint("127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert parse_endpoint("http://h:1/v1/") == "http://h:1"
    assert parse_endpoint("https://api.example.com/proxy/v1/chat/completions") == "https://api.example.com/proxy"
    for bad in ("ftp://h", "http://", "ht!tp:/x", "http://h:99999"):
        with pytest.raises(SpecplugError, match="not a usable URL"):
            parse_endpoint(bad)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_unreachable_endpoint(run_cli):
    r = run_cli("bench", "--endpoint", f"http://127.0.0.1:{_free_port()}", "--workload", "chat", "--concurrency", "1")
    assert r.exit_code == 1 and "Cannot reach --endpoint" in r.stderr and "Traceback" not in r.stderr


def test_cli_bad_inputs(run_cli, tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": \n')
    r = run_cli("bench", "--endpoint", "http://127.0.0.1:9", "--prompts", str(bad))
    assert r.exit_code == 1 and "line 2: not valid JSON" in r.stderr
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n")
    assert "holds no prompts" in run_cli("bench", "--endpoint", "http://127.0.0.1:9", "--prompts", str(empty)).stderr
    r = run_cli("bench", "--endpoint", "nope://x")
    assert r.exit_code == 1 and "not a usable URL" in r.stderr
    r = run_cli("bench", "--endpoint", "http://127.0.0.1:9", "--workload", "codeedit")
    assert r.exit_code == 1 and "Did you mean 'code-edit'" in r.stderr
    r = run_cli("bench", "--endpoint", "http://127.0.0.1:9", "--concurrency", "1,x")
    assert r.exit_code == 2 and "concurrency" in r.stderr
    r = run_cli("bench", "--endpoint", "http://127.0.0.1:9", "--api-key-env", "SPECPLUG_TEST_UNSET_VAR")
    assert r.exit_code == 1 and "SPECPLUG_TEST_UNSET_VAR" in r.stderr
    r = run_cli("bench", "--load", str(tmp_path / "missing.json"))
    assert r.exit_code == 1 and "does not exist" in r.stderr
    (tmp_path / "other.json").write_text(json.dumps({"kind": "something"}))
    r = run_cli("bench", "--load", str(tmp_path / "other.json"))
    assert r.exit_code == 1 and "not a specplug bench record" in r.stderr
    r = run_cli("calibrate", "--model", "smollm2-135m", "--method", "ngram")
    assert r.exit_code == 1 and "--from" in r.stderr


def test_cli_does_not_import_bench_code_at_start_up():
    import subprocess
    import sys

    code = (
        "import sys, specplug.cli as c; c.cli.main(['--help'], standalone_mode=False); "
        "bad = [m for m in ('httpx', 'matplotlib', 'numpy', 'specplug.bench') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")
