"""Measured acceptance becomes the calibration later estimates use, next to what was predicted before."""

from __future__ import annotations

import pytest

from specplug.policy.calibration import CalibrationEntry, load_calibration, merge_into
from specplug.tune.decide import summarize
from specplug.tune.feedback import checks, entries
from tests.tune.helpers import trial


@pytest.fixture(scope="module")
def plan():
    from specplug.planning import recommend

    return recommend("qwen3-8b", gpu="h100", num_gpus=1, stack="vllm", stack_version="0.10.2")


def test_deepest_trial_becomes_a_calibration_entry_that_estimates_then_use(plan, tmp_path):
    from specplug.planning import estimate

    results = [trial("control", "none", 0, {1: [100, 100]}), trial("ngram-k3", "ngram", 3, {1: [150, 150]}),
               trial("ngram-k1", "ngram", 1, {1: [120, 120]})]
    summaries = summarize(results, [1], 0.05)
    before = checks(plan, summaries, None)
    assert [(c.candidate, c.k) for c in before] == [("ngram-k3", 3)]
    assert before[0].measured_length == pytest.approx(2.8) and before[0].predicted_length
    assert before[0].error == pytest.approx(2.8 / before[0].predicted_length - 1, abs=1e-3)
    cal = tmp_path / "calibration.yaml"
    other = CalibrationEntry(model="x/y", method="eagle3", acceptance_rate=0.5)
    merge_into(cal, [other])
    (e,) = entries(plan, summaries, "tune-out", 0.0)
    assert (e.method, e.num_speculative_tokens, e.stack) == ("ngram", 3, "vllm")
    assert e.position_rates == pytest.approx([0.8, 0.75, 0.6667], abs=1e-4)
    assert e.measured_speedup == 1.5 and e.source == "tune tune-out (ngram-k3)"
    merge_into(cal, [e])
    assert [x.method for x in load_calibration(cal).entries] == ["eagle3", "ngram"]  # calibrate's entries kept
    est = estimate(plan.model.hf_id, "ngram", num_speculative_tokens=3, gpu="h100", stack="vllm",
                   stack_version="0.10.2", calibration=str(cal))
    assert est.calibrated and est.acceptance_length == pytest.approx(2.8, abs=0.15)
    (after,) = checks(plan, summaries, str(cal))
    assert abs(after.error) < abs(before[0].error)
