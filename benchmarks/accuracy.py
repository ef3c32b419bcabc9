"""Score `specplug.estimate` against published results: benchmarks/data/published_results.csv (the calibration
set, kept in the repository so that a clone scores the same rows as CI) and benchmarks/data/extra_results.csv.

    python benchmarks/accuracy.py [--no-loso] [--data PATH]

Prints, in-sample (the shipped policy) and leave-one-source-out (refit without a source, score on it):
median |ln(pred/actual)| of speedup, share within 25%, Spearman rank correlation, top-1 technique agreement
(groups of rows differing only in technique), helps/hurts sign accuracy, coverage (rows scored / rows
with a speedup whose model and GPU are in the catalogs), and how the draft length and tree are ranked within published
shape sweeps (benchmarks/shape_ranking.py). Row parsing lives in scripts/fit_policy.py.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import fit_policy as F  # noqa: E402

DATA = ROOT / "benchmarks" / "data"
# The in-repository copies, not fit_policy's default (which reads the shared folder beside a checkout and, where
# that is missing, silently scores only the extra rows).
DEFAULT_DATA = [DATA / "published_results.csv", F.EXTRA]


def _spearman(a: list[float], b: list[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic) if len(a) > 2 else float("nan")


# Bases of drafters.csv acceptance figures that come from no source of the scored rows (shared/data and
# benchmarks/data list theirs): AngelSlim's own benchmark page, DeepSeek's DSpark paper.
INDEPENDENT_BASES = ("AngelSlim docs", "DSpark paper")

def predict(rows: list[F.Row], policy) -> list[float]:
    from specplug import estimate

    out = []
    with independent_acceptance() as named:
        for r in rows:
            named[0] = r.drafter
            out.append(estimate(r.model, r.method, policy=policy, **r.estimate_kwargs()).speedup)
    return out


@contextmanager
def independent_acceptance() -> Iterator[list[str | None]]:
    """The catalog and engine as the benchmark scores with them, restored on exit.

    Drafters' published acceptance (drafters.csv) was partly read from these very sources: scoring with it would
    leak the held-out source into its own prediction. Inside, the catalog holds only figures whose basis names a
    source outside the scored rows (INDEPENDENT_BASES), and a head's figure speaks for that head only: it is used
    for a row that names the head (the yielded slot), never for a row that does not say which head it measured."""
    import dataclasses
    import importlib

    from specplug.policy import engine

    D = importlib.import_module("specplug.catalog.drafters")  # the module (the package re-exports a function by that name)
    kept = tuple(
        x if (x.acceptance_basis or "").startswith(INDEPENDENT_BASES) else dataclasses.replace(x, acceptance_length=None)
        for x in D.drafters()
    )
    named: list[str | None] = [None]
    catalog, published = D.drafters, engine.published_alpha

    def own_only(c, d):
        ours = named[0] is not None and d.catalog is not None and d.catalog.drafter_hf_id == named[0]
        return published(c, d) if ours and d.catalog.acceptance_length else None

    D.drafters, engine.published_alpha = (lambda: kept), own_only  # type: ignore[assignment]
    D._by_target.cache_clear()
    try:
        yield named
    finally:
        D.drafters, engine.published_alpha = catalog, published  # type: ignore[assignment]
        D._by_target.cache_clear()


TIE = 0.03  # measured speedups within 3% are one result: SDB figures are read off plots to about +-0.05


def bucket(batch: int) -> str:
    return "1" if batch == 1 else "2-8" if batch <= 8 else "9-32" if batch <= 32 else ">32"


def _median_abs(v: list[float]) -> float:
    a = sorted(abs(x) for x in v)
    return a[len(a) // 2] if a else float("nan")


def breakdown(rows: list[F.Row], preds: list[float]) -> dict[str, dict[str, tuple[int, float]]]:
    """Median |ln(pred/actual)| per batch bucket and per stack: (rows, error)."""
    out: dict[str, dict[str, list[float]]] = {"batch": defaultdict(list), "stack": defaultdict(list), "kind": defaultdict(list)}
    for r, p in zip(rows, preds, strict=True):
        e = math.log(p / r.speedup)
        out["batch"][bucket(r.batch)].append(e)
        out["stack"][r.stack].append(e)
        out["kind"]["moe (not fitted)" if r.moe else "dense"].append(e)
    return {k: {g: (len(v), _median_abs(v)) for g, v in d.items()} for k, d in out.items()}


def constant_ranking(rows: list[F.Row]) -> dict[str, float]:
    """The per-method guess a fit must beat: each method's mean ln(speedup) over ``rows``."""
    acc: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        if r.speedup:
            acc[r.method].append(math.log(r.speedup))
    return {m: sum(v) / len(v) for m, v in acc.items()}


