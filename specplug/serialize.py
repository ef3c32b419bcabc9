"""Data as JSON or YAML text: pydantic models, dataclasses, paths and tuples made plain first.

No terminal here (no rich, no click): files the library writes and ``--output json|yaml`` use the same functions.
"""

from __future__ import annotations

import json
from typing import Any


def to_plain(data: Any) -> Any:
    """Turn pydantic models, dataclasses, paths and tuples into JSON-ready Python data."""
    if hasattr(data, "model_dump"):
        return data.model_dump(mode="json", exclude_none=False)
    if isinstance(data, dict):
        return {str(k): to_plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple | set):
        return [to_plain(v) for v in data]
    if hasattr(data, "__dataclass_fields__"):
        import dataclasses

        return to_plain(dataclasses.asdict(data))
    if isinstance(data, float | int | str | bool) or data is None:
        return data
    return str(data)


def dump_json(data: Any) -> str:
    """``data`` as indented JSON, keys in their order, with a final newline."""
    return json.dumps(to_plain(data), indent=2, sort_keys=False) + "\n"


def dump_yaml(data: Any) -> str:
    """``data`` as block YAML, keys in their order, unicode kept."""
    import yaml

    return yaml.safe_dump(to_plain(data), sort_keys=False, allow_unicode=True, width=100)
