"""A whole tune: plan the trials, run the ones not finished yet (reporting as they go, Ctrl-C, resume), decide, and
write the decision with its evidence (specplug.yaml, the calibration, the lock and its tune reference)."""

from __future__ import annotations

import contextlib
import datetime
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specplug.bench.prompts import Prompt
from specplug.config import Config, SpeculationSpec
from specplug.errors import SpecplugError
from specplug.plan import Plan
from specplug.tune import decide as D
from specplug.tune import state as S
from specplug.tune import trials as T
from specplug.tune.evidence import ChainPoint, TuneReport
from specplug.tune.settings import TuneSettings, fmt_duration


def requests_per_level(prompts: list[Prompt], settings: TuneSettings) -> dict[Any, int]:
    """Requests each level of one repeat sends, by level (a concurrency, or a Rate for an open-loop level)."""
    from specplug.bench.client import Endpoint
    from specplug.bench.loadgen import BenchPlan, requests_for
    from specplug.tune.runner import levels

    bp = BenchPlan(endpoint=Endpoint("http://127.0.0.1"), baseline=None, prompts=prompts, concurrency=levels(settings),
                   max_tokens=settings.max_tokens, temperature=settings.temperature, num_prompts=settings.num_prompts,
                   duration_s=settings.level_seconds, api="auto")
    return {c: len(requests_for(bp, c)) for c in levels(settings)}


def recommendation(cfg: Config, config_path: str | Path) -> Plan:
    """What recommend decides for this deployment (speculation left to the policy), for its candidates."""
    from specplug.lock import plan_fresh

    return plan_fresh(cfg.model_copy(update={"speculation": "auto"}), config_path)


def pinned_candidate(cfg: Config) -> tuple[str, str | None, int, dict[str, Any]] | None:
    """The speculation specplug.yaml pins: method, drafter, k and its other settings (kept for its trials)."""
    s = cfg.speculation
    if isinstance(s, SpeculationSpec) and s.method != "none":
        extra = {k: v for k, v in s.model_dump(mode="json", include=set(T.PINNED_KEYS)).items() if v is not None}
        return s.method, s.drafter, s.num_speculative_tokens or 0, extra
    return None


def estimator(stack: str, settings: TuneSettings, requests_at: dict[Any, int], st: S.TuneState) -> T.Estimator:
    """Measured seconds where trials have run here, the prior elsewhere."""
    est = T.prior_estimator(stack, settings, requests_at)
    done = [r for r in st.results.values() if r.status == "done"]
    if not done:
        return est
    est.launch_s = sum(r.launch_s or 0.0 for r in done) / len(done)
    for c in settings.concurrency:
        walls = [x.wall_s for r in done for x in r.runs if x.concurrency == c and x.request_rate is None]
        if walls:
            est.level_s[c] = sum(walls) / len(walls)
    for rate in settings.request_rates:
        walls = [x.wall_s for r in done for x in r.runs if x.request_rate == rate]
        if walls:
            est.rate_s[rate] = sum(walls) / len(walls)
    rest = [(r.wall_s or 0.0) - (r.launch_s or 0.0) - sum(x.wall_s for x in r.runs) for r in done]
    est.check_s = max(sum(rest) / len(rest), 0.0)
    est.basis = "measured"
    return est


@dataclass(frozen=True)
class Prepared:
    """A tune ready to run: the recommendation, the trials with their estimates, and what ``out_dir`` kept."""

    rec: Plan
    plan: T.TrialPlan
    state: S.TuneState
    requests_at: dict[Any, int]  # requests per level of one repeat
    done: set[str]  # trials finished in an earlier run, kept


def prepare(cfg: Config, config_path: Path, settings: TuneSettings, prompts: list[Prompt], out_dir: Path,
            restart: bool = False) -> Prepared:
    """Plan the trials for ``cfg``: recommend's candidates (or the pinned speculation), the state kept in
    ``out_dir`` (dropped with ``restart``), and each trial's time, measured where earlier trials ran."""
    rec = recommendation(cfg, config_path)
    cands = T.candidates_from(rec, settings, pinned_candidate(cfg))
    if not cands:
        raise SpecplugError(
            f"The recommendation leaves no technique to try for {rec.model.name} on {rec.stack.name}.",
            "Name one with --method (and --drafter for a draft model); 'specplug recommend' lists why each was ruled out.",
        )
    st = S.load(out_dir, settings, restart)
    requests_at = requests_per_level(prompts, settings)
    est = estimator(rec.stack.name, settings, requests_at, st)
    done = {k for k, r in st.results.items() if r.status == "done"}
    return Prepared(rec, T.build(cands, settings, est, settings.budget_s, done), st, requests_at, done)


