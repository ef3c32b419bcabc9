"""init pins the stack version when the user names none, and says in the file that it did: unpinned, plans
follow whatever is installed where they run and 'deploy' cannot choose an image tag."""

from __future__ import annotations

import pytest

from specplug.commands.init import default_stack_version
from specplug.config import parse_config
from specplug.stacks.registry import get_adapter
from specplug.versions import version_key


def _newest(stack: str) -> str:
    return max(get_adapter(stack).versions(), key=version_key)


def _not_installed(monkeypatch, stack: str) -> None:
    monkeypatch.setattr(type(get_adapter(stack)), "installed_version", lambda self: None)


@pytest.mark.parametrize("stack", ["vllm", "sglang", "trtllm", "llamacpp", "tgi"])
def test_the_newest_known_release_when_the_stack_is_not_installed(monkeypatch, stack):
    _not_installed(monkeypatch, stack)
    version, why = default_stack_version(stack)
    known = get_adapter(stack).versions()
    assert version == max(known, key=version_key) and "newest" in why


def test_the_installed_release_when_specplug_can_render_for_it(monkeypatch):
    monkeypatch.setattr(type(get_adapter("vllm")), "installed_version", lambda self: "0.10.2+cpu")
    assert default_stack_version("vllm") == ("0.10.2", "the release installed here when init ran")
    monkeypatch.setattr(type(get_adapter("vllm")), "installed_version", lambda self: "0.1.0")  # older than any known
    assert default_stack_version("vllm")[0] == _newest("vllm")


def test_a_plugin_that_lists_no_versions_stays_unpinned(monkeypatch):
    class Bare:
        def installed_version(self):
            raise RuntimeError("probe broke")  # a plugin's probe must not break init

    monkeypatch.setattr("specplug.stacks.registry.get_adapter", lambda name: Bare())
    assert default_stack_version("bare") == (None, None)


def test_init_writes_the_pin_and_why_and_a_given_version_as_given(run_cli, tmp_path, monkeypatch):
    _not_installed(monkeypatch, "vllm")
    r = run_cli("init", "--model", "llama-3.1-70b", "--stack", "vllm")
    assert r.exit_code == 0, r.stderr
    assert f"Pinned vllm {_newest('vllm')}" in r.stdout
    text = (tmp_path / "specplug.yaml").read_text()
    assert "Pinned by 'specplug init' (the newest vLLM release this specplug knows)" in text
    assert parse_config(text).stack.version == _newest("vllm")
    r = run_cli("init", "--model", "llama-3.1-70b", "--stack", "vllm", "--stack-version", "0.10.2", "--force")
    text = (tmp_path / "specplug.yaml").read_text()
    assert r.exit_code == 0 and "Pinned" not in r.stdout and "Pinned by" not in text
    assert parse_config(text).stack.version == "0.10.2"
