"""specplug probe: what GPUs this machine has (NVML)."""

from __future__ import annotations

import click

from specplug.commands._output import output_option
from specplug.output import emit, table


@click.command()
@output_option
def probe(output: str) -> None:
    """Read this machine's GPUs through NVML and map them to the GPU catalog.

    Without a driver or GPU it says so and exits 0; plan for a named GPU with --gpu NAME --num-gpus N.
    """
    from specplug.probe import probe as run_probe

    result = run_probe()

    def render(r):
        if not r.available:
            return f"[bold]No GPU:[/bold] {r.message}\nPlan for a named GPU with --gpu NAME --num-gpus N (see 'specplug gpus')."
        rows = [
            (
                d.index,
                d.name,
                f"{d.memory_total_gb:g}",
                "" if d.memory_free_gb is None else f"{d.memory_free_gb:g}",
                d.compute_capability or "",
                d.catalog_name or ("(not in catalog: planned from NVML)" if d.memory_bus_width_bits and d.cuda_cores else "(not in catalog)"),
                "" if d.nvlink_active_links is None else d.nvlink_active_links,
            )
            for d in r.devices
        ]
        cols = ["#", "name", "total GiB", "free GiB", "compute cap.", "catalog", "NVLink links"]
        title = f"{r.message} (driver {r.driver_version or 'unknown'})"
        return table(title, cols, rows)

    emit(result, output, render)
