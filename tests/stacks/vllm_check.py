"""Runs INSIDE the pinned vLLM venv (never imported by pytest): parse rendered argv with vLLM's own serve
parser, build EngineArgs and, when asked, the SpeculativeConfig. Cases on stdin, results on stdout (JSON)."""

import json
import sys


def main() -> None:
    cases = json.load(sys.stdin)
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    except ImportError:  # before 0.32 the parser lived in the openai package
        from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
    import huggingface_hub.constants as hub
    from vllm.config import ParallelConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.transformers_utils.config import maybe_override_with_speculators

    offline = hub.HF_HUB_OFFLINE
    out = []
    for case in cases:
        # Offline mode makes EngineArgs resolve hub ids to local snapshots; parse-only cases (hub ids such as
        # meta-llama/Llama-3.1-70B-Instruct) must not need one. Case "build" uses local folders only.
        hub.HF_HUB_OFFLINE = offline if case.get("build") else False
        # "replace": swap hub ids for local folders (the check runs offline) after specplug has rendered them.
        argv = [_swap(a, case.get("replace", {})) for a in case["argv"]]
        res = {"name": case["name"]}
        try:
            assert argv[:2] == ["vllm", "serve"], argv[:2]
            top = FlexibleArgumentParser(exit_on_error=False)
            subs = top.add_subparsers(dest="subparser")
            ServeSubcommand().subparser_init(subs)
            args = top.parse_args(argv[1:])  # exactly what `vllm serve ...` parses
            p = make_arg_parser(FlexibleArgumentParser(exit_on_error=False))
            a2 = p.parse_args([*argv[3:], "--model", argv[2]])
            validate_parsed_serve_args(a2)
            ea = AsyncEngineArgs.from_cli_args(a2)
            res.update(
                ok=True,
                model_tag=args.model_tag,
                host=a2.host,
                port=a2.port,
                tensor_parallel_size=ea.tensor_parallel_size,
                speculative_config=ea.speculative_config,
                api_key=getattr(a2, "api_key", None),
                served_model_name=getattr(a2, "served_model_name", None),
                per_request_spec_decode_metrics=getattr(a2, "per_request_spec_decode_metrics", None),
                data_parallel_size=ea.data_parallel_size,
                revision=ea.revision,
            )
            if case.get("build"):
                # What create_engine_config does first: a speculators-format model names its verifier.
                ea.model, ea.tokenizer, ea.speculative_config = maybe_override_with_speculators(
                    model=ea.model, tokenizer=ea.tokenizer, revision=ea.revision,
                    trust_remote_code=ea.trust_remote_code, vllm_speculative_config=ea.speculative_config,
                )
                res["served_model"] = ea.model
                mc = ea.create_model_config()
                sc = ea.create_speculative_config(mc, ParallelConfig())
                res["built"] = {
                    "method": sc.method,
                    "num_speculative_tokens": sc.num_speculative_tokens,
                    "prompt_lookup_min": sc.prompt_lookup_min,
                    "prompt_lookup_max": sc.prompt_lookup_max,
                    "model": sc.model,
                    "draft_tensor_parallel_size": sc.draft_tensor_parallel_size,
                    "parallel_drafting": sc.parallel_drafting,
                    "rejection_sample_method": sc.rejection_sample_method,
                    "enable_adaptive_verification": sc.enable_adaptive_verification,
                    "draft_sample_method": sc.draft_sample_method,
                    "use_heterogeneous_vocab": getattr(sc, "use_heterogeneous_vocab", None),
                    "num_speculative_tokens_per_batch_size": [
                        list(e) for e in (sc.num_speculative_tokens_per_batch_size or [])
                    ] or None,
                }
                if sc.num_speculative_tokens_per_batch_size:
                    # The scheduler's own dense batch-size -> k table (what it looks up every step).
                    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

                    dense = build_dynamic_sd_schedule_lookup(
                        sc.num_speculative_tokens_per_batch_size, vllm_max_batch_size=256,
                        vllm_num_speculative_tokens=sc.num_speculative_tokens)
                    res["built"]["k_at_batch"] = {b: dense[b] for b in (1, 8, 9, 64, 65, 256)}
        except BaseException as exc:  # noqa: BLE001 - report every parser/validator failure as data
            res.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
        out.append(res)
    json.dump(out, sys.stdout)


def _swap(arg: str, replace: dict) -> str:
    for old, new in replace.items():
        arg = arg.replace(old, new)
    return arg


if __name__ == "__main__":
    main()
