"""The speculative decode loop: draft, verify in one target pass, accept, repeat — for a batch of requests.

API (what a server drives)
--------------------------
``SpeculativeEngine(target, tokenizer=None, proposer_factory=None, k=4, adaptive=False, k_max=None,
device=None, eos_token_ids=None, lean=True, paced=False, prefix_cache_bytes=0, prefill_chunk=PREFILL_CHUNK)``
    ``proposer_factory()`` returns a fresh :class:`~specplug.runtime.proposers.Proposer` per batch (None:
    plain decoding). Build one from names with :func:`specplug.runtime.models.build_engine`. ``lean`` runs
    Llama-family targets through :mod:`specplug.runtime.decoder` (same logits, less overhead). ``paced``
    chooses each step's draft length (at most each row's k) against measured pass costs and acceptance
    (:mod:`specplug.runtime.pacing`); ``adaptive`` grows a row's k on full acceptance and shrinks it on
    early rejection.

``engine.generate(prompts: list[list[int]], params: GenerationParams | list[GenerationParams]) -> list[Result]``
    Decode a batch to the end; one :class:`Result` (tokens, text, finish_reason, stats) per prompt, in order.

``engine.calibrate(max_batch) -> dict[int, float]``
    Time target passes by batch size and draft width on this device, so that a paced engine starts from its
    own costs. ``engine.spec_steps`` counts decode steps by what speculation did (:data:`SPEC_STEPS`).

``batch = engine.start()`` -> :class:`DecodeBatch`, the step-wise interface:
    ``rid = batch.add(prompt_ids, params)``  queue a request; it joins at the next ``step()`` (continuous
                                              batching: add any time, also while others are decoding).
    ``outs = batch.step()``                   one draft+verify round for every active request; returns a
                                              :class:`StepOutput` per request that advanced or finished:
                                              ``request_id, new_tokens, text_delta, finished, finish_reason``.
    ``batch.cancel(rid)``                     the request leaves the batch at the next step (finish_reason
                                              "cancelled"); safe to call from the thread that calls ``step``.
    ``batch.result(rid) -> Result``           tokens, text and statistics so far (final once finished).
    ``batch.release(rid)``                    forget the request's result once finished (long-lived batches).
    ``batch.active`` / ``batch.pending``       request ids decoding / waiting to join; ``for outs in batch:``
                                              steps until nothing is active or pending.
    A ``DecodeBatch`` is not thread-safe: drive it from one thread (e.g. a server's decode worker) and pass
    adds/cancels to that thread.

Each request has its own sampling parameters (temperature, top-k, top-p), stop strings, EOS handling,
max_new_tokens, and vLLM's min_tokens and stop_token_ids. min_tokens masks the stop tokens' logits at the
positions before it, in the one target pass that verifies drafts as in plain decoding, so speculation stays
lossless. A structured-output grammar (``GenerationParams.grammar``) masks every verified position the same way,
by its state after the drafts before it (:mod:`specplug.runtime.structured`); ``GenerationParams.logprobs`` reads
each output token's log-probability from the pass that produced it. A stop string ends the text before it and the tokens with the one that completed it
(:mod:`specplug.runtime.textstream`, which the server shares). Seeds: every request draws its random numbers
from its own generator (seeded by its seed, else at random), as many as it would alone, so a seeded request
gives the same tokens alone and batched beside others (pacing then drafts a fixed k: see ``step``).

How a step works: each row feeds [last token, its drafts] in one target forward (rows with fewer drafts
carry padding that is rolled back), the verifier decides per row, the target cache keeps per row exactly the
columns that row accepted (see :mod:`specplug.runtime.cache`), and the proposer rolls its own state back.
Queued prompts join inside that same forward, up to ``prefill_chunk`` prompt tokens a step (a longer prompt
joins over several steps), so the running requests do not wait for them; a joining row starts decoding from the
step that fed its prompt's last token. With nothing running, or a target that does not pack (computes padding),
queued prompts are prefilled in passes of their own instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from specplug.runtime.cache import KVState, packs
from specplug.runtime.decoder import lean as lean_decoder
from specplug.runtime.pacing import DraftPacer, record
from specplug.runtime.prefix import PrefixCache
from specplug.runtime.proposers import Draft, Proposer, _prefill
from specplug.runtime.sampling import (
    RowGenerators,
    RowWarper,
    SamplingParams,
    TokenLogprob,
    hold_stop_tokens,
    token_logprobs,
)
from specplug.runtime.textstream import TextStream
from specplug.runtime.verify import verify


@dataclass(frozen=True)
class GenerationParams:
    """What one request asks for."""

    max_new_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    # vLLM's meaning: no end-of-sequence or stop token before this many output tokens (their logits are masked,
    # in plain decoding and in verification alike), and no stop string ending before then either.
    min_tokens: int = 0
    # Tokens that end the output when produced (also with ignore_eos); unlike EOS they count as output tokens,
    # and their text is not part of the output.
    stop_token_ids: tuple[int, ...] = ()
    # A compiled grammar (specplug.runtime.structured.Grammar) the output must follow: it masks the target's logits
    # at every position, verified ones included, and the output ends where the grammar is complete.
    grammar: Any = None
    # Log-probabilities of each output token, with this many alternatives (None: none). As vLLM's default
    # logprobs_mode (raw_logprobs): from the target's logits after the grammar mask, before min_tokens, temperature,
    # top-k and top-p.
    logprobs: int | None = None


@dataclass
class RequestStats:
    """Per-request counters. Acceptance length = tokens per target pass (1.0 without speculation), the
    end-of-sequence token that ended the request counted: a pass produced it, as vLLM counts it."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    eos_tokens: int = 0  # 1 when an end-of-sequence token ended the request (it is not in the text)
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    prefill_s: float = 0.0  # from joining (the first pass that fed its prompt) to its first token
    elapsed_s: float = 0.0
    cached_prompt_tokens: int = 0  # of prompt_tokens, those whose KV came from the prefix cache

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        return (self.new_tokens + self.eos_tokens) / self.target_passes if self.target_passes else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        per_pos = [
            round(a / d, 4) if d else None
            for a, d in zip(self.accepted_per_position, self.drafted_per_position, strict=True)
        ]
        return {
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "acceptance_per_position": per_pos,
            "target_passes": self.target_passes,
            "mean_acceptance_length": round(self.mean_acceptance_length, 3),
            "prefill_s": round(self.prefill_s, 4),
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "elapsed_s": round(self.elapsed_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 2),
        }


