"""The embedded OpenAI-compatible server: ``python -m specplug.runtime.server --model smollm2-135m``.

``specplug launch embedded`` (and the ``--fallback embedded`` path of any stack) starts this module through
the shared launcher. It binds 127.0.0.1 unless ``--host`` says otherwise; ``--api-key`` (better: the
``SPECPLUG_API_KEY`` environment variable, which stays out of ``ps``) protects every route but ``/health``.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both stream with ``"stream": true``),
``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text, vLLM's metric names).

SIGTERM drains: no new work (503s), in-flight requests get ``--shutdown-grace`` seconds to finish, then end
with an OpenAI-shaped error (see :mod:`specplug.runtime.serving.lifecycle`).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys

API_KEY_ENV = "SPECPLUG_API_KEY"
METHODS = ("none", "ngram", "draft_model")
# Well inside the launcher's 20 s between SIGTERM and SIGKILL (specplug.launcher.STOP_GRACE).
DEFAULT_SHUTDOWN_GRACE_S = 10.0
# Longer than clients keep idle connections (httpx and the OpenAI SDK: 5 s; load balancers: 60 s), so a client
# never sends a request down a connection the server is closing at that moment (it would get a read error).
DEFAULT_KEEP_ALIVE_S = 75
# Prefix caching is on by default, as in vLLM: 256 MiB holds about 5,700 prompt tokens of SmolLM2-135M in float32.
DEFAULT_PREFIX_CACHE_MB = 256.0


def _whole(text: str, least: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {v}")
    return v


def _positive(text: str) -> int:
    return _whole(text, 1)


def _non_negative_int(text: str) -> int:
    return _whole(text, 0)


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0 <= v <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds, got {text}")
    return v


def _non_negative(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= v <= 1 << 20:
        raise argparse.ArgumentTypeError(f"must be between 0 and {1 << 20}, got {text}")
    return v


def _port(text: str) -> int:
    v = _positive(text)
    if v > 65535:
        raise argparse.ArgumentTypeError(f"ports go up to 65535, got {v}")
    return v


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m specplug.runtime.server",
        description="OpenAI-compatible server over specplug's embedded speculative-decoding runtime.",
    )
    m = p.add_argument_group("model and speculation")
    m.add_argument("--model", required=True, help="Packaged model name (smollm2-135m), or a local model folder.")
    m.add_argument("--served-model-name", default=None, help="Name clients send as 'model' (default: --model).")
    m.add_argument("--method", choices=METHODS, default="ngram", help="Speculation technique (default ngram).")
    m.add_argument("--drafter", default=None, help="Draft model for --method draft_model (default: the model's own).")
    m.add_argument("-k", "--num-speculative-tokens", type=_positive, default=4, help="Longest draft k (default 4).")
    m.add_argument("--no-pace", dest="pace", action="store_false",
                   help="Draft k tokens every step instead of the length measured pass costs say pays best.")
    m.add_argument("--prompt-lookup-min", type=_positive, default=None,
                   help="Shortest n-gram to match (default 1 when paced, 2 with --no-pace).")
    m.add_argument("--prompt-lookup-max", type=_positive, default=None, help="Longest n-gram to match (default 4).")
    m.add_argument("--device", default="auto", help="auto, cpu or cuda[:N].")
    m.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16.")
    m.add_argument("--threads", type=_positive, default=None, help="CPU threads for PyTorch (default: its own).")
    s = p.add_argument_group("serving")
    s.add_argument("--host", default="127.0.0.1", help="Bind address (default 127.0.0.1: this machine only).")
    s.add_argument("--port", type=_port, default=8000)
    s.add_argument("--api-key", default=None, help=f"Require this bearer key (prefer the {API_KEY_ENV} variable).")
    s.add_argument("--max-batch-size", type=_positive, default=16, help="Requests decoded together (default 16).")
    s.add_argument("--prefix-cache-mb", type=_non_negative, default=DEFAULT_PREFIX_CACHE_MB, metavar="MIB",
                   help="Target KV of prompt prefixes kept for later prompts that start the same way, as vLLM's "
                        f"prefix caching does (default {DEFAULT_PREFIX_CACHE_MB:g} MiB; 0 turns it off).")
    s.add_argument("--prefill-chunk", type=_non_negative_int, default=None, metavar="TOKENS",
                   help="Prompt tokens a decode step feeds beside the running requests (chunked prefill), so that a "
                        "joining prompt holds them up by at most that much per step (default: the runtime's chunk); "
                        "0 runs each prompt as a pass of its own that the running requests wait for.")
    s.add_argument("--max-queue", type=_positive, default=256, help="Waiting requests before 503 (default 256).")
    s.add_argument("--max-model-len", type=_positive, default=None, help="Prompt + output tokens (default: model's).")
    s.add_argument("--max-prompt-tokens", type=_positive, default=None, help="Longest prompt accepted.")
    s.add_argument("--max-tokens-limit", type=_positive, default=2048, help="Largest max_tokens accepted.")
    s.add_argument("--default-max-tokens", type=_positive, default=256, help="max_tokens when a chat omits it.")
    s.add_argument("--max-body-bytes", type=_positive, default=1 << 20, help="Largest request body (default 1 MiB).")
    s.add_argument("--per-request-spec-decode-metrics", choices=("none", "summary", "detailed"), default="none",
                   help="Add vLLM's metrics.speculative_decoding to each response (default none, as vLLM).")
    s.add_argument("--shutdown-grace", type=_seconds, default=DEFAULT_SHUTDOWN_GRACE_S, metavar="SECONDS",
                   help="On SIGTERM, how long in-flight requests may take to finish before they are ended with a "
                        f"503 or a stream error event (default {DEFAULT_SHUTDOWN_GRACE_S:.0f}).")
    s.add_argument("--keep-alive-timeout", type=_positive, default=DEFAULT_KEEP_ALIVE_S, metavar="SECONDS",
                   help=f"Close a kept-alive connection idle this long (default {DEFAULT_KEEP_ALIVE_S}).")
    s.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("specplug.server")
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if args.prompt_lookup_min and args.prompt_lookup_max and args.prompt_lookup_min > args.prompt_lookup_max:
        print("error: --prompt-lookup-min must not exceed --prompt-lookup-max", file=sys.stderr)
        return 2

    try:
        import uvicorn

        from specplug.errors import SpecplugError
        from specplug.runtime.serving.app import ServerSettings, build_app
        from specplug.runtime.serving.backend import load_backend
        from specplug.runtime.serving.lifecycle import Drain, DrainingServer
        from specplug.runtime.serving.metrics import ServerMetrics
        from specplug.runtime.serving.scheduler import Scheduler
    except ImportError as exc:
        print(f"error: the embedded server needs specplug[runtime] ({exc}); pip install 'specplug[runtime]'", file=sys.stderr)
        return 1

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    log.info("loading %s (method %s, k=%d)", args.model, args.method, args.num_speculative_tokens)
    try:
        backend, tokenizer, model_info = load_backend(args)
    except SpecplugError as exc:
        print(f"error: {exc.message}" + (f"\n{exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1

    # Everything loaded so far lives as long as the server: keep it out of the collector's full passes, which
    # otherwise stop every thread (the event loop too) for up to half a second under load. vLLM does the same.
    gc.collect()
    gc.freeze()
    name = args.served_model_name or args.model
    max_model_len = min(args.max_model_len or model_info["max_model_len"], model_info["max_model_len"])
    settings = ServerSettings(
        model_name=name,
        aliases=[a for a in (args.model,) if a != name],
        max_model_len=max_model_len,
        api_key=api_key,
        max_prompt_tokens=min(args.max_prompt_tokens or max_model_len - 1, max_model_len - 1),
        max_tokens_limit=args.max_tokens_limit,
        default_max_tokens=args.default_max_tokens,
        max_body_bytes=args.max_body_bytes,
        info=model_info,
        per_request_spec_metrics=args.per_request_spec_decode_metrics,
        num_spec_tokens=args.num_speculative_tokens if args.method != "none" else 0,
    )
    metrics = ServerMetrics(name, max_positions=max(args.num_speculative_tokens, 1))
    scheduler = Scheduler(backend, tokenizer, metrics, max_waiting=args.max_queue)
    drain = Drain()
    app = build_app(scheduler, tokenizer, settings, metrics, drain)
    log.info(
        "serving %s on http://%s:%d/v1 (speculation: %s; batch %d, queue %d%s)",
        name, args.host, args.port, model_info.get("speculation", args.method), args.max_batch_size, args.max_queue,
        ", API key required" if api_key else "",
    )
    if args.host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        log.warning("listening on %s without an API key: anyone who can reach this port can use the model", args.host)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                            timeout_keep_alive=args.keep_alive_timeout)
    DrainingServer(config, drain, scheduler.abort_all, args.shutdown_grace).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
