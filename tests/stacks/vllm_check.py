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

    offline = hub.HF_HUB_OFFLINE
    out = []
    for case in cases:
        # Offline mode makes EngineArgs resolve hub ids to local snapshots; parse-only cases (hub ids such as
        # meta-llama/Llama-3.1-70B-Instruct) must not need one. Case "build" uses local folders only.
        hub.HF_HUB_OFFLINE = offline if case.get("build") else False
        argv = case["argv"]
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
            )
            if case.get("build"):
                mc = ea.create_model_config()
                sc = ea.create_speculative_config(mc, ParallelConfig())
                res["built"] = {
                    "method": sc.method,
                    "num_speculative_tokens": sc.num_speculative_tokens,
                    "prompt_lookup_min": sc.prompt_lookup_min,
                    "prompt_lookup_max": sc.prompt_lookup_max,
                    "model": sc.model,
                    "draft_tensor_parallel_size": sc.draft_tensor_parallel_size,
                    "num_speculative_tokens_per_batch_size": [
                        list(e) for e in (sc.num_speculative_tokens_per_batch_size or [])
                    ] or None,
                }
        except BaseException as exc:  # noqa: BLE001 - report every parser/validator failure as data
            res.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
        out.append(res)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
