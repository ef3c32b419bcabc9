"""Adapts the embedded runtime's step-wise engine (:class:`specplug.runtime.engine.DecodeBatch`) to the
server's :class:`~specplug.runtime.serving.scheduler.Backend` protocol, and loads model + engine from the
server's command-line arguments.

The engine is built without a tokenizer: the scheduler turns tokens into text (stop strings, UTF-8 holdback)
so there is one text path for every backend. Speculation counters come from the engine's per-request
statistics, as the difference since the previous step (one target pass per row per step, so each difference
is exactly one draft).
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specplug.runtime.serving.scheduler import SamplingParams, StepOutput

log = logging.getLogger("specplug.server")


@dataclass
class _Seen:
    engine_rid: int
    drafted: int = 0
    accepted: int = 0


class EngineBackend:
    """One long-lived decode batch; requests join between steps and leave when done or cancelled."""

    def __init__(self, engine: Any, max_batch_size: int) -> None:
        self.engine = engine
        self.max_batch_size = max_batch_size
        self.batch = engine.start()
        # The ids that end a sequence: a structured-output grammar lets the model end exactly with these.
        self.eos_token_ids = sorted(engine.eos_token_ids)
        self._ids: dict[str, _Seen] = {}
        self._rev: dict[int, str] = {}

    def add(self, rid: str, prompt_ids: list[int], max_tokens: int, sampling: SamplingParams) -> None:
        from specplug.runtime.engine import GenerationParams
        from specplug.runtime.sampling import SamplingParams as RtSampling

        if not self._ids:
            # An idle server starts a fresh batch (a clean cache; a seeded request draws from its own generator
            # whether it runs alone or beside others).
            self.batch = self.engine.start()
        params = GenerationParams(
            max_new_tokens=max_tokens,
            sampling=RtSampling(temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p, seed=sampling.seed),
            ignore_eos=sampling.ignore_eos,
            min_tokens=sampling.min_tokens,
            stop_token_ids=tuple(sampling.stop_token_ids),
            grammar=sampling.grammar,
            logprobs=sampling.logprobs,
        )
        erid = self.batch.add(list(prompt_ids), params)
        self._ids[rid] = _Seen(erid)
        self._rev[erid] = rid

    def step(self) -> list[StepOutput]:
        outs: list[StepOutput] = []
        for o in self.batch.step():
            rid = self._rev.get(o.request_id)
            if rid is None or o.finish_reason == "cancelled":
                continue
            seen = self._ids[rid]
            drafts: list[tuple[int, int]] = []
            stats = self.batch.result(o.request_id).stats
            drafted, accepted = stats.drafted - seen.drafted, stats.accepted - seen.accepted
            if drafted > 0:
                drafts.append((drafted, accepted))
            seen.drafted, seen.accepted = stats.drafted, stats.accepted
            outs.append(StepOutput(rid, list(o.new_tokens), o.finished, o.finish_reason, drafts, o.stop_token_id, o.logprobs))
            if o.finished:
                self._forget(rid)
        return outs

    def speculation_steps(self) -> dict[str, int]:
        """Decode steps so far by what speculation did (see ``specplug.runtime.engine.SPEC_STEPS``)."""
        return dict(getattr(self.engine, "spec_steps", {}))

    def prefix_cache_tokens(self) -> tuple[int, int]:
        """Prompt tokens looked up in the prefix cache so far, and those found there (0, 0 without one)."""
        prefix = getattr(self.engine, "prefix", None)
        return (prefix.queried_tokens, prefix.hit_tokens) if prefix is not None else (0, 0)

    def remove(self, rid: str) -> None:
        seen = self._ids.get(rid)
        if seen is not None:
            self.batch.cancel(seen.engine_rid)
            self._forget(rid)

    def reset(self) -> None:
        self.batch = self.engine.start()
        self._ids.clear()
        self._rev.clear()

    def _forget(self, rid: str) -> None:
        seen = self._ids.pop(rid, None)
        if seen is None:
            return
        self._rev.pop(seen.engine_rid, None)
        # The batch keeps finished requests for result(); a server lives long, so drop ours once read.
        self.batch.release(seen.engine_rid)


# ------------------------------------------------------------------------------------------------ loading


def load_backend(args: argparse.Namespace) -> tuple[EngineBackend, Any, dict[str, Any]]:
    """Model, tokenizer and engine for the server's arguments: (backend, tokenizer, info for /v1/models).

    Loading goes through :func:`specplug.runtime.models.build_engine`, the same path as ``specplug
    generate``, so the server decodes with the same weights, dtype and proposer settings. It runs in a thread of
    its own that ends before the engine thread starts: see :func:`_off_the_calling_thread`.
    """
    return _off_the_calling_thread(_load, args)


def _off_the_calling_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a short-lived thread; its result, or its exception raised here.

    OpenMP keeps a pool of workers for every thread that ran a parallel region, until that thread ends. With the
    main thread's pool alive beside the engine thread's, libgomp counts more workers than cores and wakes them
    through the kernel instead of spinning: each step of a small model then takes about twice as long. Loading
    and calibrating (parallel regions) in a thread that ends leaves the engine thread the only pool.
    """
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 (re-raised in the caller's thread below)
            out["error"] = exc

    worker = threading.Thread(target=run, name="specplug-load", daemon=True)  # Ctrl-C while loading exits at once
    worker.start()
    worker.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


def _load(args: argparse.Namespace) -> tuple[EngineBackend, Any, dict[str, Any]]:
    from specplug.runtime.models import build_engine, ngram_match

    lo, hi = ngram_match(args.pace, args.prompt_lookup_min, args.prompt_lookup_max)
    engine = build_engine(
        args.model, method=args.method, drafter=args.drafter, k=args.num_speculative_tokens,
        device=args.device, dtype=args.dtype, ngram_min=lo, ngram_max=hi, paced=args.pace,
        prefix_cache_mb=args.prefix_cache_mb, prefill_chunk=args.prefill_chunk,
    )
    if engine.pacer is not None:
        # The pacer's cost model starts from this machine's measured pass costs, not another device's.
        t = time.perf_counter()
        costs = engine.calibrate(args.max_batch_size)
        plain = {m: c for m, c in costs.items() if m in (1, 4, 16)}
        log.info("calibrated target pass costs in %.1f s (tokens fed: ms) %s", time.perf_counter() - t,
                 ", ".join(f"{m}: {c * 1e3:.1f}" for m, c in plain.items()))
    tokenizer = engine.tokenizer
    engine.tokenizer = None  # the scheduler does detokenization and stop strings; don't decode twice
    config = engine.target.config
    pacing = ", paced" if engine.pacer is not None else ""
    max_len = int(getattr(config, "max_position_embeddings", 2048) or 2048)
    if args.method == "ngram":
        speculation = f"ngram (k={args.num_speculative_tokens}{pacing}, match {lo}-{hi})"
    elif args.method == "draft_model":
        speculation = f"draft_model (k={args.num_speculative_tokens}{pacing}, drafter {args.drafter or 'default'})"
    else:
        speculation = "none"
    info = {"max_model_len": max_len, "speculation": speculation, "device": str(engine.device)}
    return EngineBackend(engine, args.max_batch_size), tokenizer, info
