"""Runs INSIDE the pinned SGLang venv: parse rendered args into ServerArgs and, when asked, validate them
with resolve_once() (``--device cpu`` is added for the check only: resolution needs an accelerator or CPU).

``sglang serve`` argv goes through serve's own --model-type and positional-model handling first, as the
console script does."""

import json
import sys

DECIDED = ("quantization", "speculative_draft_model_quantization")


def main() -> None:
    cases = json.load(sys.stdin)
    from sglang.srt.server_args import prepare_server_args

    fields = ("model_path", "host", "port", "tp_size", "max_running_requests", "speculative_algorithm",
              "speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
              "speculative_num_draft_tokens", "attention_backend", "context_length", "speculative_adaptive",
              "speculative_adaptive_config", "speculative_ngram_max_bfs_breadth", "enable_dp_attention",
              "speculative_dspark_block_size", "speculative_ngram_max_trie_depth",
              "speculative_use_block_verification", "speculative_use_rejection_sampling",
              "speculative_dflash_block_size", "quantization", "speculative_draft_model_quantization", "revision",
              "speculative_draft_model_revision")
    out = []
    for case in cases:
        argv = case["argv"]
        res = {"name": case["name"]}
        try:
            if argv[:2] == ["sglang", "serve"]:
                from sglang.cli.serve import _extract_model_type_override, _normalize_positional_model_path

                backend, rest = _extract_model_type_override(argv[2:])
                rest, _ = _normalize_positional_model_path(rest)
                res["entry"] = {"command": "sglang serve", "model_type": backend}
            else:
                assert argv[:3] == ["python3", "-m", "sglang.launch_server"], argv[:3]
                rest = argv[3:]
                res["entry"] = {"command": "python3 -m sglang.launch_server", "model_type": None}
            sa = prepare_server_args([*rest, "--device", "cpu"])
            res["parsed"] = {f: getattr(sa, f, None) for f in fields}
            if case.get("resolve"):
                sa.resolve_once()
                res["resolved"] = {f: getattr(sa, f, None) for f in fields}
                # What resolution decided (0.5.23 declares its decisions over the raw fields instead of writing them).
                try:
                    from sglang.srt.arg_groups.model_override_base import resolving_view

                    view = resolving_view(sa)
                    res["decided"] = {f: getattr(view, f, None) for f in DECIDED}
                except ImportError:
                    pass
            res["ok"] = True
        except BaseException as exc:  # noqa: BLE001 - report every parser/validator failure as data
            res.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:2000])
        out.append(res)
    json.dump(out, sys.stdout, default=str)


if __name__ == "__main__":
    main()
