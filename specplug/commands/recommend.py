"""specplug recommend: decide whether, how and when to speculate for a model, hardware and traffic."""

from __future__ import annotations

from typing import Any

import click

from specplug.commands._common import plan_flags
from specplug.commands._output import output_option
from specplug.commands.choices import StackChoice
from specplug.commands.loadplot import plot_option
from specplug.output import emit


@click.command()
@plan_flags
@click.option("--stack", "-s", type=StackChoice(), default=None, help="Serving stack (default: best installed, else vllm).")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), default=None, help="Policy overrides (YAML).")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None, help="Calibration file from 'specplug calibrate'.")
@click.option("--traffic", type=click.Path(dir_okay=False), default=None,
              help="JSONL log of requests and completions: measured shape and acceptance replace the workload's prior.")
@click.option("--traffic-map", default=None, metavar="KEY=PATH,...",
              help="Where the prompt and completion sit in each traffic line, e.g. prompt=input.text,completion=output.")
@click.option("--discover/--no-discover", default=None,
              help="Consider drafters found outside the catalog (local Hugging Face cache; the Hub unless HF_HUB_OFFLINE). "
                   "Default: for targets the catalog does not hold.")
@plot_option
@output_option
def recommend(config_path: str | None, policy_path: str | None, calibration: str | None, traffic_map: str | None,
              plot_path: str | None, output: str, discover: bool | None, **flags: Any) -> None:
    """Recommend a speculative-decoding setup: technique, drafter, k, schedule, memory and predicted speedup.

    A deployment that cannot fit in memory exits 1 with the fixes and what each would give.
    """
    from specplug.commands._common import read_config
    from specplug.commands._progress import traffic_bar
    from specplug.planning import recommend as run
    from specplug.traffic.records import using_field_map

    cfg, _ = read_config(config_path)
    # --traffic given nowhere (None): the config's workload.traffic, if any, is the planner's to read.
    with using_field_map(traffic_map, progress=traffic_bar()):
        plan = run(config=cfg, policy=policy_path, calibration=calibration, discover=discover, **flags)
    if plot_path:
        from specplug.commands.loadplot import write_load_plot

        write_load_plot(plan.load, plot_path)
    from specplug.commands._plan_tables import plan_tables

    emit(plan, output, plan_tables)
