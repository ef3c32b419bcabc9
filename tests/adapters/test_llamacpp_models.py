"""llama.cpp loads GGUF: Hugging Face ids become GGUF repositories (with a note), .gguf paths stay -m."""

from specplug.rendering import render_plan
from tests.adapters.conftest import make_plan


def test_hf_ids_point_at_gguf_repositories_with_the_quant_and_say_so():
    plan = make_plan("llamacpp", "b10576", model="Qwen/Qwen2.5-32B-Instruct", method="draft_model",
                     drafter="Qwen/Qwen2.5-0.5B-Instruct", serve={"dtype": "q4"})
    spec = render_plan(plan).spec
    argv = spec.argv
    assert argv[argv.index("-hf") + 1] == "Qwen/Qwen2.5-32B-Instruct-GGUF:Q4_K_M"
    assert "Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M" in argv
    assert any("GGUF" in n for n in spec.notes)


def test_local_gguf_files_are_loaded_with_m():
    plan = make_plan("llamacpp", "b10576", model="/models/qwen-32b-q4.gguf", method="draft_model",
                     drafter="/models/qwen-0.5b-q8.gguf")
    argv = render_plan(plan).spec.argv
    assert argv[argv.index("-m") + 1] == "/models/qwen-32b-q4.gguf"
    assert "/models/qwen-0.5b-q8.gguf" in argv and "-hf" not in argv


def test_gguf_repository_ids_are_kept():
    plan = make_plan("llamacpp", "b10576", model="bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q5_K_M", method="ngram")
    argv = render_plan(plan).spec.argv
    assert argv[argv.index("-hf") + 1] == "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF:Q5_K_M"
