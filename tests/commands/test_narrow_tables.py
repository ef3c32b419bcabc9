"""Every table readable at 80 columns (COLUMNS=80, as in a narrow terminal or piped): no line wider than the
terminal, no boxed cell wrapped past two lines, and rows too wide for any box printed as prose at least half the
width wide. The layouts are recorded as each table chooses one while it prints."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from specplug.output import MAX_CELL_LINES, FitTable

COMMANDS = [
    ["gpus"],
    ["gpus", "h100"],
    ["models", "list"],
    ["models", "search", "llama"],
    ["models", "show", "llama-3.1-70b"],
    ["models", "show", "qwen3-8b"],
    ["recommend", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "4", "--batch-size", "1", "--workload", "chat"],
    ["recommend", "--model", "deepseek-v3", "--gpu", "h200", "--num-gpus", "8"],
    ["recommend", "--model", "llama-3.1-70b", "--gpu", "h100", "--num-gpus", "2", "--quantization", "fp8",
     "--kv-cache-dtype", "fp8"],
    ["estimate", "--model", "vicuna-7b", "--method", "eagle", "--gpu", "a100", "--batch-size", "1"],
    ["stacks"],
    ["stacks", "vllm"],
    ["probe"],
    ["policy", "show"],
]


@pytest.fixture
def layouts(monkeypatch):
    seen = []
    choose = FitTable.layout

    def record(self, console, width, cols=None):
        lay = choose(self, console, width, cols)
        seen.append((self.title, width, lay))
        return lay

    monkeypatch.setattr(FitTable, "layout", record)
    return seen


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_tables_stay_readable_at_80_columns(run_cli, monkeypatch, layouts, args):
    monkeypatch.setenv("COLUMNS", "80")
    r = run_cli(*args)
    assert r.exit_code == 0, r.stderr
    wide = [ln for ln in r.stdout.splitlines() if cell_len(ln) > 80]
    assert not wide, wide[:3]
    if args[0] != "probe":  # without a GPU, probe prints a sentence, not a table
        assert layouts
    for title, width, lay in layouts:
        assert width == 80
        if lay.kind == "table":
            assert lay.max_lines <= MAX_CELL_LINES, title
        else:
            assert lay.widths[1] >= 40, title  # values wrap as prose at least half the width wide
