"""Writing the decision into specplug.yaml in place: only the top-level keys tune sets are replaced (or
added at the end); every other line, comments and key order included, stays as the user wrote it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specplug.errors import ConfigError

TUNE_COMMENT = "# Set by 'specplug tune'"


def _scalar(value: Any) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1000, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _lines(value: dict[str, Any], indent: str) -> list[str]:
    """Block mappings, one key a line; list items (schedule entries) as one flow mapping each, as people write them."""
    out = []
    for k, v in value.items():
        if isinstance(v, dict) and v:
            out += [f"{indent}{k}:", *_lines(v, indent + "  ")]
        elif isinstance(v, list) and v:
            out += [f"{indent}{k}:", *(f"{indent}- {_scalar(item)}" for item in v)]
        else:
            out.append(f"{indent}{k}: {_scalar(v)}")
    return out


def _block(key: str, value: Any, comment: str | None) -> str:
    text = "\n".join(_lines({key: value}, ""))
    return (f"{comment}\n" if comment else "") + text


def set_top_level(text: str, key: str, value: Any, comment: str | None = None) -> str:
    """``text`` with top-level ``key`` set to ``value`` (block style); a tune comment right above it is
    replaced, anything else kept."""
    import yaml

    root = yaml.compose(text) if text.strip() else None
    if root is not None and not isinstance(root, yaml.MappingNode):
        raise ConfigError("specplug.yaml's top level is not a mapping; tune cannot edit it.")
    new = _block(key, value, comment)
    for k, v in root.value if root is not None else []:
        if k.value != key:
            continue
        start, end = k.start_mark.index, v.end_mark.index
        # A block value's end runs on over blank lines and column-0 comments that belong to what follows.
        span = text[start:end]
        lines = span.split("\n")
        while len(lines) > 1 and (not lines[-1].strip() or lines[-1].startswith("#")):
            lines.pop()
        end = start + len("\n".join(lines))
        # Our own earlier comment directly above the key goes with it.
        line_start = text.rfind("\n", 0, start) + 1
        prev_start = text.rfind("\n", 0, max(line_start - 1, 0)) + 1 if line_start else 0
        if line_start and text[prev_start:line_start].startswith(TUNE_COMMENT):
            line_start = prev_start
        elif not comment:
            line_start = start
        return text[:line_start] + new + text[end:]
    sep = "" if not text or text.endswith("\n") else "\n"
    return text + sep + new + "\n"


def write_decision(config_path: str | Path, speculation: dict[str, Any], comment: str, calibration: str | None = None) -> str:
    """Set ``speculation:`` (and ``calibration:`` when given and not set yet), check the result still loads,
    and write it atomically. Returns the new text."""
    from specplug.config import parse_config
    from specplug.fileio import write_atomic

    p = Path(config_path)
    text = p.read_text(encoding="utf-8")
    new = set_top_level(text, "speculation", speculation, comment)
    if calibration is not None and parse_config(text, str(p)).calibration is None:
        new = set_top_level(new, "calibration", calibration)
    parse_config(new, str(p))  # never leave the user a file that no longer loads
    if new != text:
        write_atomic(p, new)
    return new