@dataclass
class Result:
    tokens: list[int]
    text: str | None
    finish_reason: str | None  # "stop" (EOS or stop string), "length", "cancelled"; None while running
    stats: RequestStats


@dataclass
class StepOutput:
    request_id: int
    new_tokens: list[int]
    text_delta: str
    finished: bool
    finish_reason: str | None
    stop_token_id: int | None = None  # the stop_token_ids member that ended the request (the last new token)
    logprobs: list[TokenLogprob] | None = None  # one per new token, where the request asked for them


@dataclass
class _Found:
    """A free proposer's whole draft (before pacing cut it), matched against the tokens emitted after it.

    Why: a draft that is one fixed token per position (n-gram) would have been accepted at position j with
    the probability that the target emits exactly that token there, so comparing it with what was emitted
    scores every position it found, also those the pacer did not send to the target. Without this, a width
    once judged too wide would never be tried again and positions past it would keep their prior for good.
    """

    tokens: list[int]
    state: tuple[int, int]  # (the row's run state, the proposer's match length) when it was drafted
    matched: int = 0

    def feed(self, emitted: list[int]) -> bool:
        """Match the next emitted tokens; True once settled (a mismatch, or every drafted token matched)."""
        for tok in emitted:
            if self.matched == len(self.tokens) or self.tokens[self.matched] != tok:
                return True
            self.matched += 1
        return self.matched == len(self.tokens)


@dataclass
class _Row:
    rid: int
    params: GenerationParams
    history: list[int]
    prompt_len: int
    k: int
    started: float
    stats: RequestStats
    stream: TextStream | None = None  # ids -> text and stop strings, where the engine has a tokenizer
    gen: torch.Generator | None = None  # the request's own random numbers (set when it joins)
    joined: float = 0.0  # when it joined (its prompt's first pass)
    prefilled: int = 0  # prompt tokens in the target's cache (a prompt that joins over several passes)
    finish_reason: str | None = None
    grammar: Any = None  # the request's specplug.runtime.structured.GrammarState (set when it joins)
    found: list[_Found] = field(default_factory=list)  # a free proposer's drafts still being matched
    # Whether the row's latest settled free draft matched in full: copied text tends to go on being copied, so a
    # free proposer's counters are kept per state (this run state, and how long a match found the draft). A
    # costly proposer's have one state, None.
    run: int = 0
    # For pacing, per state and draft position: drafts offered (or found) that far, and accepted that far.
    pace_counts: dict[tuple[int, int] | None, tuple[list[int], list[int]]] = field(default_factory=dict)

    def counts(self, state: tuple[int, int] | None) -> tuple[list[int], list[int]]:
        return self.pace_counts.setdefault(state, ([], []))

    @property
    def generated(self) -> list[int]:
        return self.history[self.prompt_len :]


@dataclass
class _Turn:
    """The running rows' part of a step, drafted and ready for the target pass: what it feeds (``feed``: each row's
    last token then its drafts; ``fed``: which of those are real) and what verifying and settling it needs."""

    rows: list[_Row]
    ks: list[int]
    warper: RowWarper
    gens: RowGenerators
    draft: Draft
    dtokens: torch.Tensor
    dn: torch.Tensor
    drafting: float  # seconds the proposer took
    found: list[_Found] | None
    free: bool
    guided: list[int]
    feed: torch.Tensor
    fed: torch.Tensor | None


class _Verified(NamedTuple):
    n_acc: torch.Tensor  # drafts accepted per row
    nxt: torch.Tensor  # the token after them per row
    lps: dict[int, torch.Tensor]  # log-probabilities of the rows that asked for them
    dtok_l: list[list[int]] | None  # the drafts as lists (None: no row drafted)


class _NoProposer:
    name = "none"
    free = True

    def start(self, prompts: list[list[int]]) -> None:
        return None

    def propose(self, histories: list[list[int]], ks: list[int], warp: Any, generator: Any) -> Draft:
        n = len(histories)
        return Draft(torch.zeros(n, 0, dtype=torch.long), torch.zeros(n, dtype=torch.long), None)

    def commit(self, n_accepted: torch.Tensor, next_tokens: torch.Tensor) -> None:
        return None

    def select(self, rows: torch.Tensor) -> None:
        return None


# What speculation did in a decode step, for /metrics and the log: "on" drafted; otherwise why not:
# "no_draft" the proposer found nothing to draft, "not_paying" the cost model (measured pass costs at this batch
# and the acceptance seen so far) predicted drafting would not pay, "at_length" every row is one token short of
# its max_tokens.
SPEC_STEPS = ("on", "no_draft", "not_paying", "at_length")
# Pass widths (drafts per row) and batch sizes ``calibrate`` times at start, up to k and the largest batch.
CALIBRATE_WIDTHS = (0, 1, 2, 3, 4, 6, 8, 12, 16)
CALIBRATE_BATCHES = (1, 2, 4, 8, 16, 32)
CALIBRATE_RAGGED = (1, 2, 4)  # drafted tokens spread one per row, timed where the target packs
CALIBRATE_CONTEXT = 96  # tokens in each calibration row's cache: a short chat's context
# Prompt tokens a step feeds beside the running rows' turn (chunked prefill): a joining prompt costs the others at
# most this much per step, and a longer one joins over several steps.
PREFILL_CHUNK = 512


