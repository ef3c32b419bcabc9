"""TrafficProfile: the measured shape and copy-based acceptance of a logged traffic file."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplug.catalog import Model
from specplug.errors import SpecplugError
from specplug.fileio import user_path
from specplug.traffic.records import (
    DEFAULT_FIELD_MAP,
    DEFAULT_PROGRESS,
    FORMATS_HELP,
    ReadProgress,
    ReadStats,
    parse_field_map,
    read_records,
)
from specplug.traffic.replay import PyReplay, Tally

REPLAYED = ("ngram", "suffix")
# Records tokenized per call and replayed together: the next batch is tokenized (in Rust, without the GIL)
# while this one replays.
BATCH = 1024
# SpecDecode-Bench's indicator: past about this prompt-output BLEU-4, n-gram drafting beats EAGLE.
BLEU_NGRAM_BEATS_EAGLE = 0.6

# workload_shift's reference shape: chat traffic (little copied from the prompt, little repeated).
_CHAT_OVERLAP, _CHAT_REPETITION = 0.15, 0.05
_SHIFT_BOUND = 0.6


@dataclass
class TrafficProfile:
    path: str
    digest: str
    tokenizer: str
    requests: int
    malformed: int
    malformed_lines: list[int]
    input_len: float
    output_len: float
    overlap: float
    repetition: float
    k_max: int
    prompt_lookup_min: int
    prompt_lookup_max: int
    replayed: int = 0  # requests tokenized and replayed (every usable one)
    bleu4: float = 0.0  # mean over requests of the output's BLEU-4 against its prompt, over tokens
    # The context a request decodes over (prompt + half its output), at the middle of each tenth of requests by it:
    # what acceptance is averaged over where it falls with context (specplug.policy.context).
    contexts: tuple[float, ...] = ()
    # From the lines' arrival times (specplug.traffic.records.arrival), where at least two say: requests per second
    # over the span they cover, and how much more the gaps between arrivals vary than a Poisson stream's (1.0).
    request_rate: float | None = None
    arrival_cv: float | None = None
    timed: int = 0  # requests whose line gave an arrival time
    span_s: float = 0.0
    tallies: dict[str, Tally] = field(default_factory=dict, repr=False)

    def position_rates(self, method: str) -> list[float] | None:
        """Measured P(draft position i accepted | positions < i accepted), i = 1..k_max; None if not replayed."""
        t = self.tallies.get(method)
        return t.position_rates() if t else None

    def acceptance_length(self, method: str, k: int) -> float | None:
        """Measured mean tokens per verification step (bonus included) at draft length k."""
        t = self.tallies.get(method)
        if t is None or not 1 <= k <= self.k_max:
            return None
        return t.acceptance_length(k)

    def acceptance_rate(self, method: str, k: int) -> float | None:
        """Accepted / drafted at draft length k, as the stacks' counters give it: (tau - 1) / k."""
        tau = self.acceptance_length(method, k)
        return None if tau is None else (tau - 1.0) / k

    def workload_shift(self) -> float:
        """Logit shift for learned drafters' (EAGLE, MTP, draft models) acceptance implied by this traffic.

        Learned drafters gain on predictable text: output that repeats itself (code, templated answers), and
        to a lesser degree output copied from the prompt. The two slopes are set so that chat-shaped traffic
        gets 0 and code-edit-shaped traffic (overlap ~0.8, repetition ~0.15) about +0.35, the gap between the
        policy's eagle3 priors for chat (0.80) and code-edit (0.85); prompt-copying traffic with little
        repetition (RAG, summaries) stays near 0, where those priors sit within 0.25 of chat. Bounded to
        +-0.6 so a strange file cannot swing a learned drafter's prior by more than the priors' own spread.
        """
        x = 1.2 * (self.repetition - _CHAT_REPETITION) + 0.35 * (self.overlap - _CHAT_OVERLAP)
        return max(-_SHIFT_BOUND, min(_SHIFT_BOUND, x))

    def shape_text(self) -> str:
        """The measured shape in words: copying from the prompt (4-gram overlap and BLEU-4) and repetition."""
        hint = "above" if self.bleu4 >= BLEU_NGRAM_BEATS_EAGLE else "below"
        return (f"output copies its prompt: {self.overlap:.0%} of 4-grams, prompt-output BLEU-4 {self.bleu4:.2f} "
                f"({hint} the ~{BLEU_NGRAM_BEATS_EAGLE} where n-gram drafting overtakes EAGLE); "
                f"repeats itself: {self.repetition:.0%}")

    def malformed_text(self) -> str:
        """'' when every line was usable; else how many were skipped and which (the first ones)."""
        if not self.malformed:
            return ""
        shown = ", ".join(map(str, self.malformed_lines))
        more = ", ..." if self.malformed > len(self.malformed_lines) else ""
        return f"{self.malformed} malformed line{'s' if self.malformed != 1 else ''} skipped (line{'s' if self.malformed != 1 else ''} {shown}{more})"

    def summary(self) -> dict[str, Any]:
        """Plain figures for display and the plan."""
        out: dict[str, Any] = {
            "file": self.path,
            "digest": self.digest,
            "tokenizer": self.tokenizer,
            "requests": self.requests,
            "replayed": self.replayed,
            "malformed": self.malformed,
            "input_len": round(self.input_len, 1),
            "output_len": round(self.output_len, 1),
            "overlap": round(self.overlap, 4),
            "bleu4": round(self.bleu4, 4),
            "repetition": round(self.repetition, 4),
            "workload_shift": round(self.workload_shift(), 4),
        }
        if self.contexts and max(self.contexts) > min(self.contexts):
            out["context_tenths"] = [round(x) for x in self.contexts]
        for method in REPLAYED:
            rates = self.position_rates(method)
            if rates is None:
                continue
            out[method] = {
                "position_rates": [round(r, 4) for r in rates],
                "acceptance_length": [round(self.acceptance_length(method, k) or 1.0, 4) for k in range(1, self.k_max + 1)],  # k = 1..k_max
            }
        if self.malformed_lines:
            out["malformed_lines"] = list(self.malformed_lines)
        return out


