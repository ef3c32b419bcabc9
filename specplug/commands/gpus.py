"""specplug gpus: the GPU catalog."""

from __future__ import annotations

import click

from specplug.commands._output import output_option
from specplug.output import emit, table


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:g}"


@click.command()
@click.argument("name", required=False)
@output_option
def gpus(name: str | None, output: str) -> None:
    """List the GPU catalog, or show one GPU by NAME or alias (e.g. h100, a100-80gb, l4)."""
    from specplug.catalog import get_gpu
    from specplug.catalog import gpus as all_gpus
    from specplug.serialize import to_plain

    if name:
        g = get_gpu(name)
        emit(g, output, lambda g: table(g.name, ["field", "value"], [(k, _fmt(v) if isinstance(v, float) else v) for k, v in to_plain(g).items()]))
        return
    items = list(all_gpus())
    rows = [
        (
            g.name,
            ", ".join(g.aliases),
            _fmt(g.memory_gb),
            _fmt(g.memory_bw_gbs),
            _fmt(g.tensor_tflops()),
            _fmt(g.fp8_tflops),
            _link(g.interconnect),
            "planning only" if g.planning_only else "",
        )
        for g in items
    ]
    cols = ["name", "aliases", "mem GiB", "BW GB/s", "bf16 TFLOPS", "fp8 TFLOPS", "interconnect", "note"]
    # A narrow terminal drops the aliases first (every lookup accepts the name too), then the interconnect.
    emit(items, output, lambda _: table(f"{len(items)} GPUs", cols, rows, optional=["aliases", "interconnect"]))


def _link(interconnect: str | None) -> str:
    """The interconnect's kind only ('NVLink 4'); its bandwidth and notes are in 'specplug gpus NAME'."""
    return interconnect.split(":")[0].split(";")[0].strip() if interconnect else ""
