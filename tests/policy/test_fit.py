"""The fit script's numpy predictor must agree with estimate() (it fits what the CLI computes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "published_results.csv"


@pytest.mark.skipif(not DATA.exists(), reason="published_results.csv not available")
def test_numpy_features_match_estimate() -> None:
    np = pytest.importorskip("numpy")
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
