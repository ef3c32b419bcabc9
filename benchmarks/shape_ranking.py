"""How well specplug orders draft lengths and trees: ranking within published shape sweeps.

    python benchmarks/shape_ranking.py [--no-loso] [--data PATH] [--groups]

A group is the rows of one source that share model, drafter, GPU, stack, batch, temperature, workload and dataset
and differ only in the speculation shape (k, or steps x topk x draft tokens). Per group: whether the shape predicted
fastest is the measured fastest (top-1) and the measured speedup of that pick over the best measured (regret, 1.0 is
perfect), each beside the floor of a random pick. Scored in-sample (the shipped policy) and leave-one-source-out
(refit without the source, as benchmarks/accuracy.py does). Row parsing lives in scripts/fit_policy.py.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import accuracy as A  # noqa: E402  (its data paths and its scoring of a row through estimate())
import fit_policy as F  # noqa: E402

# Pairs of shapes measured this close (|ln| of their speedup ratio) are the ones a tie call is about: the median error
# of their predicted ratio is the policy's rules.shape_error.
NEAR = 0.15
Shape = tuple[int, int, int]  # (depth, topk, verified tokens); a chain of k is (k, 1, k + 1)
shape_of, shape_groups = F.shape_of, F.shape_groups


@dataclass(frozen=True)
class GroupScore:
    shapes: int
    top1: bool
    regret: float
    random_top1: float
    random_regret: float
    pair_errors: tuple[float, ...]  # |ln| error of the predicted speedup ratio of each pair of shapes
    near_errors: tuple[float, ...]  # the same for pairs measured within NEAR of each other (what a tie call rests on)


def score_group(rows: list[F.Row], preds: dict[str, float]) -> GroupScore:
    """Top-1 and regret of the predicted-best shape; rows of one shape (several runs) are averaged."""
    meas: dict[Shape, list[float]] = defaultdict(list)
    pred: dict[Shape, list[float]] = defaultdict(list)
    for r in rows:
        s = shape_of(r)
        assert s is not None
        meas[s].append(r.speedup or 0.0)
        pred[s].append(preds[r.id])
    m = {s: sum(v) / len(v) for s, v in meas.items()}
    p = {s: sum(v) / len(v) for s, v in pred.items()}
    best = max(m.values())
    pick = max(p, key=lambda s: (p[s], -s[2]))  # a tie goes to the cheaper shape, as the planner's does
    return GroupScore(
        shapes=len(m),
        top1=m[pick] >= best,
        regret=m[pick] / best,
        random_top1=sum(v >= best for v in m.values()) / len(m),
        random_regret=sum(v / best for v in m.values()) / len(m) if best > 0 else float("nan"),
        pair_errors=tuple(abs(math.log(p[a] / p[b]) - math.log(m[a] / m[b])) for a in m for b in m if a < b),
        near_errors=tuple(abs(math.log(p[a] / p[b]) - math.log(m[a] / m[b])) for a in m for b in m
                          if a < b and abs(math.log(m[a] / m[b])) <= NEAR),
    )


def summarize(groups: list[list[F.Row]], preds: dict[str, float]) -> dict[str, float]:
    scores = [score_group(g, preds) for g in groups if all(r.id in preds for r in g)]
    n = max(len(scores), 1)
    return {
        "groups": len(scores),
        "top1": sum(s.top1 for s in scores) / n,
        "regret": sum(s.regret for s in scores) / n,
        "random_top1": sum(s.random_top1 for s in scores) / n,
        "random_regret": sum(s.random_regret for s in scores) / n,
        "worst_regret": min((s.regret for s in scores), default=float("nan")),
        "pair_error": _median([e for s in scores for e in s.pair_errors]),
        "near_error": _median([e for s in scores for e in s.near_errors]),
    }


def _median(v: list[float]) -> float:
    v = sorted(v)
    return v[len(v) // 2] if v else float("nan")


def in_sample(rows: list[F.Row], policy: Path | None = None) -> dict[str, float]:
    """Predictions of the shipped policy (or ``policy`` merged over it) for every row in a shape group."""
    from specplug.policy.data import load_policy

    flat = [r for g in shape_groups(rows) for r in g]
    return dict(zip((r.id for r in flat), A.predict(flat, load_policy(policy)), strict=True))


_FEATURES: F.Features | None = None


def _fold(args: tuple[str, list[F.Row]]) -> dict[str, float]:
    """Refit without source ``src`` (fast numpy path, its MoE grid from the other sources) and predict its grouped rows."""
    src, rows = args
    assert _FEATURES is not None
    train = [i for i, r in enumerate(rows) if r.src != src and r.trains]
    test = [r for g in shape_groups([r for r in rows if r.src == src]) for r in g]
    if not test:
        return {}
    x = F.fit([rows[i] for i in train], features=_FEATURES.subset(train))
    moe = F.moe_fit([r for r in rows if r.src != src], x)
    return dict(zip((r.id for r in test), A.predict(test, F.make_policy(x, moe=moe)), strict=True))


def leave_one_source_out(rows: list[F.Row], procs: int = 2) -> dict[str, float]:
    """Predictions for every grouped row from a fit that never saw its source."""
    global _FEATURES
    _FEATURES = F.Features(rows)  # built once; forked workers share it
    srcs = sorted({g[0].src for g in shape_groups(rows)})
    from multiprocessing import get_context

    with get_context("fork").Pool(procs) as pool:
        parts = pool.map(_fold, [(s, rows) for s in srcs])
    return {k: v for part in parts for k, v in part.items()}


def by_source(groups: list[list[F.Row]], preds: dict[str, float]) -> dict[str, dict[str, float]]:
    out: dict[str, list[list[F.Row]]] = defaultdict(list)
    for g in groups:
        out[g[0].src].append(g)
    return {s: summarize(gs, preds) for s, gs in sorted(out.items())}


def line(title: str, s: dict[str, float]) -> str:
    return (f"{title}: {s['groups']} groups  top-1 {s['top1']:.1%} (random {s['random_top1']:.1%})  "
            f"regret {s['regret']:.3f} (random {s['random_regret']:.3f})  worst {s['worst_regret']:.3f}  "
            f"median |ln| error of shape ratios {s['pair_error']:.3f} ({s['near_error']:.3f} where measured within "
            f"{math.expm1(NEAR):.0%})")


def print_groups(groups: list[list[F.Row]], preds: dict[str, float]) -> None:
    for g in groups:
        r0 = g[0]
        cells = sorted({shape_of(r): (r.speedup, preds.get(r.id, math.nan)) for r in g}.items())
        txt = "  ".join(f"{d}x{t}/{n}: {m:.2f}|{p:.2f}" for (d, t, n), (m, p) in cells)
        print(f"  {r0.src} {r0.model.split('/')[-1]} {r0.method} {r0.stack} bs{r0.batch} {r0.workload}: {txt}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, action="append", help="Results CSV (repeatable; default: accuracy.py's).")
    ap.add_argument("--no-loso", action="store_true", help="Skip leave-one-source-out (in-sample only).")
    ap.add_argument("--groups", action="store_true", help="Print every group: shape: measured|predicted.")
    ap.add_argument("--policy", type=Path, help="A policy file merged over the shipped one for the in-sample score.")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows, _ = F.parse_rows(args.data or A.DEFAULT_DATA)
    groups = shape_groups(rows)
    preds = in_sample(rows, args.policy)
    print(line(f"in-sample ({args.policy or 'shipped policy'})", summarize(groups, preds)))
    if args.groups:
        print_groups(groups, preds)
    if not args.no_loso:
        loso = leave_one_source_out(rows)
        print(line("leave-one-source-out", summarize(groups, loso)))
        for src, s in by_source(groups, loso).items():
            print("    " + line(f"{src:10s}", s))
        if args.groups:
            print_groups(groups, loso)
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
