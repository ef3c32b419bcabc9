"""TrafficProfile: the measured shape and copy-based acceptance of a logged traffic file."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specplug.catalog import Model
from specplug.errors import SpecplugError
from specplug.traffic.records import (
    DEFAULT_FIELD_MAP,
    DEFAULT_PROGRESS,
    FORMATS_HELP,
    ReadStats,
    parse_field_map,
    read_records,
)
from specplug.traffic.replay import NgramReplay, SuffixReplay, Tally

REPLAYED = ("ngram", "suffix")
BATCH = 256  # records tokenized per call: big enough for the Rust tokenizer's parallelism, small for memory
# Requests replayed in full. A larger file replays evenly spaced blocks of BATCH consecutive requests (each
# block keeps its own recent history for the suffix index), so a 100k-request log takes well under a minute;
# 10,000 requests (a few million output positions) pin per-position acceptance to about +-0.005.
MAX_REPLAY = 10_000
GRAM = 4

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
    replayed: int = 0  # requests tokenized and replayed (all of them up to MAX_REPLAY; see load_traffic)
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
            "repetition": round(self.repetition, 4),
            "workload_shift": round(self.workload_shift(), 4),
        }
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


def _shape(prompt: str, out: str) -> tuple[int, int, int]:
    """(output 4-grams, of them found in the prompt, of them repeating an earlier output 4-gram)."""
    n = len(out) - GRAM + 1
    if n <= 0:
        return 0, 0, 0
    grams = [out[i:i + GRAM] for i in range(n)]
    repeated = n - len(set(grams))
    if len(prompt) < GRAM:
        return n, 0, repeated
    pset = {prompt[i:i + GRAM] for i in range(len(prompt) - GRAM + 1)}
    return n, sum(map(pset.__contains__, grams)), repeated


def _progress():
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(
        TextColumn("replaying traffic"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
        console=Console(stderr=True), transient=True,
    )


def load_traffic(
    path: str | Path,
    model: Model,
    *,
    k_max: int = 8,
    prompt_lookup_min: int = 2,
    prompt_lookup_max: int = 4,
    progress: bool = False,
    field_map: str | dict[str, str] | None = None,
    max_replay: int | None = MAX_REPLAY,
) -> TrafficProfile:
    """Read a JSONL traffic log (streamed), tokenize it for ``model`` and replay n-gram and suffix decoding.

    Malformed lines are counted and listed (the first 20); only a file with no usable line is an error. Every
    line is parsed and counted; at most ``max_replay`` requests (None: all) are tokenized and replayed, in
    evenly spaced blocks, and the lengths, overlap and acceptance are theirs.
    """
    from specplug.traffic.tokens import choose

    p = Path(path).expanduser()
    if not p.is_file():
        raise SpecplugError(f"Traffic file {p} does not exist.", "Pass a JSONL file of logged requests and completions.")
    if not 1 <= k_max <= 64:
        raise SpecplugError(f"k_max={k_max} is outside 1..64.")
    if not 1 <= prompt_lookup_min <= prompt_lookup_max:
        raise SpecplugError(f"prompt_lookup_min={prompt_lookup_min} and prompt_lookup_max={prompt_lookup_max}: "
                            "need 1 <= min <= max.")
    fmap = parse_field_map(field_map) if field_map is not None else DEFAULT_FIELD_MAP.get()
    progress = progress or DEFAULT_PROGRESS.get()
    tok = choose(model)
    ngram = NgramReplay(k_max, prompt_lookup_min, prompt_lookup_max)
    suffix = SuffixReplay(k_max)
    stats = ReadStats()
    sha = hashlib.sha256()
    in_tokens = out_tokens = grams = overlap = repeated = replayed = 0
    stride = 1
    try:
        if max_replay:
            with p.open("rb") as fh:  # a newline count is cheap next to parsing: it fixes the sampling stride
                lines_total = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 22), b""))
            stride = max(1, -(-lines_total // max_replay))
        fh = p.open("rb")
    except OSError as exc:
        raise SpecplugError(f"Cannot read traffic file {p}: {exc.strerror}.") from None

    def run(batch: list) -> None:
        nonlocal in_tokens, out_tokens, grams, overlap, repeated, replayed
        replayed += len(batch)
        enc = tok.encode_batch([r.prompt for r in batch] + [r.completion for r in batch])
        n = len(batch)
        for prompt, out in zip(enc[:n], enc[n:], strict=True):
            in_tokens += len(prompt)
            out_tokens += len(out)
            g, o, r = _shape(prompt, out)
            grams, overlap, repeated = grams + g, overlap + o, repeated + r
            ngram.add(prompt, out)
            suffix.add(prompt, out)

    def hashed(fh, bar):
        # Feeds the digest (and the progress bar) from the same single pass that parses the lines.
        task = bar.add_task("traffic", total=p.stat().st_size) if bar is not None else None
        done = 0
        for raw in fh:
            sha.update(raw)
            done += len(raw)
            if bar is not None and done >= 1 << 20:
                bar.advance(task, done)
                done = 0
            yield raw

    with fh:
        bar = _progress() if progress else None
        if bar is not None:
            bar.start()
        try:
            lines = hashed(fh, bar)
            batch: list = []
            block = 0
            for rec in read_records(lines, stats, fmap):
                if block % stride == 0:
                    batch.append(rec)
                    if len(batch) >= BATCH:
                        run(batch)
                        batch = []
                if stats.records % BATCH == 0:
                    block += 1
            if batch:
                run(batch)
        finally:
            if bar is not None:
                bar.stop()
    if stats.records == 0:
        why = "; ".join(f"{why} ({n} line{'s' if n > 1 else ''})" for why, n in sorted(stats.reasons.items(), key=lambda kv: -kv[1])[:4])
        where = f" (lines {', '.join(map(str, stats.malformed_lines[:5]))}{', ...' if stats.malformed > 5 else ''})" if stats.malformed else ""
        raise SpecplugError(
            f"Traffic file {p}: no usable request in {stats.lines} line{'s' if stats.lines != 1 else ''}"
            + (f": {why}{where}." if why else " (it is empty)."),
            f"Traffic files are {FORMATS_HELP}.",
        )
    n = replayed
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
        overlap=overlap / grams if grams else 0.0,
        repetition=repeated / grams if grams else 0.0,
        k_max=k_max,
        prompt_lookup_min=prompt_lookup_min,
        prompt_lookup_max=prompt_lookup_max,
        tallies={"ngram": ngram.tally, "suffix": suffix.tally},
    )


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes, as TrafficProfile.digest has it (for locks: no tokenizing, no replay)."""
    sha = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


__all__ = ["TrafficProfile", "file_digest", "load_traffic"]
