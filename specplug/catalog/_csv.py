"""Reading the catalog CSV files shipped in specplug/catalog/data."""

from __future__ import annotations

import csv
import difflib
import io
from importlib import resources

from specplug.errors import CatalogError


def read_rows(name: str) -> list[dict[str, str]]:
    text = resources.files("specplug.catalog").joinpath("data", name).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def num(value: str | None) -> float | None:
    """Empty cells mean 'not confirmed / not applicable' and stay None."""
    if value is None or value.strip() == "":
        return None
    return float(value)


def integer(value: str | None) -> int | None:
    f = num(value)
    return None if f is None else int(f)


def aliases(value: str | None) -> list[str]:
    return [a.strip() for a in (value or "").split(";") if a.strip()]


def norm(name: str) -> str:
    """Lower-case and fold separators so 'H100 SXM', 'h100_sxm' and 'h100-sxm' meet."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def unknown(kind: str, name: str, choices: list[str], how_to_list: str) -> CatalogError:
    close = difflib.get_close_matches(norm(name), choices, n=3, cutoff=0.5)
    hint = f"Did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    return CatalogError(f"Unknown {kind} '{name}'.", f"{hint}Run '{how_to_list}' for the full list.")
