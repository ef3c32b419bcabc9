"""specplug verify: does the speculative endpoint return the baseline's greedy outputs?"""

from __future__ import annotations

import click

from specplug.commands.bench import common_options, with_options
from specplug.output import FORMATS


@click.command()
@click.option("--endpoint", required=True, help="Base URL of the server with speculation on.")
@click.option("--baseline", required=True, help="Base URL of the same model without speculation.")
@with_options(common_options)
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Prompts in flight at once (batching can add benign late divergences).")
@click.option("--late-after", type=click.IntRange(1), default=32, show_default=True,
              help="Tokens of identical prefix after which a divergence counts as late (numeric noise).")
@click.option("--tie-margin", type=click.FloatRange(0), default=0.5, show_default=True,
              help="Logprob gap under which two candidate tokens count as a near-tie.")
@click.option("--max-diff-share", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Above this share of differing outputs, every difference counts as systematic.")
@click.option("--json-schema", "json_schema", type=click.Path(dir_okay=False), default=None, metavar="SCHEMA.json",
              help="Ask both endpoints for structured output following this JSON schema (response_format json_schema) "
                   "and report how many outputs parse and validate.")
@click.option("--lora", default=None, metavar="NAME",
              help="Request the LoRA adapter NAME (sent as 'model', which vLLM and SGLang route by) on both endpoints.")
@click.option("--output", type=click.Choice(FORMATS), default="table", show_default=True)
def verify(endpoint, baseline, model, workload, prompts_file, num_prompts, max_tokens, api, api_key_env, timeout_s,
           concurrency, late_after, tie_margin, max_diff_share, json_schema, lora, output) -> None:
    """Send the same prompts at temperature 0 to ENDPOINT and BASELINE and compare them token by token.

    Prints the share of identical outputs and, for each difference, where it starts and how it reads.
    Late divergences after a long identical prefix, and near-ties, are numeric noise between batch
    shapes; early or frequent ones are systematic. Exits 1 when systematic differences (or failed
    requests) are found, and with --json-schema also when an output that ended by itself does not validate.
    """
    from specplug.bench.client import Endpoint, api_key_from_env, parse_endpoint
    from specplug.bench.prompts import load_prompt_set
    from specplug.bench.verify import load_schema
    from specplug.bench.verify import verify as run_verify
    from specplug.commands._bench_tables import verify_table
    from specplug.errors import SpecplugError
    from specplug.output import emit

    if lora and model and lora != model:
        raise SpecplugError("Give --lora or --model, not both: a LoRA adapter is requested by its name as the model.")
    model = lora or model
    schema = load_schema(json_schema) if json_schema else None
    prompts = load_prompt_set(workload, prompts_file)
    n = len(prompts) if num_prompts is None else min(num_prompts, len(prompts))
    key = api_key_from_env(api_key_env)
    spec_ep = Endpoint(parse_endpoint(endpoint, "--endpoint"), model=model, api_key=key)
    base_ep = Endpoint(parse_endpoint(baseline, "--baseline"), model=model, api_key=key)
    rep = run_verify(
        spec_ep, base_ep, prompts[:n], api=api, max_tokens=max_tokens, concurrency=concurrency, late_after=late_after,
        tie_margin=tie_margin, max_diff_share=max_diff_share, timeout_s=timeout_s, json_schema=schema,
        schema_name=json_schema,
    )
    emit(rep, output, verify_table)
    if rep.failed:
        raise click.exceptions.Exit(1)
