"""The fit script's numpy predictor must agree with estimate() (it fits what the CLI computes)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data" / "published_results.csv"


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
    j = 2 * len(F.FIT_METHODS) + len(F.KINDS) * len(F.FIT_WORKLOADS)
    x[j : j + 3] = [0.1, 0.21, 0.3]  # both draft-model size slopes and a tree gain between the tabulated ones
    pred, _ = feats.predict(x)
    pol = F.make_policy(x)
    est = np.array([estimate(r.model, r.method, policy=pol, **r.estimate_kwargs()).speedup for r in rows])
    # Trees are tabulated over logit(alpha): between grid points the table smooths the steps a tree builder's node set
    # takes as acceptance rises (perf.tree_reach). A step's size depends on where the budget falls: up to about 1% on
    # EAGLE-2's 48- and 50-token trees at the default acceptance, which sits on one.
    err = np.abs(np.log(est / pred))
    tree = np.array([bool(r.tree) for r in rows])
    assert np.max(err[~tree]) < 5e-3
    assert np.max(err[tree]) < 1.5e-2


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

    from specplug.catalog.drafters import find_drafter
    from specplug.policy import engine
    from specplug.policy.data import load_policy

    before = engine.published_alpha, find_drafter("AngelSlim/Qwen3-8B_eagle3").acceptance_length
    rows = [r for r in fit_policy.parse_rows()[0] if r.speedup]
    preds = accuracy.predict(rows, load_policy())
    # The benchmark's view of the catalog (independent figures only) does not outlive it.
    assert (engine.published_alpha, find_drafter("AngelSlim/Qwen3-8B_eagle3").acceptance_length) == before
    assert find_drafter("yuhuili/EAGLE-Vicuna-7B-v1.3").acceptance_length is not None
    errs = sorted(abs(math.log(p / r.speedup)) for p, r in zip(preds, rows, strict=True))
    assert len(preds) == len(rows) > 600 and errs[len(errs) // 2] < 0.2


def test_a_row_that_names_its_head_is_scored_with_that_heads_independent_figure_only() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "scripts"))
    import accuracy
    import fit_policy as F

    from specplug import estimate
    from specplug.catalog.drafters import find_drafter

    assert F._named_head("EAGLE-3 (AngelSlim Qwen3-a3B_eagle3 draft) steps 3", "Qwen/Qwen3-30B-A3B", "eagle3") == (
        "AngelSlim/Qwen3-a3B_eagle3")
    assert F._named_head("EAGLE-3 (zhuyksir/EAGLE3-Qwen3-30B-A3B-DenseHead)", "Qwen/Qwen3-30B-A3B", "eagle3") is None
    kw = dict(gpu="h100", num_gpus=2, stack="sglang", num_speculative_tokens=3)
    with accuracy.independent_acceptance() as named:
        named[0] = "AngelSlim/Qwen3-a3B_eagle3"
        own = estimate("qwen3-30b-a3b", "eagle3", drafter="AngelSlim/Qwen3-a3B_eagle3", **kw).acceptance_length
        named[0] = None  # a row that does not say which head: the method prior
        unnamed = estimate("qwen3-30b-a3b", "eagle3", **kw).acceptance_length
        # Figures read from the scored sources are withheld inside.
        assert find_drafter("yuhuili/EAGLE-Vicuna-7B-v1.3").acceptance_length is None
    assert own < unnamed  # AngelSlim's published 2.01 tokens/step is below the EAGLE-3 prior


def test_published_shapes_parse_as_their_sources_state_them() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    import fit_policy as F

    # SpecDecode-Bench Fig. 2: depth 3, k tokens verified, branching 2 for k=6 and 4 for k=21; chains of k=3.
    assert F._first(F.TREES, "EAGLE-3 tree k=6 tree k=6, tree depth 3") == (3, 2, 6)
    assert F._first(F.TREES, "EAGLE tree k=21 tree k=21, tree depth 3") == (3, 4, 21)
    assert F._k("MTP 3 (nextn=3); TP8 EP2/EP4 mixed; CUDA graph") == 3
    if not DATA.exists():
        return
    rows, _ = F.parse_rows(DATA)
    sdb = {F.shape_of(r) for r in rows if r.src == "SDB" and r.stack == "sglang"}
    assert sdb == {(3, 1, 4), (3, 2, 6), (3, 4, 21)}
    # EAGLE-1's static tree and EAGLE-2's dynamic one are two programs, not one shape sweep.
    mixed = [g for g in F.shape_groups(rows) if {F.shape_of(r) for r in g} == {(5, 4, 26), (6, 10, 60)}]
    assert not mixed
    # EAGLE-2's dynamic tree verifies 60 tokens on 7B targets, 50 on 13B and 48 on 70B (its "60(7B)/50(13B)/48(70B)").
    budget = {(r.model, r.tree[2]) for r in rows if r.src == "EAGLE2" and r.tree and r.tree[0] == 6}
    assert ("lmsys/vicuna-7b-v1.3", 60) in budget and ("lmsys/vicuna-13b-v1.3", 50) in budget
    assert ("meta-llama/Llama-2-70b-chat-hf", 48) in budget and not any(n == 60 and "13b" in m for m, n in budget)
    # SGLang's flags spelled as on its command line (--speculative-num-draft-tokens) name the tree as well.
    extra, _ = F.parse_rows(F.EXTRA)
    assert {r.tree for r in extra if r.src == "SGLE3L70"} == {(8, 8, 64)}
