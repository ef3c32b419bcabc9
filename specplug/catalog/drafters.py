"""Published drafters: draft models (PARD included), EAGLE/EAGLE-3 and Medusa heads, MLP speculators, built-in MTP.

Each row of data/drafters.csv names the checkpoint format, its vocabularies, the stacks (and first versions)
shown loading it, and a published acceptance length with the conditions it was measured under.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from specplug.catalog._csv import integer, num, read_rows

# drafters.csv spells the built-in MTP module 'mtp-builtin'; the rest of specplug says 'mtp'.
_METHOD_NAMES = {"mtp-builtin": "mtp"}


# Names the `stacks` column may use: serving stacks plus the research code some heads only run in.
STACK_NAMES = frozenset(
    {"vllm", "sglang", "trtllm", "llamacpp", "tgi", "transformers", "exllamav2", "eagle-repo", "medusa-repo", "sequoia"}
)

_STACK_ITEM = re.compile(r"^(?P<name>[a-z0-9][a-z0-9_-]*)(?:>=(?P<version>[A-Za-z0-9.+-]+))?$")


# A plain dataclass like Model and GPU, not pydantic: rows are trusted data and the CLI imports this at start-up.
@dataclass(frozen=True, kw_only=True)
class Drafter:
    target_hf_id: str
    method: str  # draft_model | eagle | eagle3 | medusa | mlp_speculator | mtp
    drafter_hf_id: str
    params_b: float | None = None
    heads_or_layers: str = ""
    # Free-text stack list kept for older readers (the planner matches a stack name in it).
    stacks_known_to_load_it: str = ""
    source: str = ""
    confirmed: str = ""  # yes | partial | no (no = placeholder, kept out of drafters_for by default)
    notes: str = ""
    format: str = ""  # eagle1 | eagle3 | speculators | specforge | medusa | mlp_speculator | mtp | pard | draft_model
    vocab_size: int | None = None  # the drafter's output vocabulary (a head's is its target's)
    draft_vocab_size: int | None = None  # EAGLE-3's reduced draft vocabulary, when it has one
    stacks: dict[str, str | None] = field(default_factory=dict)  # stack -> first version known to load it
    acceptance_length: float | None = None  # published mean tokens per target pass (bonus token included)
    acceptance_basis: str = ""  # dataset, k / tree, temperature and source of acceptance_length
    # The checkpoint whose hidden states the head was trained on, when a source pairs it with another target
    # (same architecture and tokenizer): its acceptance on this target is unmeasured and below its own.
    trained_for: str = ""
    # Where discovery found a drafter that is not a catalog row (the local cache, the Hub); empty for catalog rows.
    found_in: str = ""

    # A catalog row is identified by what it drafts for and with; the stacks dict alone would make it unhashable.
    def __hash__(self) -> int:
        return hash((self.target_hf_id, self.method, self.drafter_hf_id))

    def loads_in(self, stack: str, version: str | None = None) -> bool | None:
        """Whether ``stack`` (at ``version``, if given) is known to load this drafter; None when unknown.

        The catalog only lists stacks shown loading a checkpoint, so an unlisted stack is unknown, not False;
        a listed stack is False only for a version older than the first one recorded."""
        key = stack.strip().lower()
        if key not in self.stacks:
            return None
        first = self.stacks[key]
        if version is None:
            return True
        if first is None:
            return None
        return _version_key(version) >= _version_key(first)

    @property
    def cross_target(self) -> bool:
        """Trained on another checkpoint than the one it is listed for (see ``trained_for``)."""
        return bool(self.trained_for) and self.trained_for.lower() != self.target_hf_id.lower()


def parse_stacks(text: str) -> dict[str, str | None]:
    """'vllm>=0.10.2;sglang;trtllm>=1.0' -> {'vllm': '0.10.2', 'sglang': None, 'trtllm': '1.0'}."""
    out: dict[str, str | None] = {}
    for item in (text or "").split(";"):
        item = item.strip()
        if not item:
            continue
        m = _STACK_ITEM.match(item)
        if m is None:
            raise ValueError(f"bad stacks item {item!r} (want NAME or NAME>=VERSION)")
        out[m["name"]] = m["version"]
    return out


def _version_key(version: str) -> tuple[tuple[int, ...], int, int]:
    """Comparable key: release numbers, then pre-release (rc/a/b/dev) before the release and post after it.

    llama.cpp builds ('b9606') compare by their build number."""
    v = version.strip().lower().lstrip("v")
    m = re.match(r"^b?(\d+(?:\.\d+)*)(?:[.-]?(rc|a|b|alpha|beta|dev|post)\.?(\d*))?", v)
    if m is None:
        return ((), 0, 0)
    release = tuple(int(p) for p in m[1].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]  # 1.0 == 1.0.0
    tag, n = m[2], int(m[3] or 0)
    phase = 0 if tag is None else (1 if tag == "post" else -1)
    return (release, phase, n)


def _row_to_drafter(r: dict[str, str]) -> Drafter:
    return Drafter(
        target_hf_id=r["target_hf_id"],
        method=_METHOD_NAMES.get(r["method"], r["method"]),
        drafter_hf_id=r["drafter_hf_id"],
        params_b=num(r["drafter_params_b"]),
        heads_or_layers=r["num_heads_or_layers"],
        stacks_known_to_load_it=r["stacks_known_to_load_it"],
        source=r["source"],
        confirmed=r["confirmed"],
        notes=r["notes"],
        format=(r.get("format") or "").strip(),
        vocab_size=integer(r.get("vocab_size")),
        draft_vocab_size=integer(r.get("draft_vocab_size")),
        stacks=parse_stacks(r.get("stacks") or ""),
        acceptance_length=num(r.get("acceptance_length")),
        acceptance_basis=(r.get("acceptance_basis") or "").strip(),
        trained_for=(r.get("trained_for") or "").strip(),
    )


@cache
def drafters() -> tuple[Drafter, ...]:
    """Every catalog row, placeholders (confirmed 'no') included."""
    return tuple(_row_to_drafter(r) for r in read_rows("drafters.csv"))


@cache
def _by_target() -> dict[str, tuple[Drafter, ...]]:
    idx: dict[str, list[Drafter]] = {}
    for d in drafters():
        idx.setdefault(d.target_hf_id.lower(), []).append(d)
    return {k: tuple(v) for k, v in idx.items()}


def drafters_for(target_hf_id: str, method: str | None = None, *, include_unconfirmed: bool = False) -> list[Drafter]:
    """Known drafters for a target model (by HF id, case-insensitive), optionally of one method.

    Placeholders (confirmed 'no': a repository whose existence was not confirmed) are left out unless
    ``include_unconfirmed``, so planners never pick a checkpoint that may not exist."""
    return [
        d
        for d in _by_target().get(target_hf_id.lower(), ())
        if (method is None or d.method == method) and (include_unconfirmed or d.confirmed != "no")
    ]


def find_drafter(drafter_id: str, target: str | None = None) -> Drafter | None:
    """A catalog drafter by its own HF id, if published: its row for ``target`` where it has one (a head can be
    listed for a sibling checkpoint too), then confirmed rows first."""
    key = drafter_id.lower()
    hits = [d for d in drafters() if d.drafter_hf_id.lower() == key]
    if target:
        hits = sorted(hits, key=lambda d: d.target_hf_id.lower() != target.lower())
    return next((d for d in hits if d.confirmed != "no"), hits[0] if hits else None)
