"""Hostile text never runs: every string that can reach a rendered file is refused at the boundary or written so
that the launch script runs exactly the intended argv and environment (checked by running it with stub binaries),
and deploy manifests parse back to the same values.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specplug.errors import SpecplugError
from tests.adapters.conftest import make_plan

# Where an injected command would leave its mark.
CANARY_DIR = Path(tempfile.mkdtemp(prefix="specplug-canary-"))
CANARY = CANARY_DIR / "PWNED"

SHELL = ["'", '"', "$(touch {c})", "`touch {c}`", ";touch {c};", "&& touch {c}", "| tee {c}", "> {c}", "\\", " ", "#",
         "$HOME", "${{PATH}}", "$$", "{{{{ x }}}}", "{{% raw %}}", "%s", "*", "~", "!", "é", "a", "b", "-x", ":", "/"]
BREAKS = ["\n", "\r", "\n#", "\u2028", "\x85", "\x1b[2J", "\t"]
NUL = "\x00"


def _text(pieces: list[str]) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from([p.format(c=CANARY) for p in pieces]), min_size=1, max_size=8).map("".join)


one_line = _text(SHELL)
free_form = _text(SHELL + BREAKS)  # extra args and env values: any text but NUL, escaped where written
breaking = st.tuples(one_line, st.sampled_from([*BREAKS, NUL]), one_line).map("".join)

# Stacks that take the API key from the environment (SGLang would need it on the command line, trtllm-serve has none).
KEY_FROM_ENV = ("vllm", "llamacpp", "tgi", "embedded")
# The stacks and the technique each renders with a drafter (or a copy method where none takes one).
STACKS = [
    ("vllm", "0.8.5", "draft_model"),
    ("vllm", "0.6.0", "draft_model"),
    ("sglang", "0.5.23", "eagle3"),
    ("trtllm", "1.2.0", "draft_model"),
    ("llamacpp", "b10576", "draft_model"),
    ("llamacpp", "b4000", "draft_model"),
    ("tgi", "2.4.0", "ngram"),
    ("embedded", None, "ngram"),
]

STUB = """#!/bin/sh
printf '%s\\0' "$(basename "$0")" "$@" > "$STUB_OUT"
env -0 > "$STUB_OUT.env"
"""


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    """A PATH folder whose every stack executable records its argv and environment instead of serving."""
    folder = tmp_path_factory.mktemp("stubs")
    for name in ("vllm", "python3", "trtllm-serve", "llama-server", "text-generation-launcher", "sglang"):
        p = folder / name
        p.write_text(STUB)
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return folder


def _plan(stack: str, version: str | None, method: str, *, model: str, drafter: str, value: str, arg: str):
    return make_plan(
        stack, version, model=model, method=method, drafter=drafter if method != "ngram" else None, k=3,
        serve={"env": {"SPECPLUG_T": value}, "extra_args": ["--x-probe", arg],
               "api_key_env": "MY_KEY" if stack in KEY_FROM_ENV else None},
    )


def _run_script(r, out: Path, stubs: Path, key: str) -> tuple[list[str], dict[str, str]]:
    from specplug.rendering import write_rendered

    if out.exists():
        shutil.rmtree(out)
    write_rendered(r, out)
    record = out / "argv.bin"
    env = {"PATH": f"{stubs}:{os.environ['PATH']}", "STUB_OUT": str(record), "MY_KEY": key, "HOME": str(out)}
    done = subprocess.run(["bash", str(out / r.script_name)], env=env, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    argv = record.read_bytes().decode().split("\0")[:-1]
    seen = dict(e.split("=", 1) for e in (out / "argv.bin.env").read_bytes().decode().split("\0") if "=" in e)
    return argv, seen


def _expected_argv(r, out: Path) -> list[str]:
    return [str(out / a) if a in r.spec.files else a for a in r.spec.argv]


def _render_and_run(stack, version, method, stubs, *, model, drafter, value, arg, key):
    from specplug.rendering import render_plan

    plan = _plan(stack, version, method, model=model, drafter=drafter, value=value, arg=arg)
    try:
        r = render_plan(plan)
    except SpecplugError as exc:
        return exc  # refused: a clear message, nothing written
    out = Path(tempfile.mkdtemp(prefix="render-", dir=CANARY_DIR)) / "o"
    argv, env = _run_script(r, out, stubs, key)
    assert not CANARY.exists(), f"{stack}: an injected command ran"
    expected = _expected_argv(r, out)
    expected[0] = os.path.basename(expected[0])
    assert argv == expected
    assert env["SPECPLUG_T"] == value
    for target, source in r.spec.env_from.items():
        assert env[target] == key, (target, source)
    for name, content in r.files.items():
        if name.endswith((".yaml", ".yml")):
            doc = yaml.safe_load(content)  # the adapter's file parses back; the header stays a comment
            assert isinstance(doc, dict)
    shutil.rmtree(out.parent)
    return r


@pytest.mark.parametrize("stack,version,method", STACKS, ids=[f"{s}-{v}" for s, v, _ in STACKS])
def test_nasty_but_valid_values_run_exactly_the_intended_argv(stack, version, method, stubs):
    nasty = f"org/m'\"$(touch {CANARY})`touch {CANARY}`;touch {CANARY} #x"
    value = f"line1\nline2 $(touch {CANARY}) '\"\\ #\r\n"
    r = _render_and_run(stack, version, method, stubs, model=nasty, drafter=nasty + "-d", value=value,
                        arg=f"a\nb;touch {CANARY}", key=f"k'ey\n$(touch {CANARY})")
    # Not a refusal: these values are legal and must render on every stack.
    assert not isinstance(r, SpecplugError), r
    assert nasty in r.script or stack in ("llamacpp",)  # llama.cpp names a GGUF repo derived from the id


@pytest.mark.parametrize("stack,version,method", STACKS, ids=[f"{s}-{v}" for s, v, _ in STACKS])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=one_line, drafter=one_line, value=free_form, arg=free_form, key=free_form)
def test_any_value_runs_only_the_intended_argv(stack, version, method, stubs, model, drafter, value, arg, key):
    r = _render_and_run(stack, version, method, stubs, model=model, drafter=drafter, value=value, arg=arg, key=key)
    if isinstance(r, SpecplugError):
        assert r.message and "Traceback" not in str(r)


@pytest.mark.parametrize("stack,version,method", [s for s in STACKS if s[0] != "embedded"], ids=lambda v: str(v))
@settings(max_examples=15, deadline=None)
@given(model=one_line, drafter=one_line, value=free_form, arg=free_form)
def test_deploy_manifests_hold_the_values_as_data(stack, version, method, model, drafter, value, arg):
    from specplug import deploy as d

    plan = _plan(stack, version, method, model=model, drafter=drafter, value=value, arg=arg)
    try:
        p = d.pieces(plan)
        files = d.render_targets(plan, ["compose", "k8s"], d.context_for(
            plan, name="svc", image="registry.example/img:1", lock_file="specplug.lock.yaml", inputs_hash="0" * 16))
    except SpecplugError:
        return
    unescape = lambda s: s.replace("$$", "$")  # noqa: E731  compose and Kubernetes both write '$' as '$$'
    compose = yaml.safe_load(files["docker-compose.yaml"])
    assert set(compose) == {"name", "services", "volumes"}
    service = compose["services"]["svc"]
    assert [unescape(a) for a in service["entrypoint"]] == p.argv
    assert unescape(service["environment"]["SPECPLUG_T"]) == value
    deployment = yaml.safe_load(files["k8s/deployment.yaml"])
    assert set(deployment) == {"apiVersion", "kind", "metadata", "spec"}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert [unescape(a) for a in container["command"]] == p.argv
    assert {e["name"]: unescape(e["value"]) for e in container["env"] if "value" in e}["SPECPLUG_T"] == value


# --------------------------------------------------------------------------------------- the boundary

FLAGS = {"--model": "model", "--drafter": "speculation.drafter", "--host": "serve.host",
         "--stack-version": "stack.version", "--gpu": "hardware.gpu"}


@pytest.mark.parametrize("flag", list(FLAGS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bad=breaking)
def test_flags_with_a_line_break_are_refused_by_name(run_cli, flag, bad):
    args = {"--model": "llama-3.1-8b", "--gpu": "h100", "--method": "draft_model", "--drafter": "meta-llama/Llama-3.2-1B-Instruct"}
    args[flag] = bad
    res = run_cli("render", "vllm", *[x for kv in args.items() for x in kv], "-o", "out")
    assert res.exit_code == 1, res.stdout + res.stderr
    assert FLAGS[flag] in res.stderr and "Traceback" not in res.stderr and "Internal error" not in res.stderr
    assert not Path("out").exists() and not CANARY.exists()


CONFIG_FIELDS = {
    "model": lambda v: {"model": v},
    "speculation.drafter": lambda v: {"speculation": {"method": "draft_model", "drafter": v, "num_speculative_tokens": 3}},
    "stack.version": lambda v: {"stack": {"name": "vllm", "version": v}},
    "hardware.gpu": lambda v: {"hardware": {"gpu": v, "num_gpus": 1}},
    "serve.host": lambda v: {"serve": {"host": v}},
    "serve.api_key_env": lambda v: {"serve": {"api_key_env": v}},
    "serve.env": lambda v: {"serve": {"env": {v: "x"}}},
    "serve.dtype": lambda v: {"serve": {"dtype": v}},
    "workload.traffic": lambda v: {"workload": {"traffic": v}},
    "calibration": lambda v: {"calibration": v},
}


@pytest.mark.parametrize("key", list(CONFIG_FIELDS))
def test_config_values_with_a_line_break_are_refused_with_their_line(run_cli, key):
    doc = {"version": 1, "model": "llama-3.1-8b", "stack": "vllm", "hardware": {"gpu": "h100", "num_gpus": 1}}
    doc.update(CONFIG_FIELDS[key](f"x\ntouch {CANARY}\n#"))
    Path("specplug.yaml").write_text(yaml.safe_dump(doc))
    for cmd in (["plan"], ["render", "vllm", "-o", "out"], ["check"]):
        res = run_cli(*cmd)
        said = res.stdout + res.stderr  # check reports findings on stdout, the others errors on stderr
        assert res.exit_code == 1, (cmd, said)
        assert "specplug.yaml:" in said and key in said, (cmd, said)
        assert "Traceback" not in said and "Internal error" not in said
    assert not Path("out").exists() and not Path("specplug.lock.yaml").exists()


@pytest.mark.parametrize("field", ["extra_args", "env"])
def test_nul_in_free_form_values_is_refused(field):
    from pydantic import ValidationError

    from specplug.config import ServeSpec

    value = ["--a\x00b"] if field == "extra_args" else {"A": "x\x00y"}
    with pytest.raises(ValidationError, match="NUL"):
        ServeSpec.model_validate({field: value})


@pytest.mark.parametrize("name", ["API_KEY\n", "1KEY", "KEY;id", "K EY", ""])
def test_env_names_are_whole_variable_names(name):
    from pydantic import ValidationError

    from specplug.config import ServeSpec

    with pytest.raises(ValidationError, match="environment variable name"):
        ServeSpec.model_validate({"api_key_env": name})


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1", "::", "::1", "localhost", "my-host.example.com"])
def test_hosts_a_server_binds_to_are_accepted(host):
    from specplug.config import ServeSpec

    assert ServeSpec(host=host).host == host


def test_init_names_the_bad_option_not_a_file(run_cli):
    res = run_cli("init", "--model", "llama-3.1-8b\ntouch x", "-f", "specplug.yaml")
    assert res.exit_code == 1 and "model:" in res.stderr and "control character" in res.stderr
    assert "invalid YAML" not in res.stderr and not Path("specplug.yaml").exists()


def test_a_template_cannot_write_a_bare_line_break():
    from specplug.templating import environment

    tmpl = environment().from_string("# {{ value }}\n")
    with pytest.raises(SpecplugError, match="break out of its line"):
        tmpl.render(value="x\ntouch /tmp/p")
    assert environment().from_string("# {{ value | comment }}\n").render(value="x\ntouch y") == "# x touch y\n"