def schedule_mode(rec: Plan) -> Callable[[str], D.Mode]:
    """How the planned stack, at the planned version, follows a per-batch schedule for each method."""
    from specplug.stackcaps import declared

    try:
        caps = declared(rec.stack.name, rec.stack.version)
    except SpecplugError:
        return lambda _m: "fixed"  # a stack whose adapter cannot load: assume the least it could do

    def mode(method: str) -> D.Mode:
        if caps.schedules_for(method):
            return "schedule"
        return "cutoff" if "cutoff" in caps.controls else "fixed"

    return mode


class TrialReporter(Protocol):
    """What :func:`run_trials` reports as it goes: each trial starting, each request done, each trial's outcome
    and notes. :class:`PlainReporter` prints plain lines; the CLI draws a progress bar and prints in colour."""

    def start(self, trial: T.Trial, index: int, count: int) -> None: ...

    def tick(self, trial_id: str, level: Any, done: int) -> None: ...

    def finish(self, trial: T.Trial, result: S.TrialResult, requests_done: int) -> None: ...

    def note(self, text: str) -> None: ...


def outcome(trial: T.Trial, result: S.TrialResult) -> list[str]:
    """How a finished trial went, in lines: done and how long it took, or why it failed and the end of its log."""
    if result.status != "failed":
        return [f"{trial.id} done in {fmt_duration(result.wall_s or 0)}"]
    lines = [f"{trial.id} failed: {result.error or ''}", *(f"  | {line}" for line in result.log_tail[-8:])]
    return lines + ([f"  full log: {result.log_file}"] if result.log_file else [])


class PlainReporter:
    """Outcomes and notes as plain lines on stderr, no progress bar: what a script calling run_trials sees."""

    def start(self, trial: T.Trial, index: int, count: int) -> None:
        pass

    def tick(self, trial_id: str, level: Any, done: int) -> None:
        pass

    def finish(self, trial: T.Trial, result: S.TrialResult, requests_done: int) -> None:
        for line in outcome(trial, result):
            self.note(line)

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)


def _past_budget(plan: T.TrialPlan, trial: T.Trial, spent_s: float) -> bool:
    """Whether starting ``trial`` now would end past the budget (the deciding trials always run: the plan was
    refused up front if their estimate did not fit)."""
    if plan.budget_s is None or trial.id in {t.id for t in plan.trials[:T.DECIDING]}:
        return False
    return spent_s + trial.estimate_s > plan.budget_s


def _stop_at_budget(plan: T.TrialPlan, left: list[T.Trial], spent_s: float, reporter: TrialReporter) -> None:
    """Leave the trials not started out of the plan, as if the budget had dropped them up front, and say so."""
    ids = {t.id for t in left}
    plan.trials = [t for t in plan.trials if t.id not in ids]
    plan.dropped = [*plan.dropped, *left]
    note = (f"--budget {fmt_duration(plan.budget_s or 0)}: stopped after {fmt_duration(spent_s)}, before "
            f"{len(left)} trial(s) that would have ended past it: {', '.join(t.id for t in left)}.")
    plan.notes.append(note)
    reporter.note(note)


def run_trials(
    cfg: Config, config_path: Path, plan: T.TrialPlan, settings: TuneSettings, prompts: list[Prompt],
    st: S.TuneState, out_dir: Path, requests_at: dict[Any, int], clock: Callable[[], float] = time.monotonic,
    reporter: TrialReporter | None = None,
) -> bool:
    """Run every planned trial not finished yet, saving the state after each. Returns False on Ctrl-C.

    With --budget, a trial whose estimate would end past the budget is not started (``clock`` measures the time
    spent), so a tune overruns its budget by at most what one trial takes beyond its estimate. ``reporter`` hears
    how it goes (default: :class:`PlainReporter`)."""
    from specplug.tune.runner import free_port, run_trial, trial_plan

    rep = reporter if reporter is not None else PlainReporter()
    # A trial that failed before is tried again: what stopped it (a path, a port, memory) may be fixed now.
    finished = {k for k, r in st.results.items() if r.status == "done"}
    todo = [t for t in plan.trials if t.id not in finished]
    previous = _term_as_interrupt()
    started = clock()
    try:
        for i, trial in enumerate(todo, 1):
            if _past_budget(plan, trial, clock() - started):
                _stop_at_budget(plan, todo[i - 1:], clock() - started, rep)
                break
            rep.start(trial, i, len(todo))
            count = [0]

            def tick(tid: str, level: Any, done: int, _count: list[int] = count) -> None:
                _count[0] += 1
                rep.tick(tid, level, done)

            try:
                tplan = trial_plan(cfg, config_path, trial, free_port())
            except SpecplugError as exc:
                res = S.TrialResult(id=trial.id, method=trial.method, drafter=trial.drafter, k=trial.k,
                                    status="failed", error=f"cannot plan it: {exc.message}")
            else:
                res = run_trial(trial, tplan, settings, prompts, out_dir / "runs" / trial.id, tick)
            st.results[trial.id] = res
            S.save(out_dir, st)
            rep.finish(trial, res, count[0])
            if res.status == "failed" and trial.control:
                why = (res.error or "no reason given").rstrip(".")
                raise SpecplugError(
                    f"The control (speculation off) failed: {why}. Nothing can be compared without it, so "
                    "specplug.yaml and the lock were left as they were.",
                    f"Fix what its log says ({res.log_file or 'above'}) and rerun the same command; finished "
                    "trials are kept.",
                )
    except KeyboardInterrupt:
        S.save(out_dir, st)
        done = sum(1 for t in plan.trials if t.id in st.results and st.results[t.id].status == "done")
        rep.note(f"Stopped: {done} of {len(plan.trials)} trials finished and kept in {S.path_in(out_dir)}; "
                 "rerun the same command to resume.")
        return False
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return True


