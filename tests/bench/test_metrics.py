"""Each stack's acceptance reader on exposition text in the shape real servers print."""

from __future__ import annotations

import pytest

from specplug.bench.metrics import detect_stack, from_timings, parse_exposition, read_acceptance

# vLLM V1 (prometheus_client, labels model_name and engine): the figures of a real `vllm serve` CPU run with
# n-gram k=4 (shared/reference/stacks-on-cpu.md: drafts 5, draft tokens 20, accepted 11, per position 5,4,1,1).
VLLM_BEFORE = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 0.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="0"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="1"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="2"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny",position="3"} 0.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 0.0
"""
VLLM_AFTER = (
    VLLM_BEFORE.replace('drafts_total{engine="0",model_name="tiny"} 0.0', 'drafts_total{engine="0",model_name="tiny"} 5.0')
    .replace('draft_tokens_total{engine="0",model_name="tiny"} 0.0', 'draft_tokens_total{engine="0",model_name="tiny"} 20.0')
    .replace('accepted_tokens_total{engine="0",model_name="tiny"} 0.0', 'accepted_tokens_total{engine="0",model_name="tiny"} 11.0')
    .replace('position="0"} 0.0', 'position="0"} 5.0')
    .replace('position="1"} 0.0', 'position="1"} 4.0')
    .replace('position="2"} 0.0', 'position="2"} 1.0')
    .replace('position="3"} 0.0', 'position="3"} 1.0')
)


def test_vllm_counters_match_vllms_own_log_line():
    acc = read_acceptance(parse_exposition(VLLM_BEFORE), parse_exposition(VLLM_AFTER))
    # vLLM logged "Mean acceptance length: 3.20 ... Avg Draft acceptance rate: 55.0%" for these counters.
    assert acc is not None and acc.source == "vllm counters"
    assert acc.mean_acceptance_length == pytest.approx(3.2)
    assert acc.acceptance_rate == pytest.approx(0.55)
    assert acc.per_position == pytest.approx([1.0, 0.8, 0.2, 0.2])
    assert detect_stack(parse_exposition(VLLM_AFTER)) == "vllm"


def test_vllm_diff_subtracts_what_came_before_and_sums_engines():
    before = parse_exposition(VLLM_AFTER)
    two_engines = VLLM_AFTER.replace('engine="0"', 'engine="1"')
    after = parse_exposition(VLLM_AFTER + two_engines)  # engine 0 unchanged, engine 1 did the same again
    acc = read_acceptance(before, after)
    assert acc.drafts == 5 and acc.accepted_tokens == 11 and acc.mean_acceptance_length == pytest.approx(3.2)


def test_vllm_v0_counters_give_a_rate_but_no_length():
    text = """\
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 300.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 500.0
vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 420.0
vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.6
"""
    acc = read_acceptance(None, parse_exposition(text))
    assert acc.acceptance_rate == pytest.approx(0.6) and acc.mean_acceptance_length is None
    assert "V0" in acc.source


def test_embedded_server_trims_idle_positions_and_is_recognised():
    # The embedded server pre-creates 16 positions (like vLLM does for its k); only k=3 are ever used.
    lines = [
        'vllm:spec_decode_num_drafts_total{model_name="smollm2-135m"} 10',
        'vllm:spec_decode_num_draft_tokens_total{model_name="smollm2-135m"} 30',
        'vllm:spec_decode_num_accepted_tokens_total{model_name="smollm2-135m"} 12',
        'specplug:engine_steps_total{model_name="smollm2-135m"} 40',
    ]
    per = [6, 4, 0] + [0] * 13
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{model_name="smollm2-135m",position="{i}"}} {v}'
        for i, v in enumerate(per)
    ]
    snap = parse_exposition("\n".join(lines) + "\n")
    acc = read_acceptance(None, snap)
    assert acc.per_position == pytest.approx([0.6, 0.4, 0.0])  # position 2 was drafted, so its zero stays
    assert acc.mean_acceptance_length == pytest.approx(2.2)
    assert detect_stack(snap) == "embedded"


LLAMACPP = """\
# HELP llamacpp:spec_decode_num_drafts_total Number of speculative decoding drafts.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 6
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 24
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 24
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 6
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 6
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 22
"""


def test_llamacpp_counters():
    # A real llama-server draft-simple run logged "draft acceptance = 1.00000 (24 accepted / 24 generated), mean len = 5.00".
    acc = read_acceptance(None, parse_exposition(LLAMACPP))
    assert acc.source == "llama.cpp counters"
    assert acc.acceptance_rate == pytest.approx(1.0) and acc.mean_acceptance_length == pytest.approx(5.0)
    assert detect_stack(parse_exposition(LLAMACPP)) == "llamacpp"


def test_llamacpp_response_timings_when_no_metrics():
    timings = [
        {"prompt_n": 22, "predicted_n": 32, "draft_n": 16, "draft_n_accepted": 12},
        {"prompt_n": 30, "predicted_n": 32, "draft_n": 8, "draft_n_accepted": 2},
        {"prompt_n": 30, "predicted_n": 32},  # a request that never drafted adds nothing
    ]
    acc = read_acceptance(None, None, timings=timings)
    assert acc.source == "llama.cpp response timings"
    assert acc.draft_tokens == 24 and acc.accepted_tokens == 14 and acc.acceptance_rate == pytest.approx(14 / 24)
    assert from_timings([{"predicted_n": 3}]) is None


def _sglang(length: float, rate: float) -> str:
    labels = 'model_name="meta-llama/Llama-3.1-8B-Instruct",engine_type="unified",tp_rank="0",pp_rank="0"'
    return (
        "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
        "# TYPE sglang:spec_accept_length gauge\n"
        f"sglang:spec_accept_length{{{labels}}} {length}\n"
        "# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.\n"
        "# TYPE sglang:spec_accept_rate gauge\n"
        f"sglang:spec_accept_rate{{{labels}}} {rate}\n"
        f"sglang:num_running_reqs{{{labels}}} 4.0\n"
    )


def test_sglang_gauges_are_averaged_over_samples():
    before = parse_exposition(_sglang(0.0, 0.0))
    during = [parse_exposition(_sglang(3.0, 0.5)), parse_exposition(_sglang(2.0, 0.25))]
    after = parse_exposition(_sglang(2.5, 0.375))
    acc = read_acceptance(before, after, during)
    assert acc.source.startswith("sglang gauges")
    assert acc.mean_acceptance_length == pytest.approx(2.5) and acc.acceptance_rate == pytest.approx(0.375)
    assert acc.samples == 3
    assert detect_stack(before) == "sglang"


TGI = """\
# TYPE tgi_request_skipped_tokens histogram
tgi_request_skipped_tokens_bucket{le="0.0"} 2
tgi_request_skipped_tokens_bucket{le="1.0"} 2
tgi_request_skipped_tokens_bucket{le="+Inf"} 10
tgi_request_skipped_tokens_sum {skipped}
tgi_request_skipped_tokens_count 10
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="+Inf"} 10
tgi_request_generated_tokens_sum {generated}
tgi_request_generated_tokens_count 10
"""


def test_tgi_skipped_tokens_give_tokens_per_forward():
    before = parse_exposition(TGI.replace("{skipped}", "100").replace("{generated}", "1000"))
    after = parse_exposition(TGI.replace("{skipped}", "700").replace("{generated}", "2600"))
    acc = read_acceptance(before, after)
    # 1600 tokens generated in 1600 - 600 = 1000 forwards.
    assert acc.accepted_tokens == 600 and acc.mean_acceptance_length == pytest.approx(1.6)
    assert detect_stack(after) == "tgi"


def test_trtllm_json_iteration_stats():
    before = parse_exposition('[{"iter": 1, "specDecodingStats": {"numDraftTokens": 8, "numAcceptedTokens": 4, '
                              '"numRequestsWithDraftTokens": 2, "acceptanceLength": 3.0}}]')
    after = parse_exposition(
        '[{"iter": 1, "specDecodingStats": {"numDraftTokens": 8, "numAcceptedTokens": 4, "numRequestsWithDraftTokens": 2, '
        '"acceptanceLength": 3.0}}, {"iter": 2, "specDecodingStats": {"numDraftTokens": 12, "numAcceptedTokens": 9, '
        '"numRequestsWithDraftTokens": 3, "acceptanceLength": 4.0}}]'
    )
    acc = read_acceptance(before, after)
    assert acc.draft_tokens == 12 and acc.accepted_tokens == 9 and acc.mean_acceptance_length == pytest.approx(4.0)
    assert detect_stack(after) == "trtllm"


def test_no_speculative_metrics_means_no_acceptance():
    text = '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 0.0\n'
    assert read_acceptance(parse_exposition(text), parse_exposition(text)) is None
    assert read_acceptance(None, None) is None


def test_parser_handles_escapes_timestamps_and_junk():
    snap = parse_exposition(
        'a_total{path="/v1/x",msg="say \\"hi\\"\\n"} 3 1712345678000\n'
        "garbage line without value\n"
        "b NaN\n"
        "c +Inf\n"
    )
    s = snap.samples[0]
    assert s.labels == {"path": "/v1/x", "msg": 'say "hi"\n'} and s.value == 3
    assert snap.total("c") == float("inf")


def test_a_plugin_stack_is_read_and_recognised_from_what_its_adapter_declares(monkeypatch):
    from specplug.stacks import registry
    from specplug.stacks.base import BaseAdapter
    from specplug.stacks.metrics import Counters, StackMetrics

    class Toy(BaseAdapter):
        name = "toyserve"
        metrics = StackMetrics(markers=("toy:",), acceptance=Counters(
            "toy counters", drafts="toy:drafts", draft_tokens="toy:drafted", accepted="toy:accepted"))

    real_get = registry.get_adapter
    monkeypatch.setattr(registry, "stack_names", lambda: (*registry.STACK_PREFERENCE, "toyserve"))
    monkeypatch.setattr(registry, "get_adapter", lambda n: Toy() if n == "toyserve" else real_get(n))
    snap = parse_exposition("toy:drafts 4\ntoy:drafted 12\ntoy:accepted 6\n")
    acc = read_acceptance(None, snap)
    assert acc.source == "toy counters" and acc.mean_acceptance_length == pytest.approx(2.5)
    assert detect_stack(snap) == "toyserve"
    monkeypatch.setattr(registry, "stack_names", lambda: registry.STACK_PREFERENCE)  # uninstalled: unread
    assert read_acceptance(None, snap) is None and detect_stack(snap) is None