class SpeculativeEngine:
    """Holds the target model and how to draft; each ``start()`` makes an independent batch."""

    def __init__(
        self,
        target: Any,
        tokenizer: Any = None,
        proposer_factory: Callable[[], Proposer] | None = None,
        k: int = 4,
        adaptive: bool = False,
        k_max: int | None = None,
        device: torch.device | str | None = None,
        eos_token_ids: list[int] | None = None,
        lean: bool = True,
        paced: bool = False,
        prefix_cache_bytes: int = 0,
        prefill_chunk: int = PREFILL_CHUNK,
    ) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        # The lean forward gives the same logits for less per-step overhead, where the architecture allows.
        self.target = lean_decoder(target) if lean else target
        self.tokenizer = tokenizer
        self.proposer_factory = proposer_factory
        self.method = proposer_factory().name if proposer_factory else "none"
        self.k = k
        self.adaptive = adaptive
        self.k_max = k_max or 2 * k
        # Measured pass costs and acceptance, shared by this engine's batches (see specplug.runtime.pacing).
        self.pacer = DraftPacer(packed=packs(self.target)) if paced and proposer_factory else None
        # Steps by what speculation did (SPEC_STEPS): whether it drafted, and why not where it did not. Read by
        # the server's /metrics and log; only ever added to.
        self.spec_steps: dict[str, int] = dict.fromkeys(SPEC_STEPS, 0)
        self.decode_steps = 0  # over this engine's batches: when requests finish and join (see DraftPacer.weights)
        self.device = torch.device(device) if device is not None else next(target.parameters()).device
        if eos_token_ids is None:
            eos = getattr(getattr(target, "generation_config", None), "eos_token_id", None)
            if eos is None:
                eos = getattr(target.config, "eos_token_id", None)
            eos_token_ids = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
        self.eos_token_ids = set(eos_token_ids)
        # Joining prompts ride in the running batch's passes, at most this many tokens a pass (0: each prompt is a
        # prefill pass of its own). Needs a target that computes only the columns it is told to (packs).
        self.prefill_chunk = prefill_chunk
        self.mixes_prefill = prefill_chunk > 0 and packs(self.target)
        # The target's KV of prompt prefixes it has computed, shared by this engine's batches (0 bytes: none kept).
        self.prefix = PrefixCache(prefix_cache_bytes) if prefix_cache_bytes > 0 else None

    @torch.inference_mode()
    def calibrate(self, max_batch: int) -> dict[int, float]:
        """Time target passes on this machine before serving: each batch size in ``CALIBRATE_BATCHES`` up to
        ``max_batch`` at each width in ``CALIBRATE_WIDTHS`` up to the longest draft, and (for a target that packs) with
        ``CALIBRATE_RAGGED`` rows drafting one token, twice each (the pacer does not believe a size's first timing).
        The pacer then starts from this device's costs instead of learning them by exploring on
        live traffic, which at a large batch costs real seconds. Returns the table by tokens fed, whatever the rows
        ({tokens fed: seconds}); {} without a pacer.
        """
        if self.pacer is None:
            return {}
        gen = torch.Generator().manual_seed(0)
        vocab = int(getattr(self.target.config, "vocab_size", 1000))
        for batch in [b for b in CALIBRATE_BATCHES if b <= max(1, max_batch)]:
            kv = KVState(self.target, batch, self.device)
            kv.forward(torch.randint(0, vocab, (batch, CALIBRATE_CONTEXT), generator=gen).to(self.device), last_only=True)
            longest = self.k_max if self.adaptive else self.k
            shapes = [(width, batch * width) for width in CALIBRATE_WIDTHS if width <= longest]
            if self.pacer.packed and self.k:
                # A few rows with one draft each: the first draft tokens of a pass cost more than the next ones.
                shapes += [(1, m) for m in CALIBRATE_RAGGED if m < batch]
            for width, drafts in shapes:
                feed = torch.randint(0, vocab, (batch, width + 1), generator=gen).to(self.device)
                fed = None
                if drafts < batch * width:
                    fed = torch.arange(width + 1, device=self.device).unsqueeze(0) <= (
                        torch.arange(batch, device=self.device) < drafts).long().unsqueeze(1)
                for _ in range(2):
                    t = time.perf_counter()
                    logits = kv.forward(feed, fed=fed)
                    logits.argmax(-1).tolist()  # as a step ends: a device sync
                    self.pacer.observe_pass(batch + drafts, time.perf_counter() - t, batch)
                    kv.rollback(torch.zeros(batch, dtype=torch.long, device=self.device))
        return dict(sorted(self.pacer.cost.items()))

    def start(self) -> DecodeBatch:
        proposer = self.proposer_factory() if self.proposer_factory else _NoProposer()
        return DecodeBatch(self, proposer)

    def generate(self, prompts: list[list[int]], params: GenerationParams | list[GenerationParams]) -> list[Result]:
        plist = params if isinstance(params, list) else [params] * len(prompts)
        batch = self.start()
        rids = [batch.add(p, q) for p, q in zip(prompts, plist, strict=True)]
        for _ in batch:
            pass
        return [batch.result(r) for r in rids]


