"""The fit script's numpy predictor must agree with estimate() (it fits what the CLI computes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "published_results.csv"


@pytest.mark.skipif(not DATA.exists(), reason="published_results.csv not available")
def test_numpy_features_match_estimate(monkeypatch) -> None:
    np = pytest.importorskip("numpy")
    from specplug.policy import engine

    # The fit learns the priors; a drafter's own published acceptance (used by estimate) is not a fitted input.
    monkeypatch.setattr(engine, "published_alpha", lambda c, d: None)
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_policy as F

    from specplug import estimate

    rows, _ = F.parse_rows(DATA)
    rows = rows[::9]  # a spread of sources, stacks and methods, kept fast
    feats = F.Features(rows)
    x = F._x0(F._base_data())
    x[-1] += 0.3  # move a fitted factor off its default so the parameter path is exercised
    pred, _ = feats.predict(x)
    pol = F.make_policy(x)
    est = np.array([estimate(r.model, r.method, policy=pol, **r.estimate_kwargs()).speedup for r in rows])
    assert np.max(np.abs(np.log(est / pred))) < 2e-3


def test_perf_stays_free_of_numpy() -> None:
    import subprocess

    code = "import sys, specplug.policy.perf, specplug.policy.engine; sys.exit('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_uncovered_workloads_keep_the_default_prior() -> None:
    """With no fitted workload effect, a workload's alpha keeps default.yaml's offset from chat (the prior)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_policy as F

    base = F._base_data()
    p = F.policy_data(F._x0(base), base, digits=None)["acceptance"]["methods"]["eagle"]["alpha"]
    d = base["acceptance"]["methods"]["eagle"]["alpha"]
    assert abs(p["translation"] - d["translation"]) < 1e-9 and abs(p["chat"] - d["chat"]) < 1e-9


def test_retrieval_drafting_maps_to_suffix_and_uncertain_rows_weigh_less() -> None:
    pytest.importorskip("numpy")
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_policy as F

    assert F._first(F.METHODS, "REST") == "suffix" and F._first(F.METHODS, "Token Recycling") == "suffix"
    assert F._first(F.METHODS, "PLD") == "ngram"
    if not DATA.exists():
        return
    rows, _ = F.parse_rows(DATA)
    rows = [r for r in rows if r.src == "SDB"]
    w = F.Features(rows).weights(F.SOURCE_POWER)
    fig = [x for x, r in zip(w, rows, strict=True) if "fig-approx" in r.flag]
    exact = [x for x, r in zip(w, rows, strict=True) if "fig-approx" not in r.flag]
    if fig and exact:
        assert max(fig) < min(exact)


@pytest.mark.skipif(not DATA.exists(), reason="published_results.csv not available")
def test_every_published_row_is_scored_through_estimate(monkeypatch) -> None:
    # benchmarks/accuracy.py scores published configurations through estimate(): none may be refused, and the
    # shipped policy must stay close to them in-sample.
    import math

    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "scripts"))
    import accuracy
    import fit_policy

    from specplug.policy import engine
    from specplug.policy.data import load_policy

    monkeypatch.setattr(engine, "published_alpha", engine.published_alpha)  # accuracy.predict replaces it
    rows = [r for r in fit_policy.parse_rows()[0] if r.speedup]
    preds = accuracy.predict(rows, load_policy())
    errs = sorted(abs(math.log(p / r.speedup)) for p, r in zip(preds, rows, strict=True))
    assert len(preds) == len(rows) > 600 and errs[len(errs) // 2] < 0.2
