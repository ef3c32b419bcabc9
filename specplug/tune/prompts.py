"""The prompts a tune replays: the user's traffic file (its requests, as they were sent) or a built-in workload."""

from __future__ import annotations

from pathlib import Path

from specplug.bench.prompts import Prompt, builtin_workloads, load_workload
from specplug.errors import SpecplugError

# Requests taken from a traffic file: enough for the largest level's streams, few enough to start quickly.
MAX_TRAFFIC_PROMPTS = 256


def from_traffic(path: str | Path, field_map: str | None = None, limit: int = MAX_TRAFFIC_PROMPTS) -> list[Prompt]:
    """Each logged request's prompt, sent to /v1/completions as plain text (its logged length caps max_tokens)."""
    from specplug.traffic.records import ReadStats, parse_field_map, read_records

    p = Path(path)
    stats = ReadStats()
    out: list[Prompt] = []
    try:
        with p.open("rb") as fh:
            for rec in read_records(fh, stats, parse_field_map(field_map)):
                if rec.prompt:
                    # About four characters a token: the logged answer's length bounds what this request asks for.
                    cap = max(16, len(rec.completion) // 4) if rec.completion else None
                    out.append(Prompt(id=f"{p.stem}-{len(out) + 1}", prompt=rec.prompt, max_tokens=cap))
                if len(out) >= limit:
                    break
    except FileNotFoundError:
        raise SpecplugError(f"Traffic file {p} does not exist.", "Pass a JSONL log of requests, or --workload NAME.") from None
    except OSError as exc:
        raise SpecplugError(f"Cannot read traffic file {p}: {exc.strerror}.") from None
    if not out:
        raise SpecplugError(
            f"{p} holds no usable requests ({stats.malformed} malformed line(s) of {stats.lines}).",
            "Each line needs a prompt (or messages) and its completion; --traffic-map says where they sit.",
        )
    return out


def for_tune(traffic: str | None, workload: str | None, config_workload: str, field_map: str | None = None) -> tuple[list[Prompt], str]:
    """The prompt set and how to name it: a traffic file wins, then --workload, then the config's workload
    type when a built-in set of that name exists, else chat."""
    if traffic:
        return from_traffic(traffic, field_map), f"traffic {Path(traffic).name}"
    name = workload or (config_workload if config_workload in builtin_workloads() else "chat")
    if workload is None and config_workload != name:
        return load_workload(name), f"workload {name} (no built-in prompts for '{config_workload}')"
    return load_workload(name), f"workload {name}"