def _term_as_interrupt():
    """SIGTERM (a CI timeout, kill) stops a tune the way Ctrl-C does, so the running server is stopped too."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(_signum, _frame):
        raise KeyboardInterrupt

    return signal.signal(signal.SIGTERM, stop)


def chain_points(summaries: list[D.TrialSummary]) -> list[ChainPoint]:
    """Each candidate's acceptance at every k it ran, measured and carried from its deepest trial."""
    from specplug.tune.feedback import deepest

    out = []
    for deep in deepest(summaries):
        a = deep.acceptance
        same = [s for s in summaries if s.method == deep.method and s.drafter == deep.drafter and s.status == "done"]
        for s in sorted(same, key=lambda s: s.k):
            out.append(ChainPoint(
                candidate=D._label(deep.method, deep.drafter), k=s.k,
                from_deepest=round(a.length_at(s.k), 4) if a and a.length_at(s.k) else None,
                measured=round(s.acceptance.acceptance_length, 4) if s.acceptance and s.acceptance.acceptance_length else None,
            ))
    return out


def speculation_block(decision: D.Decision, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The speculation: block to pin (as specplug.yaml would validate it); ``extra``: the chosen candidate's
    other settings (a pinned speculation's tree, lookup window ...), which its trials ran with."""
    if not decision.speculate:
        return {"method": "none"}
    data: dict[str, Any] = {"method": decision.method, **(extra or {})}
    if decision.drafter:
        data["drafter"] = decision.drafter
    data["num_speculative_tokens"] = decision.num_speculative_tokens
    data["schedule"] = [e.model_dump(mode="json", exclude_none=True) for e in decision.schedule]
    return SpeculationSpec.model_validate(data).model_dump(mode="json", exclude_none=True)


def chosen_extra(plan: T.TrialPlan, decision: D.Decision) -> dict[str, Any]:
    """The other speculation settings the chosen candidate's trials ran with."""
    return next((dict(c.extra) for c in plan.candidates
                 if (c.method, c.drafter) == (decision.method, decision.drafter)), {})


def finish(
    cfg: Config, config_path: Path, rec: Plan, plan: T.TrialPlan, settings: TuneSettings, st: S.TuneState,
    out_dir: Path, prompts_label: str, inputs: dict[str, Any], complete: bool, write_config: bool,
) -> TuneReport:
    """Decide, and write the evidence; when complete and asked, the decision too (config, calibration, lock)."""
    from specplug import __version__
    from specplug.tune import evidence, feedback, lockref, writeback

    results = [st.results[t.id] for t in [*plan.trials, *plan.dropped] if t.id in st.results]
    summaries = D.summarize(results, settings.concurrency, settings.margin, settings.request_rates, settings.slo)
    decision = D.decide(summaries, settings.concurrency, settings.margin, rates=settings.request_rates,
                        load_concurrency=settings.load_concurrency, load_request_rate=settings.load_request_rate,
                        mode_of=schedule_mode(rec), stack=rec.stack.name)
    control = st.results.get("control")
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    versions = {r.stack_version for r in results if r.stack_version}
    rep = TuneReport(
        specplug_version=__version__, created=now, config_file=str(config_path), model=rec.model.hf_id,
        stack=rec.stack.name, stack_version=(control.stack_version if control and control.stack_version else
                                             (sorted(versions)[0] if versions else rec.stack.version)),
        hardware=f"{rec.hardware.num_gpus} x {rec.hardware.gpu} (planned; {rec.hardware.source})", prompts=prompts_label,
        settings=settings, inputs=inputs, plan=plan, trials=summaries, decision=decision, complete=complete,
    )
    cal_path, cal_name = feedback.calibration_path(config_path, cfg.calibration)
    before = str(cal_path) if cfg.calibration and cal_path.is_file() else None
    rep.acceptance = feedback.checks(rec, summaries, before)
    rep.chain = chain_points(summaries)
    if not complete:
        rep.notes.append("Interrupted: the decision covers the trials that finished; specplug.yaml was not changed.")
    failed = [s.id for s in summaries if s.status != "done"]
    if failed and decision.decided:
        rep.notes.append(f"Not weighed (failed): {', '.join(failed)}. Rerun the same command to retry them; what "
                         "was measured is kept.")
    if not decision.decided:
        # Failures are no evidence: the previous tune.json (which a lock may cite by digest) is left as it was.
        rep.notes.append(f"Nothing written: specplug.yaml, the calibration, the lock and {Path(out_dir)}/tune.json "
                         f"are as they were; the failures are in {S.path_in(out_dir)}.")
        return rep
    write_back = complete and write_config
    entries = feedback.entries(rec, summaries, out_dir, settings.temperature) if write_back else []
    # The evidence first: whatever happens to the write-back below, the measurements are kept.
    paths = evidence.write(rep, out_dir)
    if write_back:
        from specplug.lock import load_config, write_lock

        block = speculation_block(decision, chosen_extra(plan, decision))
        comment = (f"{writeback.TUNE_COMMENT} {now[:10]} from {Path(out_dir).as_posix()}/tune.json: "
                   f"{decision.why}")
        # The calibration, specplug.yaml and the lock change together: Ctrl-C waits until all are written.
        with _no_interrupt():
            _write_decision(config_path, cal_path, cal_name, entries, block, _one_line(comment))
            rep.calibration_file = str(cal_path) if entries else None
            try:
                lock, lock_path, _ = write_lock(config_path)
            except SpecplugError as exc:
                raise SpecplugError(f"specplug.yaml was updated, but re-planning the lock failed: {exc.message}",
                                    exc.hint) from None
            evidence.write_json(rep, out_dir)  # now with the calibration written; the lock names this version
            ref = lockref.make_ref(out_dir / "tune.json", lock_path, inputs, rec.stack.name, rep.stack_version, now,
                                   block)
            new_cfg = load_config(config_path)
            if isinstance(new_cfg.speculation, SpeculationSpec):  # exactly as specplug.yaml now validates it
                ref.speculation = new_cfg.speculation.model_dump(mode="json", exclude_none=True)
            lockref.attach(lock_path, ref)
        rep.notes.append(f"Wrote {config_path} (speculation:), {lock_path} (re-planned, with its tune reference)"
                         + (f" and {cal_path} (calibration)." if rep.calibration_file else "."))
    rep.notes.append("Evidence: " + ", ".join(str(p) for p in paths))
    return rep


def undecided_error(rep: TuneReport) -> SpecplugError:
    """Why a tune decided nothing: each failed trial with its reason and its log's last lines, and what to do."""
    lines = [f"{rep.decision.why} specplug.yaml, the calibration and the lock were left as they were."]
    for t in rep.trials:
        if t.status == "done":
            continue
        lines.append(f"  {t.id}: {t.error or 'failed'}" + (f" (log: {t.log_file})" if t.log_file else ""))
        lines += [f"    | {ln}" for ln in t.log_tail[-4:]]
    return SpecplugError(
        "\n".join(lines),
        "Fix what the logs say (a server killed for memory: free the GPU, or lower serve.max_model_len or "
        "serve.max_num_seqs; a missing drafter: its path) and rerun the same command: it resumes, keeping the "
        "control's measurement, and retries the failed trials.",
    )


def _write_decision(config_path: Path, cal_path: Path, cal_name: str, entries: list, block: dict[str, Any],
                    comment: str) -> None:
    """Merge the calibration, then point specplug.yaml at it; if specplug.yaml cannot be written, the
    calibration file is put back as it was, so neither is left changed without the other."""
    from specplug.fileio import write_atomic_bytes
    from specplug.policy.calibration import merge_into
    from specplug.tune import writeback

    before = cal_path.read_bytes() if entries and cal_path.is_file() else None
    if entries:
        merge_into(cal_path, entries)
    try:
        writeback.write_decision(config_path, block, comment, cal_name if entries else None)
    except BaseException:
        if entries:
            if before is None:
                cal_path.unlink(missing_ok=True)
            else:
                write_atomic_bytes(cal_path, before)
        raise


@contextlib.contextmanager
def _no_interrupt():
    """SIGINT ignored for a multi-file write (restored after), so Ctrl-C cannot leave it half done."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _one_line(text: str, width: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."