class DecodeBatch:
    """Requests decoded together. See the module docstring for the protocol."""

    def __init__(self, engine: SpeculativeEngine, proposer: Proposer) -> None:
        self.engine = engine
        self.proposer = proposer
        self.device = engine.device
        self.kv = KVState(engine.target, 0, self.device)
        self.rows: list[_Row] = []
        self._queue: list[_Row] = []
        self._joining: list[_Row] = []  # prompts part-fed into the cache, its rows after the running ones
        self._cancelled: set[int] = set()
        self._done: dict[int, _Row] = {}
        self._released: set[int] = set()  # requests whose results nobody will ask for once they finish
        self._next_id = 0
        self._lock = threading.Lock()
        self._warper: RowWarper | None = None

    # -- requests -------------------------------------------------------------------------------------------
    def add(self, prompt: list[int], params: GenerationParams | None = None) -> int:
        params = params or GenerationParams()
        if not prompt:
            raise ValueError("a prompt needs at least one token")
        if params.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        if not 0 <= params.min_tokens <= params.max_new_tokens:
            raise ValueError(f"min_tokens must be between 0 and max_new_tokens ({params.max_new_tokens}), got {params.min_tokens}")
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            stats = RequestStats(prompt_tokens=len(prompt))
            tok = self.engine.tokenizer
            stream = _text_stream(tok, params) if tok is not None else None
            row = _Row(rid, params, list(prompt), len(prompt), self.engine.k, time.perf_counter(), stats, stream)
            self._queue.append(row)
        return rid

    def cancel(self, rid: int) -> None:
        with self._lock:
            self._cancelled.add(rid)

    @property
    def active(self) -> list[int]:
        return [r.rid for r in self.rows]

    @property
    def pending(self) -> list[int]:
        return [r.rid for r in self._joining + self._queue]

    def release(self, rid: int) -> None:
        """Forget request ``rid``'s result once it has finished (a long-lived batch would keep every one)."""
        with self._lock:
            if self._done.pop(rid, None) is None:
                self._released.add(rid)

    def _finish(self, row: _Row) -> None:
        if row.rid in self._released:
            self._released.discard(row.rid)
        else:
            self._done[row.rid] = row

    def result(self, rid: int) -> Result:
        row = self._done.get(rid) or next((r for r in self.rows + self._joining + self._queue if r.rid == rid), None)
        if row is None:
            raise KeyError(rid)
        text = row.stream.text if row.stream is not None else None
        return Result(list(row.generated), text, row.finish_reason, row.stats)

    def __iter__(self) -> Iterator[list[StepOutput]]:
        while self.rows or self._joining or self._queue:
            yield self.step()

    # -- decoding -------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[StepOutput]:
        outs = self._cancel()
        if self._queue and not self._mixing():
            outs += self._admit()
            if not self.rows or any(o.new_tokens for o in outs):
                # A step that admitted requests returns their first tokens (from the prefill) right away.
                return outs
        joins = self._joins()
        if not self.rows and not joins:
            return outs
        turn = self._propose(timed=not joins) if self.rows else None
        t1 = time.perf_counter()
        logits = self._mixed_forward(turn, joins) if joins else self.kv.forward(turn.feed, fed=turn.fed)
        running = len(turn.rows) if turn is not None else 0
        keep = [t for _, t in joins]
        if turn is not None:
            checked = self._verify(turn, logits[:running])
            keep_t = checked.n_acc + 1
            self.kv.rollback(torch.cat([keep_t, keep_t.new_tensor(keep)]) if keep else keep_t)
            outs += self._settle(turn, checked, t1, timed=not joins)
        else:
            self.kv.rollback(torch.tensor(keep, dtype=torch.long, device=self.device))
        ahead = [r.prompt_len - r.prefilled - t for r, t in joins]  # prompt tokens still to come after this chunk
        self.kv.compact([running + j for j in range(len(joins))], keep, ahead)
        finished = [i for i, r in enumerate(self.rows) if r.finish_reason is not None]
        if finished and self.engine.pacer is not None:
            self.engine.pacer.observe_finish(self.engine.decode_steps, len(finished))
        if joins:
            outs += self._joined(joins, logits[running:])
            finished = [i for i, r in enumerate(self.rows) if r.finish_reason is not None]
        if finished:
            self._drop(finished)
        return outs

    def _propose(self, timed: bool = True) -> _Turn:
        """Draft for every running row, as far as the pacer finds it pays; what the target pass then feeds. A pass
        that is not ``timed`` (it also feeds prompts) is not widened to time a width: its time would not tell."""
        rows = self.rows
        if self._warper is None:
            self._warper = RowWarper([r.params.sampling for r in rows], self.device)
        warper = self._warper
        gens = RowGenerators([r.gen for r in rows])
        ks = [max(0, min(r.k, r.params.max_new_tokens - r.stats.new_tokens - 1)) for r in rows]
        if self.engine.proposer_factory is None:
            ks = [0] * len(rows)

        pacer = self.engine.pacer
        # A step draws random numbers per column it verifies, and a paced width follows measured timings: while a
        # seeded sampling request runs, steps draft what a fixed k would, so that a seeded request decoded alone
        # reproduces exactly (greedy rows are deterministic at any width).
        paced = pacer is not None and not any(r.params.sampling.seed is not None and not r.params.sampling.greedy
                                              for r in rows)
        last = torch.tensor([r.history[-1] for r in rows], dtype=torch.long, device=self.device)
        # A free proposer (n-gram) drafts first and the pacer sees what it found; a costly one (a draft model)
        # is told its width before drafting.
        free = bool(getattr(self.proposer, "free", False))
        width = 0
        limits = list(ks)
        step_no = self.engine.decode_steps = self.engine.decode_steps + 1
        weights = None
        if paced:
            weights = pacer.weights([r.params.max_new_tokens - r.stats.new_tokens for r in rows], step_no)
        if paced and any(ks) and not free:
            rates = [pacer.rates(*r.counts(None), k) for r, k in zip(rows, ks, strict=True)]
            width = pacer.choose(ks, rates, probe=True, weights=weights)
            ks = [min(k, width) for k in ks]

        def warp(logits: torch.Tensor) -> torch.Tensor | None:
            return None if warper.all_greedy else warper(logits)

        t0 = time.perf_counter()
        guided = [i for i, r in enumerate(rows) if r.grammar is not None]
        if guided and getattr(self.proposer, "guided", False):
            draft = self.proposer.propose([r.history for r in rows], ks, warp, gens, guide=self._guide(rows, guided))
        else:
            draft = self.proposer.propose([r.history for r in rows], ks, warp, gens)
        drafting = time.perf_counter() - t0
        full_n = draft.n
        found: list[_Found] | None = None
        if pacer is not None and free and draft.tokens.shape[1]:
            full = draft.tokens.tolist()
            match = draft.match or [0] * len(rows)
            found = [_Found(t[:n], (r.run, m)) for r, t, n, m in zip(rows, full, draft.n.tolist(), match, strict=True)]
            if paced:
                rates = [pacer.rates(*r.counts(f.state), len(f.tokens), f.state) for r, f in zip(rows, found, strict=True)]
                lens = [len(f.tokens) for f in found]
                if pacer.packed:  # each row verifies only its drafts worth their tokens
                    widths = pacer.choose_rows(lens, rates, weights)
                    width = max(widths, default=0)
                    draft = Draft(draft.tokens[:, :width], torch.tensor(widths, dtype=torch.long), None)
                else:
                    width = pacer.choose(lens, rates, weights=weights)
                    draft = Draft(draft.tokens[:, :width], draft.n.clamp(max=width), None)
        if paced and timed and pacer.measuring and draft.tokens.shape[1] < width:
            draft = _widen(draft, width)  # the pass must have the width being measured
        if self.engine.proposer_factory is not None:
            found_any = free and bool((full_n > 0).any())
            cut = paced and width == 0 and (found_any or not free)
            self.engine.spec_steps[_spec_state(limits, cut, draft)] += 1
        dtokens = draft.tokens.to(self.device)
        dn = draft.n.to(self.device)
        # Columns past a row's own drafts are padding: a target that packs computes none of them.
        fed = None
        if dtokens.shape[1] and min(draft.n.tolist()) < dtokens.shape[1]:
            fed = torch.arange(dtokens.shape[1] + 1, device=self.device).unsqueeze(0) <= dn.unsqueeze(1)
        feed = torch.cat([last.unsqueeze(1), dtokens], dim=1)
        return _Turn(rows, ks, warper, gens, draft, dtokens, dn, drafting, found, free, guided, feed, fed)

    def _verify(self, turn: _Turn, logits: torch.Tensor) -> _Verified:
        """Accepted drafts and the next token per running row, from the target's logits over its fed columns."""
        rows, draft, guided = turn.rows, turn.draft, turn.guided
        dn_l = draft.n.tolist()
        dtok_l = draft.tokens.tolist() if any(dn_l) else None
        if guided:
            self._mask(rows, guided, logits, [d[:n] for d, n in zip(dtok_l, dn_l, strict=True)] if dtok_l else None)
        lps = self._logprobs(rows, logits)
        logits = self._hold_stops(rows, logits)
        n_acc, nxt = verify(logits, turn.dtokens, turn.dn, draft.probs, turn.warper, turn.gens)
        return _Verified(n_acc, nxt, lps, dtok_l)

    def _settle(self, turn: _Turn, checked: _Verified, t1: float, timed: bool) -> list[StepOutput]:
        """Commit a verified turn: the proposer's state, the pacer's observations (``timed``: the pass fed this turn
        alone, so its time is this turn's), and each row's new tokens."""
        rows, ks, draft, found, free = turn.rows, turn.ks, turn.draft, turn.found, turn.free
        n_acc, nxt, lps, dtok_l = checked
        dn_l = draft.n.tolist()
        self.proposer.commit(n_acc, nxt)
        acc_l, nxt_l = n_acc.tolist(), nxt.tolist()  # (a device sync)
        for i in turn.guided:
            rows[i].grammar.settle(acc_l[i], nxt_l[i])
        pacer = self.engine.pacer
        if pacer is not None:
            t2 = time.perf_counter()
            if timed:
                fed_tokens = len(rows) + sum(dn_l) if pacer.packed else len(rows) * (1 + turn.dtokens.shape[1])
                pacer.observe_pass(fed_tokens, t2 - t1, len(rows))
            if not draft.backlog:
                pacer.observe_draft(max(ks, default=0), turn.drafting, len(rows))
            if not free:  # a free proposer's drafts are scored as tokens are emitted (_score_found)
                for row, k, a in zip(rows, ks, acc_l, strict=True):
                    pacer.observe_acceptance(k, a)
                    record(*row.counts(None), k, a)
        outs: list[StepOutput] = []
        now = time.perf_counter()
        for i, row in enumerate(rows):
            a, n = acc_l[i], dn_l[i]
            st = row.stats
            st.target_passes += 1
            st.drafted += n
            st.accepted += a
            record(st.drafted_per_position, st.accepted_per_position, n, a)
            if self.engine.adaptive and n:
                row.k = min(row.k + 1, self.engine.k_max) if a == n else max(1, row.k - 1)
            emitted = (dtok_l[i][:a] if a else []) + [nxt_l[i]]
            if pacer is not None and free:
                self._score_found(row, found[i] if found else None, emitted)
            outs.append(self._emit(row, emitted, now, lps.get(i)))
        return outs

    def _guide(self, rows: list[_Row], guided: list[int]) -> Callable[[torch.Tensor | None], torch.Tensor]:
        """For a proposer that samples from a distribution: before each draft position, walk the tokens it drafted
        at the previous one (None before the first) and return ``(B, V)`` bool, the tokens each row's grammar
        allows there (all for unconstrained rows), so that q is a distribution over allowed tokens."""
        vocab = int(self.engine.target.config.vocab_size)

        def guide(drafted: torch.Tensor | None) -> torch.Tensor:
            allowed = torch.ones(len(rows), vocab, dtype=torch.bool)
            prev = drafted.tolist() if drafted is not None else None
            for i in guided:
                g = rows[i].grammar
                if prev is not None:
                    g.advance(prev[i])
                allowed[i] = g.allowed(vocab)
            return allowed

        return guide

    def _mask(self, rows: list[_Row], guided: list[int], logits: torch.Tensor, drafts: list[list[int]] | None) -> None:
        """Grammar-mask the target's logits ``(B, W, V)`` in place: row i's column j by its grammar's state after its
        drafts 0..j-1, the distribution plain decoding samples from there (columns past its drafts are padding)."""
        from specplug.runtime.structured import mask_logits

        vocab = logits.shape[-1]
        for i in guided:
            d = drafts[i] if drafts is not None else []
            mask_logits(logits[i, : len(d) + 1], rows[i].grammar.masks(d, vocab))

    def _logprobs(self, rows: list[_Row], logits: torch.Tensor) -> dict[int, torch.Tensor]:
        """Log-softmax ``(W, V)`` of the logits of each row that asked for logprobs (see GenerationParams.logprobs)."""
        return {i: logits[i].float().log_softmax(-1) for i, r in enumerate(rows) if r.params.logprobs is not None}

    def _hold_stops(self, rows: list[_Row], logits: torch.Tensor) -> torch.Tensor:
        """``logits`` with stop tokens masked where a row is short of its min_tokens (see ``hold_stop_tokens``)."""
        if not any(r.params.min_tokens > r.stats.new_tokens for r in rows):
            return logits
        eos = frozenset(self.engine.eos_token_ids)  # masked with ignore_eos too, as vLLM does
        return hold_stop_tokens(
            logits, [r.stats.new_tokens for r in rows], [r.params.min_tokens for r in rows],
            [eos | frozenset(r.params.stop_token_ids) for r in rows],
        )

    def _score_found(self, row: _Row, drafted: _Found | None, emitted: list[int]) -> None:
        """Match this step's emitted tokens against the row's open drafts (this step's one included); a settled
        draft counts, at every position it found, as accepted up to its first mismatch."""
        if drafted is not None and drafted.tokens:
            row.found.append(drafted)
        still: list[_Found] = []
        for f in row.found:  # oldest first, so the latest settled one sets the run state
            if f.feed(emitted):
                self.engine.pacer.observe_acceptance(len(f.tokens), f.matched, f.state)
                record(*row.counts(f.state), len(f.tokens), f.matched)
                row.run = int(f.matched == len(f.tokens))
            else:
                still.append(f)
        row.found = still

    def _emit(self, row: _Row, emitted: list[int], now: float, logprobs: torch.Tensor | None = None) -> StepOutput:
        params, st = row.params, row.stats
        reason, eos_at, stop_id = None, -1, None
        # The grammar allows only end-of-sequence after its last token (the drafts after it were rejected): the
        # output is complete, and ends here rather than one more pass for the EOS.
        if row.grammar is not None and row.grammar.stopped:
            reason = "stop"
        eos = self.engine.eos_token_ids if not params.ignore_eos else ()
        if eos or params.stop_token_ids:
            # Stop tokens count from the min_tokens-th output on (before it their logits were masked anyway).
            for j in range(max(0, params.min_tokens - st.new_tokens), len(emitted)):
                t = emitted[j]
                if t in eos:
                    emitted, reason, eos_at = emitted[:j], "stop", j
                    break
                if t in params.stop_token_ids:
                    emitted, reason, stop_id = emitted[: j + 1], "stop", t
                    break
        room = params.max_new_tokens - st.new_tokens
        if len(emitted) >= room:
            if len(emitted) > room or reason is None:
                reason, stop_id = "length", None
            emitted = emitted[:room]
        delta = ""
        if row.stream is not None:
            # A stop token's text is not output (vLLM's default); a stop string before it ends the output first.
            texted = emitted[:-1] if stop_id is not None else emitted
            pushed = row.stream.push(texted, final=reason is not None)
            if pushed.stopped:
                emitted, reason, stop_id = emitted[: pushed.kept], "stop", None
            delta = pushed.text
        row.history.extend(emitted)
        st.new_tokens += len(emitted)
        st.eos_tokens = int(reason == "stop" and len(emitted) == eos_at)  # not when cut before the EOS
        st.elapsed_s = now - row.started
        row.finish_reason = reason
        lps = None
        if logprobs is not None:
            lps = token_logprobs(logprobs, emitted, params.logprobs or 0) if emitted else []
        return StepOutput(row.rid, emitted, delta, reason is not None, reason, stop_id, lps)

    def _drop(self, idx: list[int], joining: list[int] | None = None) -> None:
        """Running rows ``idx`` (and joining rows ``joining``) leave the batch, their cache rows with them."""
        gone, gone_j = set(idx), set(joining or ())
        for i in idx:
            self._finish(self.rows[i])
        for j in gone_j:
            self._finish(self._joining[j])
        # Rows in place stay; the places of departed ones go to the last rows, so that a cache moves only those
        # rows (see GrowCache.batch_select_indices) instead of copying every one. Joining rows stay after them.
        running = len(self.rows)
        n = running - len(gone)
        tail = [i for i in range(n, running) if i not in gone]
        keep = [tail.pop() if i in gone else i for i in range(n)]
        keep_j = [j for j in range(len(self._joining)) if j not in gone_j]
        self.rows = [self.rows[i] for i in keep]
        self._joining = [self._joining[j] for j in keep_j]
        self._warper = self._warper.select(keep) if self._warper and self.rows else None
        if self.rows or self._joining:
            self.kv.select(torch.tensor(keep + [running + j for j in keep_j], dtype=torch.long, device=self.device))
        else:
            # Nothing left: start the next admissions from a clean cache.
            self.kv = KVState(self.engine.target, 0, self.device)
        if self.rows:
            self.proposer.select(torch.tensor(keep, dtype=torch.long))
        else:  # and a clean proposer
            self.proposer = self.engine.proposer_factory() if self.engine.proposer_factory else _NoProposer()

    def _cancel(self) -> list[StepOutput]:
        """Requests cancelled since the last step leave, wherever they are (queued, joining or running)."""
        with self._lock:
            cancelled, self._cancelled = self._cancelled, set()
            queued = [r for r in self._queue if r.rid in cancelled]
            self._queue = [r for r in self._queue if r.rid not in cancelled]
        gone = [i for i, r in enumerate(self.rows) if r.rid in cancelled]
        gone_j = [j for j, r in enumerate(self._joining) if r.rid in cancelled]
        outs = []
        for row in queued:
            row.finish_reason = "cancelled"
            self._finish(row)
            outs.append(StepOutput(row.rid, [], "", True, "cancelled"))
        for row in [self.rows[i] for i in gone] + [self._joining[j] for j in gone_j]:
            row.finish_reason = "cancelled"
            outs.append(StepOutput(row.rid, [], "", True, "cancelled"))
        if gone or gone_j:
            self._drop(gone, gone_j)
        return outs

    def _admit(self) -> list[StepOutput]:
        """Prefill every queued prompt in passes of their own (no running rows to mix them with, or a target that
        cannot mix); return their first tokens."""
        with self._lock:
            queue, self._queue = self._queue, []
        if not queue:
            return []
        if self.engine.pacer is not None:
            self.engine.pacer.observe_arrival(self.engine.decode_steps, len(queue), running=bool(self.rows))
        self._start(queue)
        # The prompt goes in (after the prefix the target has already computed, where the prefix cache holds
        # one) and its last position gives the first token, as a plain ``generate`` computes it. Consecutive
        # prompts of one length go in together and others apart, so that no compute goes to padding a short
        # prompt to a long one's length (and equal ones still share a pass).
        new = KVState(self.engine.target, 0, self.device)
        parts = []
        prefix = self.engine.prefix
        for run, cached, kvs in _prefill_runs(queue, prefix):
            part = KVState(self.engine.target, len(run), self.device)
            if kvs is not None:
                part.seed(kvs)
            parts.append(_prefill(part, [r.history[c:] for r, c in zip(run, cached, strict=True)], self.device))
            for i, (r, c) in enumerate(zip(run, cached, strict=True)):
                r.stats.cached_prompt_tokens = c
                r.prefilled = r.prompt_len
                if prefix is not None:
                    prefix.count(len(r.history), c)
                    prefix.insert(r.history, part.row_kv(i))
            new.merge(part)
        self.kv.merge(new)
        outs = self._first_tokens(queue, torch.cat(parts))
        self.proposer.start([list(r.history) for r in queue])
        self.rows.extend(queue)
        self._warper = None
        finished = [i for i, r in enumerate(self.rows) if r.finish_reason is not None]
        if finished:
            self._drop(finished)
        return outs

    # -- joining --------------------------------------------------------------------------------------------
    def _mixing(self) -> bool:
        """Whether queued prompts go into the running batch's passes (chunked) instead of a prefill pass of their
        own that every running request waits for."""
        return self.engine.mixes_prefill and bool(self.rows or self._joining)

    def _joins(self) -> list[tuple[_Row, int]]:
        """This pass's prompt chunks, first come first served within ``prefill_chunk`` tokens: the prompt part-fed
        before, then queued requests, which join the cache here (after their cached prefix, if any). Only the last
        may stay part-fed, so that requests finish joining in order and every joining row feeds each pass."""
        if not self._mixing():
            return []
        # With nothing running a prompt holds up no one: it goes in whole.
        budget = self.engine.prefill_chunk if self.rows else max(r.prompt_len for r in self._joining + self._queue)
        joins = []
        for r in self._joining:
            take = min(r.prompt_len - r.prefilled, budget)
            joins.append((r, take))
            budget -= take
        if budget <= 0 or not self._queue:
            return joins
        with self._lock:
            queue, self._queue = self._queue, []
        prefix = self.engine.prefix
        new: list[_Row] = []
        kvs: list[Any] = []
        while queue and budget > 0:
            r = queue.pop(0)
            cached, kv = prefix.lookup(r.history) if prefix is not None else (0, None)
            if prefix is not None:
                prefix.count(len(r.history), cached)
            r.prefilled = r.stats.cached_prompt_tokens = cached
            take = min(r.prompt_len - cached, budget)
            joins.append((r, take))
            budget -= take
            new.append(r)
            kvs.append(kv)
        with self._lock:
            self._queue = queue + self._queue
        if self.engine.pacer is not None:
            self.engine.pacer.observe_arrival(self.engine.decode_steps, len(new), running=bool(self.rows))
        self._start(new)
        hits = [kv for kv in kvs if kv is not None]
        part = KVState(self.engine.target, 0 if hits else len(new), self.device)
        if hits:  # cached prefixes, left-padded; rows without one start with none
            part.seed([kv if kv is not None else [(k[:, :, :0], v[:, :, :0]) for k, v in hits[0]] for kv in kvs])
        self.kv.merge(part)
        self._joining.extend(new)
        return joins

    def _mixed_forward(self, turn: _Turn | None, joins: list[tuple[_Row, int]]) -> torch.Tensor:
        """One target pass over the running rows' turn and the joining rows' prompt chunks, each row's real tokens
        first (the rest padding the target does not compute). Logits: the turn's fed columns, then per joining row
        its prompt's last column where this chunk ends the prompt."""
        running = len(turn.rows) if turn is not None else 0
        wide = turn.feed.shape[1] if turn is not None else 0
        width = max([wide] + [t for _, t in joins])
        tokens = torch.zeros(running + len(joins), width, dtype=torch.long)
        real = torch.zeros(running + len(joins), width, dtype=torch.bool)
        for j, (r, take) in enumerate(joins):
            tokens[running + j, :take] = torch.tensor(r.history[r.prefilled : r.prefilled + take])
            real[running + j, :take] = True
        tokens, real = tokens.to(self.device), real.to(self.device)
        wanted = real.clone()
        if turn is not None:
            tokens[:running, :wide] = turn.feed
            real[:running, :wide] = True if turn.fed is None else turn.fed
            wanted[:running] = real[:running]
        for j, (r, take) in enumerate(joins):
            wanted[running + j] = False
            if r.prefilled + take == r.prompt_len:
                wanted[running + j, take - 1] = True
        # The running rows' attention spans their own few columns, not the prompt chunk's width.
        parts = [(running, wide), (len(joins), width)] if running and wide < width else None
        logits = self.kv.forward(tokens, real, fed=real, logits_at=wanted, parts=parts)
        if logits.shape[1] < wide:  # the turn's columns past every row's drafts
            logits = torch.nn.functional.pad(logits, (0, 0, 0, wide - logits.shape[1]))
        return logits

    def _joined(self, joins: list[tuple[_Row, int]], logits: torch.Tensor) -> list[StepOutput]:
        """After a pass that fed ``joins``: the rows whose prompt it completed (the first ones) get their first
        token from ``logits`` and start decoding; their prompts' KV goes into the prefix cache."""
        for r, take in joins:
            r.prefilled += take
        done = [r for r, _ in joins if r.prefilled == r.prompt_len]
        if not done:
            return []
        prefix = self.engine.prefix
        if prefix is not None:
            for j, r in enumerate(done):
                prefix.insert(r.history, self.kv.row_kv(len(self.rows) + j))
        outs = self._first_tokens(done, logits[: len(done), :1])
        self._joining = self._joining[len(done) :]
        self.proposer.start([list(r.history) for r in done])
        self.rows.extend(done)
        self._warper = None
        return outs

    def _start(self, rows: list[_Row]) -> None:
        """Each joining request's own random numbers (seeded by its seed, else at random), and its start time."""
        now = time.perf_counter()
        for r in rows:
            r.joined = now
            r.gen = torch.Generator(device=self.device)
            if r.params.sampling.seed is not None:
                r.gen.manual_seed(r.params.sampling.seed)
            else:
                r.gen.seed()

    def _first_tokens(self, rows: list[_Row], logits: torch.Tensor) -> list[StepOutput]:
        """Sample each joining row's first token from its prompt's last logits ``(B, 1, V)``, as plain decoding
        does (grammar, min_tokens and its own random numbers)."""
        guided = [i for i, r in enumerate(rows) if r.params.grammar is not None]
        for i in guided:
            rows[i].grammar = rows[i].params.grammar.start()
        if guided:
            self._mask(rows, guided, logits, None)
        lps = self._logprobs(rows, logits)
        logits = self._hold_stops(rows, logits)
        warper = RowWarper([r.params.sampling for r in rows], self.device)
        no_draft = torch.zeros(len(rows), 0, dtype=torch.long, device=self.device)
        gens = RowGenerators([r.gen for r in rows])
        _, first = verify(logits, no_draft, no_draft.new_zeros(len(rows)), None, warper, gens)
        now = time.perf_counter()
        first_l = first.tolist()
        for i in guided:
            rows[i].grammar.settle(0, first_l[i])
        outs = []
        for i, (r, t) in enumerate(zip(rows, first_l, strict=True)):
            r.stats.prefill_s = now - r.joined
            r.stats.target_passes += 1
            outs.append(self._emit(r, [t], now, lps.get(i)))
        return outs