def scores(rows: list[F.Row], preds: list[float], guess: dict[str, float] | None = None) -> dict[str, float]:
    act = [r.speedup for r in rows]
    err = sorted(abs(math.log(p / a)) for p, a in zip(preds, act, strict=True))
    groups: dict[tuple, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r, p in zip(rows, preds, strict=True):
        key = (r.src, r.model, r.gpu, r.stack, r.batch, r.temperature, r.workload, r.dataset)
        groups[key][r.method].append((p, r.speedup))
    agree = total = tied = const = 0
    for g in groups.values():
        if len(g) < 2:
            continue
        mean = {m: (sum(x for x, _ in v) / len(v), sum(y for _, y in v) / len(v)) for m, v in g.items()}
        total += 1
        best = max(mean, key=lambda m: mean[m][1])
        pick = max(mean, key=lambda m: mean[m][0])
        agree += pick == best
        tied += mean[pick][1] >= mean[best][1] * (1 - TIE)
        if guess is not None:
            cpick = max(mean, key=lambda m: guess.get(m, -9.0))
            const += cpick == best
    signs = [(p > 1.0) == (a > 1.0) for p, a in zip(preds, act, strict=True)]
    return {
        "rows": len(rows),
        "median_abs_ln_err": err[len(err) // 2] if err else float("nan"),
        "within_25pct": sum(e <= math.log(1.25) for e in err) / max(len(err), 1),
        "spearman": _spearman(preds, act),
        "top1_agreement": agree / total if total else float("nan"),
        "top1_within_tie": tied / total if total else float("nan"),
        "top1_constant_guess": const / total if total and guess is not None else float("nan"),
        "top1_groups": total,
        "sign_accuracy": sum(signs) / max(len(signs), 1),
    }


_FEATURES: F.Features | None = None


def _loso_one(args: tuple[str, list[F.Row]]) -> tuple[str, list[F.Row], list[float], list[float]]:
    """Refit from the default priors without ``src`` (fast numpy path), score its rows with estimate();
    also the constant per-method guess from the same training rows, for the ranking baseline."""
    src, rows = args
    assert _FEATURES is not None
    train = [i for i, r in enumerate(rows) if r.src != src and r.trains]
    test = [r for r in rows if r.src == src and r.speedup]
    if not test:
        return src, [], [], []
    x = F.fit([rows[i] for i in train], features=_FEATURES.subset(train))
    moe = F.moe_fit([r for r in rows if r.src != src], x)  # the MoE grid sees the other sources' MoE rows only
    guess = constant_ranking([rows[i] for i in train])
    return src, test, predict(test, F.make_policy(x, moe=moe)), [guess.get(r.method, -9.0) for r in test]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, action="append",
                    help="Results CSV (repeatable; default: benchmarks/data/published_results.csv and extra_results.csv).")
    ap.add_argument("--no-loso", action="store_true", help="Skip leave-one-source-out (in-sample only).")
    args = ap.parse_args(argv)
    t0 = time.time()
    paths = args.data or DEFAULT_DATA
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:  # a missing file would otherwise just score fewer rows, with figures unlike anyone else's
        print(f"error: no such results file: {', '.join(missing)}", file=sys.stderr)
        return 1
    rows, skipped = _read(paths)
    scored = [r for r in rows if r.speedup]
    # Coverage: of the rows with a speedup whose model and GPU the catalogs know, how many are scored.
    eligible = len(scored) + skipped.get("technique not modelled", 0) + skipped.get("engine not modelled", 0) + skipped.get(
        "batch or temperature unclear", 0
    ) + skipped.get("draft model not named", 0)
    from specplug.policy.data import load_policy

    in_preds = predict(scored, load_policy())
    ins = scores(scored, in_preds, constant_ranking(scored))
    print(f"{len(rows)} rows mapped, left out: {skipped}")
    print(f"coverage: {len(scored)}/{eligible} = {len(scored) / max(eligible, 1):.1%} of rows with a speedup whose model and GPU are in the catalogs")
    _print("in-sample (shipped policy)", ins)
    _print_shapes("in-sample", scored, in_preds)
    if not args.no_loso:
        global _FEATURES
        _FEATURES = F.Features(rows)  # built once; forked workers share it
        srcs = sorted({r.src for r in scored})
        from multiprocessing import get_context

        with get_context("fork").Pool(2) as pool:
            parts = pool.map(_loso_one, [(s, rows) for s in srcs])
        test = [r for _, t, _, _ in parts for r in t]
        preds = [p for _, _, pr, _ in parts for p in pr]
        # The constant guess, like the fit, only knows the other sources: score it group by group.
        cg = [g for _, _, _, gs in parts for g in gs]
        s = scores(test, preds)
        s["top1_constant_guess"] = scores(test, [math.exp(g) for g in cg])["top1_agreement"]
        _print("leave-one-source-out", s)
        _print_shapes("leave-one-source-out", test, preds)
        for kind, table in breakdown(test, preds).items():
            print(f"  by {kind}: " + "  ".join(f"{g} n={n} {e:.3f}" for g, (n, e) in sorted(table.items())))
        for src, t, pr, _ in parts:
            if t:
                s = scores(t, pr)
                print(
                    f"    {src:10s} n={s['rows']:4d}  median|ln err|={s['median_abs_ln_err']:.3f}  "
                    f"within 25%={s['within_25pct']:.0%}  sign={s['sign_accuracy']:.0%}"
                )
    print(f"({time.time() - t0:.0f} s)")
    return 0


def _read(paths: list[Path]) -> tuple[list[F.Row], dict[str, int]]:
    """Every file's mapped rows and why others were left out, printing where the rows came from and how many
    of each file have a speedup to score, so that two runs can be compared."""
    rows: list[F.Row] = []
    skipped: dict[str, int] = defaultdict(int)
    parts = []
    for p in paths:
        got, why = F.parse_rows([p])
        rows += got
        for k, n in why.items():
            skipped[k] += n
        with open(p, newline="", encoding="utf-8") as f:
            total = sum(1 for _ in csv.DictReader(f))
        parts.append(f"{sum(1 for r in got if r.speedup)} of {total} rows scored from {_shown(p)}")
    print("data: " + "; ".join(parts) + f" ({sum(1 for r in rows if r.speedup)} in all)")
    return rows, dict(skipped)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:  # a file outside the repository: named in full
        return str(path)


def _print_shapes(title: str, rows: list[F.Row], preds: list[float]) -> None:
    """Draft length and tree ranking in published shape sweeps, on the same predictions (benchmarks/shape_ranking.py)."""
    import shape_ranking as S

    by_id = {r.id: p for r, p in zip(rows, preds, strict=True)}
    print("  " + S.line(f"{title} draft length and tree ranking", S.summarize(S.shape_groups(rows), by_id)))


def _print(title: str, s: dict[str, float]) -> None:
    print(
        f"{title}: n={s['rows']}  median|ln(pred/actual)|={s['median_abs_ln_err']:.3f}  within 25%={s['within_25pct']:.1%}  "
        f"Spearman={s['spearman']:.3f}  top-1 technique={s['top1_agreement']:.1%} ({s['top1_groups']} groups; "
        f"{s['top1_within_tie']:.1%} within {TIE:.0%} of the measured best; constant per-method guess "
        f"{s['top1_constant_guess']:.1%})  sign accuracy={s['sign_accuracy']:.1%}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
