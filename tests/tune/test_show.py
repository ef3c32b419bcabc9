"""The printed report: speedups with their bounds, the decision and schedule, failures with their log."""

from __future__ import annotations

from rich.console import Console

from specplug.commands._tune_tables import tune_table
from tests.tune.test_evidence import _report


def test_report_reads_as_a_decision_with_its_evidence():
    rep = _report()
    rep.trials[2].error = "The server exited with code 1 before it was healthy."
    rep.trials[2].log_tail = ["ValueError: unknown drafter format"]
    con = Console(width=220, record=True, color_system=None)
    for r in tune_table(rep):
        con.print(r)
    text = con.export_text()
    assert "1.47x (1.44-1.50)" in text and "2/2 identical" in text
    assert "Decision: ngram, k=3" in text and "Schedule: batch 1-3: k=3, batch 4-...: k=0" in text
    assert "eagle3-k3 failed: The server exited" in text and "| ValueError: unknown drafter format" in text


def test_an_error_quoting_markup_is_printed_as_written():
    rep = _report()
    rep.trials[2].error = "HTTP 404 from [/v1/completions]: [bold]not found[/]"
    con = Console(width=220, record=True, color_system=None)
    for r in tune_table(rep):
        con.print(r)  # rich.errors.MarkupError before the text was escaped
    text = con.export_text()
    assert "failed: HTTP 404 from [/v1/completions]" in text and "[bold]not found[/]" in text