def _text_stream(tokenizer: Any, params: GenerationParams) -> TextStream:
    if params.min_tokens and params.stop:
        # Stop strings count only once min_tokens are out, as in vLLM's detokenizer.
        from specplug.runtime.serving.dialect import DialectTextStream

        return DialectTextStream(tokenizer, params.stop, min_tokens=params.min_tokens)
    return TextStream(tokenizer, params.stop)


def _prefill_runs(rows: list[_Row], prefix: PrefixCache | None) -> Iterator[tuple[list[_Row], list[int], Any]]:
    """``rows`` cut, in order, into runs that prefill together, each with its rows' cached prefix lengths and KV:
    consecutive prompts with a cached prefix together (each after its own prefix, left-padded), consecutive ones of
    one length without one together (KV None). Each prompt is looked up once the runs before it are yielded (and
    cached by the caller), so a prompt sharing a prefix with one earlier in the same admission finds it."""
    run: list[_Row] = []
    cached: list[int] = []
    kvs: list[Any] = []

    def lookup(r: _Row) -> tuple[int, Any]:
        return prefix.lookup(r.history) if prefix is not None else (0, None)

    for r in rows:
        n, kv = lookup(r)
        if kv is None and run and not kvs and len(run[0].history) != len(r.history):
            yield run, cached, None
            run, cached = [], []
            n, kv = lookup(r)  # the run just cached may hold its prefix
        if run and (kv is None) != (not kvs):  # a miss after hits, or a hit after misses: a new run
            yield run, cached, kvs or None
            run, cached, kvs = [], [], []
        run.append(r)
        cached.append(n)
        if kv is not None:
            kvs.append(kv)
    if run:
        yield run, cached, kvs or None


def _spec_state(limits: list[int], cut: bool, draft: Draft) -> str:
    """Which of ``SPEC_STEPS`` a step was: ``limits`` the rows' draft limits before pacing, ``cut`` whether the
    pacer chose width 0 where there was something to draft, ``draft`` what goes to the target."""
    if not any(limits):
        return "at_length"
    if bool((draft.n > 0).any()):
        return "on"
    return "not_paying" if cut else "no_draft"


def _widen(draft: Draft, width: int) -> Draft:
    """``draft`` padded to ``width`` columns; the padding is past every row's ``n``, so it is never accepted."""
    pad = width - draft.tokens.shape[1]
    tokens = torch.nn.functional.pad(draft.tokens, (0, pad))
    probs = None if draft.probs is None else torch.nn.functional.pad(draft.probs, (0, 0, 0, pad))
    return Draft(tokens, draft.n, probs, draft.match, draft.backlog)
