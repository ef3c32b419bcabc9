"""benchmarks/accuracy.py scores data kept in the repository, says what it scored and from where, and refuses a
results file that is not there (a missing file once meant silently scoring fewer rows)."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
SHARED = ROOT.parent / "shared" / "data" / "published_results.csv"
# Kept-aside sources (benchmarks/data/published_results.md, "Kept aside"): their numbers must never enter the
# calibration set. Identifiers a row citing one of them would carry in src, loc or note.
KEPT_ASIDE = ("P-EAGLE", "EAGLE 3.1", "DSpark", "Tengyunw", "llm-d", "Rapid-MLX #2195", "mlx-vlm PR #1180",
              "tokenspeed", "InferenceX", "ROCm/ATOM PR #1881", "#22673", "#27742", "vLLM PR #53906", "SpecBundle")


def _accuracy():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import accuracy

    return accuracy


def test_the_calibration_set_is_in_the_repository():
    acc = _accuracy()
    for path in acc.DEFAULT_DATA:
        assert path.is_file() and path.resolve().is_relative_to(ROOT)
    assert (DATA / "published_results.md").is_file()  # its provenance travels with it


@pytest.mark.skipif(not SHARED.is_file(), reason="no shared data folder beside this checkout")
def test_the_in_repository_copy_is_the_shared_file():
    assert (DATA / "published_results.csv").read_bytes() == SHARED.read_bytes()


@pytest.mark.parametrize("name, least", [("published_results.csv", 1000), ("extra_results.csv", 200)])
def test_no_row_comes_from_a_kept_aside_source(name, least):
    with open(DATA / name, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) > least
    for r in rows:
        text = " ".join((r["src"], r["loc"], r["note"])).lower()
        assert not [k for k in KEPT_ASIDE if k.lower() in text], r["id"]


def test_it_prints_how_many_rows_it_scored_and_from_where(capsys):
    pytest.importorskip("scipy")
    assert _accuracy().main(["--no-loso"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("data: ") and "of 1261 rows scored from benchmarks/data/published_results.csv" in first
    assert "of 212 rows scored from benchmarks/data/extra_results.csv" in first


def test_a_missing_results_file_is_an_error_not_fewer_rows(tmp_path, capsys):
    assert _accuracy().main(["--no-loso", "--data", str(tmp_path / "nope.csv")]) == 1
    assert "no such results file" in capsys.readouterr().err
