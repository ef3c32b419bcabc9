"""The progress bars the commands draw on stderr while the library works: a bench's requests, a tune's trials and
a traffic file's bytes. The library reports through plain callbacks (``tick``/``on_total``,
:class:`specplug.tune.session.TrialReporter`, :class:`specplug.traffic.records.ReadProgress`); these draw them."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specplug.output import console

if TYPE_CHECKING:
    from specplug.bench.record import BenchRecord
    from specplug.tune.settings import TuneSettings
    from specplug.tune.state import TrialResult
    from specplug.tune.trials import Trial, TrialPlan


def measure_with_bar(*, out_dir: str | Path | None, **run: Any) -> BenchRecord:
    """:func:`specplug.bench.session.measure` under a progress bar, then the files it wrote; returns the record."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from specplug.bench.session import measure

    con = console(stderr=True)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=con, transient=True, disable=not con.is_terminal,
    )
    task = progress.add_task("bench", total=None)

    def tick(role: str, conc: int, done: int) -> None:
        progress.update(task, advance=1, description=f"{role} c={conc}")

    with progress:
        record, paths = measure(out_dir=out_dir, tick=tick, on_total=lambda n: progress.update(task, total=n), **run)
    if paths:
        con.print("Wrote " + ", ".join(str(p) for p in paths))
    return record


class TrialBar:
    """A tune's :class:`~specplug.tune.session.TrialReporter` on a terminal: trial, concurrency, requests and the
    time the plan says is left, with each trial's outcome printed above the bar (a failure in red). Use it as a
    context manager around ``run_trials``."""

    def __init__(self, plan: TrialPlan, settings: TuneSettings, requests_at: dict[Any, int], done: set[str]) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from specplug.tune.settings import fmt_duration

        self.con = console(stderr=True)
        self.per_trial = sum(requests_at.values()) * settings.repeats
        todo = [t for t in plan.trials if t.id not in done]
        self.left = {t.id: t.estimate_s for t in todo}
        self.bar = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("about {task.fields[left]} left"), console=self.con, transient=True,
            disable=not self.con.is_terminal,
        )
        self.task = self.bar.add_task("tune", total=max(self.per_trial * len(todo), 1),
                                      left=fmt_duration(sum(self.left.values())))
        self.trial_started = time.monotonic()
        self.current: str | None = None

    def __enter__(self) -> TrialBar:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(*exc)

    def start(self, trial: Trial, index: int, count: int) -> None:
        self.current = trial.id
        self.trial_started = time.monotonic()
        self.bar.update(self.task, description=f"[{index}/{count}] {trial.id}: starting", left=self._left())

    def tick(self, trial_id: str, level: Any, done: int) -> None:
        where = f"{level}" if not isinstance(level, int) else f"c={level}"
        self.bar.update(self.task, advance=1, description=f"{trial_id} {where}", left=self._left())

    def finish(self, trial: Trial, result: TrialResult, requests_done: int) -> None:
        from rich.text import Text

        from specplug.tune.session import outcome

        self.left.pop(trial.id, None)
        self.bar.update(self.task, advance=max(self.per_trial - requests_done, 0), left=self._left())
        first, *rest = outcome(trial, result)
        head = Text(first)  # an error may quote a server's body ("[/v1/...]"): printed as written, never as markup
        if result.status == "failed":
            head.stylize("red", 0, len(f"{trial.id} failed"))
        self.con.print(head)
        for line in rest:
            self.note(line)

    def note(self, text: str) -> None:
        self.con.print(text, markup=False, highlight=False)

    def _left(self) -> str:
        from specplug.tune.settings import fmt_duration

        spent = time.monotonic() - self.trial_started if self.current else 0.0
        cur = self.left.get(self.current or "", 0.0)
        return fmt_duration(sum(self.left.values()) - min(spent, cur))


class TrafficBar:
    """A :class:`~specplug.traffic.records.ReadProgress` drawn as 'replaying traffic' with bytes and time left; one
    bar per file read."""

    def __init__(self, con: Any = None) -> None:
        self.con = con
        self.bar: Any = None
        self.task: Any = None

    def start(self, total_bytes: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(
            TextColumn("replaying traffic"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
            console=self.con or Console(stderr=True), transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("traffic", total=total_bytes)

    def advance(self, nbytes: int) -> None:
        self.bar.advance(self.task, nbytes)

    def stop(self) -> None:
        self.bar.stop()


def traffic_bar() -> TrafficBar | None:
    """A traffic bar when stderr is a terminal, else none (a log or a pipe gets no bar)."""
    return TrafficBar() if sys.stderr.isatty() else None
