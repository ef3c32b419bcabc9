"""--plot: both arms' TPOT, TTFT and throughput against the request rate, drawn from a plan's or an estimate's
``load`` object with matplotlib (the ``[bench]`` extra)."""

from __future__ import annotations

import io
from typing import Any

import click

from specplug.errors import SpecplugError
from specplug.plan import LoadPrediction

plot_option = click.option(
    "--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
    help="With --request-rate: write a PNG of both arms' TPOT, TTFT and throughput against the request rate ([bench] extra).",
)


def write_load_plot(load: LoadPrediction | None, path: str) -> None:
    """Draw ``load``'s sweep to ``path`` (PNG, written atomically)."""
    if load is None:
        raise SpecplugError("--plot draws the load prediction, and there is none without a request rate.",
                            "Add --request-rate R (or workload.request_rate in specplug.yaml).")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SpecplugError("--plot needs matplotlib.", "pip install 'specplug[bench]'") from None
    from specplug.fileio import write_atomic_bytes

    rates = [p.request_rate for p in load.sweep]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels: list[tuple[str, str, str]] = [("TPOT p50 (ms)", "baseline_tpot_ms_p50", "speculative_tpot_ms_p50"),
                                          ("TTFT p50 (ms)", "baseline_ttft_ms_p50", "speculative_ttft_ms_p50"),
                                          ("output tokens/s", "baseline_output_tokens_per_s", "speculative_output_tokens_per_s")]
    for ax, (title, base_key, spec_key) in zip(axes, panels, strict=True):
        ax.plot(rates, [_nan(getattr(p, base_key)) for p in load.sweep], label="no speculation")
        ax.plot(rates, [_nan(getattr(p, spec_key)) for p in load.sweep], label="speculation")
        _marks(ax, load)
        ax.set_title(title)
        ax.set_xlabel("requests/s")
    axes[0].legend()
    fig.suptitle(f"at {load.request_rate:g} requests/s, capacity {load.capacity_requests} requests (model: continuous batching)")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_atomic_bytes(path, buf.getvalue())


def _nan(x: float | None) -> float:
    return float("nan") if x is None else x


def _marks(ax: Any, load: LoadPrediction) -> None:
    ax.axvline(load.request_rate, color="grey", linestyle=":", linewidth=1)
    if load.crossover_request_rate:
        ax.axvline(load.crossover_request_rate, color="red", linestyle="--", linewidth=1)