def _replayer(k_max: int, nmin: int, nmax: int):
    try:
        from specplug.traffic.fastreplay import FastReplay
    except ImportError:  # numpy is an optional dependency: the plain replay gives the same figures, slower
        return PyReplay(k_max, nmin, nmax)
    return FastReplay(k_max, nmin, nmax)


def load_traffic(
    path: str | Path,
    model: Model,
    *,
    k_max: int = 8,
    prompt_lookup_min: int = 2,
    prompt_lookup_max: int = 4,
    progress: ReadProgress | None = None,
    field_map: str | dict[str, str] | None = None,
) -> TrafficProfile:
    """Read a JSONL traffic log (streamed), tokenize it for ``model`` and replay n-gram and suffix decoding
    over every usable request.

    Malformed lines are counted and listed (the first 20); only a file with no usable line is an error.
    """
    from concurrent.futures import ThreadPoolExecutor

    from specplug.traffic.tokens import choose

    p = user_path(path)
    if not p.is_file():
        raise SpecplugError(f"Traffic file {p} does not exist.", "Pass a JSONL file of logged requests and completions.")
    if not 1 <= k_max <= 64:
        raise SpecplugError(f"k_max={k_max} is outside 1..64.")
    if not 1 <= prompt_lookup_min <= prompt_lookup_max:
        raise SpecplugError(f"prompt_lookup_min={prompt_lookup_min} and prompt_lookup_max={prompt_lookup_max}: "
                            "need 1 <= min <= max.")
    fmap = parse_field_map(field_map) if field_map is not None else DEFAULT_FIELD_MAP.get()
    progress = progress if progress is not None else DEFAULT_PROGRESS.get()
    tok = choose(model)
    replay = _replayer(k_max, prompt_lookup_min, prompt_lookup_max)
    stats = ReadStats()
    sha = hashlib.sha256()
    in_tokens = out_tokens = replayed = 0
    contexts: list[float] = []
    arrivals: list[float] = []
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise SpecplugError(f"Cannot read traffic file {p}: {exc.strerror}.") from None

    def encode(batch: list) -> list[str]:
        # A text repeated within the batch (a shared prompt, a retried request) is tokenized once.
        texts = [r.prompt for r in batch] + [r.completion for r in batch]
        distinct = list(dict.fromkeys(texts))
        if len(distinct) == len(texts):
            return tok.encode_batch(texts)
        done = dict(zip(distinct, tok.encode_batch(distinct), strict=True))
        return [done[t] for t in texts]

    def run(n: int, enc: list[str]) -> None:
        nonlocal in_tokens, out_tokens, replayed
        prompts, outs = enc[:n], enc[n:]
        replayed += n
        in_tokens += sum(map(len, prompts))
        out_tokens += sum(map(len, outs))
        contexts.extend(len(a) + len(b) / 2 for a, b in zip(prompts, outs, strict=True))
        replay.add(prompts, outs)

    def hashed(fh):
        # Feeds the digest (and the progress report, a megabyte at a time) from the single pass that parses the lines.
        done = 0
        for raw in fh:
            sha.update(raw)
            done += len(raw)
            if progress is not None and done >= 1 << 20:
                progress.advance(done)
                done = 0
            yield raw
        if progress is not None:
            progress.advance(done)

    with fh, ThreadPoolExecutor(1) as worker:
        if progress is not None:
            progress.start(p.stat().st_size)
        try:
            pending = None  # (records in the batch, its tokenization under way)
            batch: list = []
            for rec in read_records(hashed(fh), stats, fmap):
                if rec.arrived is not None:
                    arrivals.append(rec.arrived)
                batch.append(rec)
                if len(batch) >= BATCH:
                    if pending is not None:
                        run(pending[0], pending[1].result())
                    pending, batch = (len(batch), worker.submit(encode, batch)), []
            if pending is not None:
                run(pending[0], pending[1].result())
            if batch:
                run(len(batch), encode(batch))
        finally:
            if progress is not None:
                progress.stop()
    if stats.records == 0:
        why = "; ".join(f"{why} ({n} line{'s' if n > 1 else ''})" for why, n in sorted(stats.reasons.items(), key=lambda kv: -kv[1])[:4])
        where = f" (lines {', '.join(map(str, stats.malformed_lines[:5]))}{', ...' if stats.malformed > 5 else ''})" if stats.malformed else ""
        raise SpecplugError(
            f"Traffic file {p}: no usable request in {stats.lines} line{'s' if stats.lines != 1 else ''}"
            + (f": {why}{where}." if why else " (it is empty)."),
            f"Traffic files are {FORMATS_HELP}.",
        )
    n = replayed
    sh = replay.shape
    tallies = {"ngram": replay.ngram, "suffix": replay.suffix}
    replay.close()  # the vectorised replay's worker thread stops now, not when it is collected
    return TrafficProfile(
        path=str(path),
        digest="sha256:" + sha.hexdigest(),
        tokenizer=tok.name,
        requests=stats.records,
        replayed=replayed,
        malformed=stats.malformed,
        malformed_lines=list(stats.malformed_lines),
        input_len=in_tokens / n,
        output_len=out_tokens / n,
        overlap=sh.overlap / sh.grams if sh.grams else 0.0,
        repetition=sh.repeated / sh.grams if sh.grams else 0.0,
        bleu4=sh.bleu_sum / sh.bleu_requests if sh.bleu_requests else 0.0,
        k_max=k_max,
        prompt_lookup_min=prompt_lookup_min,
        prompt_lookup_max=prompt_lookup_max,
        contexts=_tenths(contexts),
        **_arrival_rate(arrivals),
        tallies=tallies,
    )


def _arrival_rate(times: list[float]) -> dict[str, Any]:
    """request_rate, arrival_cv, timed and span_s from arrival times (none where fewer than two differ)."""
    if len(times) < 2 or max(times) <= min(times):
        return {"timed": len(times)}
    t = sorted(times)
    gaps = [b - a for a, b in zip(t, t[1:], strict=False)]
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    return {"request_rate": len(gaps) / (t[-1] - t[0]), "arrival_cv": sd / mean, "timed": len(t), "span_s": t[-1] - t[0]}


def _tenths(values: list[float]) -> tuple[float, ...]:
    """The value at the middle of each tenth of ``values`` sorted (fewer than ten: all of them)."""
    if len(values) <= 10:
        return tuple(sorted(values))
    v = sorted(values)
    return tuple(v[min(len(v) - 1, int((i + 0.5) * len(v) / 10))] for i in range(10))


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes, as TrafficProfile.digest has it (for locks: no tokenizing, no replay)."""
    sha = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


__all__ = ["TrafficProfile", "file_digest", "load_traffic"]
