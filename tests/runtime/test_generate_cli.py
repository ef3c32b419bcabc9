"""``specplug generate``: bad input is a one-paragraph error (exit 1), and a real run on the packaged SmolLM2
prints the text and statistics (greedy output identical to transformers ``generate``). Out-of-range numbers are
usage errors (exit 2), tested in tests/commands/test_usage_ranges.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specplug.cli import main


def _run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["generate", *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--model", "/nonexistent/model/folder", "--prompt", "x", "--device", "cpu"], "nonexistent"),
        (["--prompt", "x", "--device", "tpu"], "Use auto, cpu, cuda or cuda:N"),
        (["--prompt", "x", "--device", "cuda:x"], "Unknown device 'cuda:x'"),
        (["--prompt", "x", "--device", "cuda:64"], "cuda:64 was asked for"),
    ],
)
def test_bad_input_is_a_user_error(args, needle, capsys):
    pytest.importorskip("torch")
    code, _, err = _run(args, capsys)
    assert code == 1
    assert needle in err
    assert "Traceback" not in err


def test_cli_import_stays_free_of_torch():
    code = "import sys, specplug.cli, specplug.commands.generate, specplug.runtime.models; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.slow
def test_generate_smollm2_ngram_json(smollm2_folder, capsys):
    prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n   "
    code, out, err = _run(
        ["--model", "smollm2-135m", "--method", "ngram", "--prompt", prompt, "--raw", "--max-tokens", "12",
         "--device", "cpu", "--output", "json"],
        capsys,
    )
    assert code == 0, err
    assert "Loading weights" not in err  # transformers' loading bar is not specplug's output
    data = json.loads(out)
    st = data["stats"]
    assert st["new_tokens"] == 12 and st["method"] == "ngram" and st["prompt_format"] == "raw"
    assert st["accepted"] > 0 and st["mean_acceptance_length"] > 1.0

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_folder))
    model = AutoModelForCausalLM.from_pretrained(str(smollm2_folder), dtype="float32")
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    ref = model.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1] :]
    assert data["text"] == tok.decode(ref, skip_special_tokens=True)


@pytest.mark.slow
def test_readme_prompt_gets_the_chat_template_and_prints_text(smollm2_folder, capsys):
    """The README's prompt, typed as a user would: SmolLM2-Instruct given it raw ends at once (0 new tokens), so
    the chat template is the default; --raw still feeds it as written, and says why nothing came out."""
    args = ["--model", "smollm2-135m", "--prompt", "Write a haiku about GPUs.", "--max-tokens", "24", "--device", "cpu"]
    code, out, err = _run([*args, "--output", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["stats"]["prompt_format"] == "chat" and data["stats"]["new_tokens"] > 0
    assert data["text"].strip()
    code, out, err = _run(args, capsys)  # the table form a person reads: the text comes first
    assert code == 0 and out.startswith(data["text"].strip()[:20])
    code, out, err = _run([*args, "--raw", "--output", "json"], capsys)
    assert code == 0 and json.loads(out)["stats"]["prompt_format"] == "raw"
    if json.loads(out)["stats"]["new_tokens"] == 0:
        assert "drop --raw" in err


def test_chat_needs_a_template():
    from specplug.commands.generate import _prompt_ids
    from specplug.errors import SpecplugError

    class Plain:  # a base model's tokenizer: no chat template
        chat_template = None

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    assert _prompt_ids(Plain(), "hi", None, "m") == ([104, 105], False)  # default: raw when there is no template
    with pytest.raises(SpecplugError, match="no chat template"):
        _prompt_ids(Plain(), "hi", True, "m")
