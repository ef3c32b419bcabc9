"""``specplug generate``: one-off generation with the embedded speculative runtime, text plus statistics."""

from __future__ import annotations

import sys
from typing import Any

import click

from specplug.commands._output import output_option
from specplug.errors import SpecplugError
from specplug.output import emit, table


@click.command("generate")
@click.option("--model", "-m", default="smollm2-135m", show_default=True,
              help="Packaged model name (smollm2-135m), local Hugging Face folder, or cached hub id.")
@click.option("--method", type=click.Choice(["none", "ngram", "draft_model"]), default="ngram", show_default=True,
              help="How to draft: none (plain decoding), ngram (prompt lookup) or draft_model.")
@click.option("--drafter", default=None, help="Draft model for --method draft_model (default: the model's own).")
@click.option("-k", "k", type=click.IntRange(1, 64), default=4, show_default=True, help="Most draft tokens per step.")
@click.option("--pace/--no-pace", default=True, show_default=True,
              help="Choose each step's draft length (up to k) from measured pass costs; --no-pace drafts k every step.")
@click.option("--adaptive/--no-adaptive", default=False, show_default=True,
              help="Grow a sequence's k on full acceptance, shrink it on early rejection.")
@click.option("--temperature", type=click.FloatRange(0), default=0.0, show_default=True, help="0 is greedy.")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True,
              help="Nucleus sampling mass in (0, 1]; 1.0 turns top-p off.")
@click.option("--top-k", type=click.IntRange(0), default=0, show_default=True, help="0 turns top-k off.")
@click.option("--seed", type=int, default=None, help="Seed for sampling: the same seed gives the same text (drafting k every step, as --no-pace).")
@click.option("--max-tokens", type=click.IntRange(1, 131072), default=128, show_default=True,
              help="Most new tokens to generate.")
@click.option("--stop", multiple=True, help="Stop string (repeatable): the text ends before it; the tokens counted include it, as in vLLM.")
@click.option("--prompt", "-p", default=None, help="Prompt text; else stdin.")
# An instruct model fed a bare prompt often ends its answer at once (0 new tokens), so the template is the default.
@click.option("--chat/--raw", " /--no-chat", "chat", default=None,
              help="Wrap the prompt in the model's chat template (default: when the model has one), or feed it raw.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto",
              show_default=True)
@output_option
def generate(
    model: str,
    method: str,
    drafter: str | None,
    k: int,
    pace: bool,
    adaptive: bool,
    temperature: float,
    top_p: float,
    top_k: int,
    seed: int | None,
    max_tokens: int,
    stop: tuple[str, ...],
    prompt: str | None,
    chat: bool | None,
    device: str,
    dtype: str,
    output: str,
) -> None:
    """Generate text with speculative decoding and print it with acceptance statistics."""
    # Out-of-range numbers are usage errors (exit 2), refused by the option types before any model loads.
    if prompt is None:
        if sys.stdin is None or sys.stdin.isatty():
            raise SpecplugError("No prompt given.", "Pass --prompt TEXT or pipe the prompt on stdin.")
        prompt = sys.stdin.read()
    if not prompt:
        raise SpecplugError("The prompt is empty.", "Pass --prompt TEXT or pipe the prompt on stdin.")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise SpecplugError(
            f"The embedded runtime needs torch and transformers ({exc.name} is missing).",
            "Install them with: pip install 'specplug[runtime]'",
        ) from exc
    from specplug.runtime.engine import GenerationParams
    from specplug.runtime.models import build_engine
    from specplug.runtime.sampling import SamplingParams

    sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    if seed is not None:
        torch.manual_seed(seed)
    engine = build_engine(
        model, method=method, drafter=drafter, k=k, device=device, dtype=dtype, adaptive=adaptive, paced=pace
    )
    ids, templated = _prompt_ids(engine.tokenizer, prompt, chat, model)
    params = GenerationParams(max_new_tokens=max_tokens, sampling=sampling, stop=tuple(stop))
    result = engine.generate([ids], params)[0]
    stats = {"model": model, "method": engine.method, "k": k, "device": str(engine.device),
             "prompt_format": "chat" if templated else "raw", "finish_reason": result.finish_reason,
             **result.stats.as_dict()}
    data = {"text": result.text, "stats": stats}
    if not result.stats.new_tokens:
        click.echo(_empty_hint(templated, result.finish_reason), err=True)

    def render(d: dict) -> list:
        rows = [(key, value) for key, value in d["stats"].items()]
        return [d["text"], table("statistics", ["stat", "value"], rows)]

    emit(data, output, render)


def _prompt_ids(tok: Any, prompt: str, chat: bool | None, model: str) -> tuple[list[int], bool]:
    """The prompt's token ids, and whether they went through the chat template (``chat`` None: if it has one)."""
    has_template = bool(getattr(tok, "chat_template", None))
    if chat and not has_template:
        raise SpecplugError(f"Model {model!r} has no chat template.", "Drop --chat, or pass --raw.")
    if chat is False or not has_template:
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
    else:
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
    if not ids:
        raise SpecplugError("The prompt encodes to no tokens.")
    return list(ids), chat is not False and has_template


def _empty_hint(templated: bool, finish_reason: str | None) -> str:
    """Why a run can print no text, said instead of leaving an empty line."""
    why = f"The model generated no tokens (finish reason: {finish_reason})."
    if templated:
        return f"warning: {why} Try another prompt, or --raw to continue the text as written."
    return f"warning: {why} The prompt went in raw; an instruct model usually needs its chat template: drop --raw."
