import pytest

from specplug.config import Config, SpeculationSpec, dump_config, json_schema, parse_config
from specplug.errors import ConfigError
from specplug.stacks.registry import stack_names

FULL = """
version: 1
model: llama-3.1-70b
stack: {name: sglang, version: "0.5.23"}
hardware: {gpu: h100, num_gpus: 4}
workload: {type: code-edit, concurrency: 8, input_len: 2048, output_len: 512, temperature: 0.7}
speculation:
  method: eagle3
  drafter: yuhuili/EAGLE3-LLaMA3.3-Instruct-70B
  num_speculative_tokens: 3
  tree: {steps: 3, topk: 1, num_draft_tokens: 4}
  schedule:
    - {min_batch: 1, max_batch: 16, num_speculative_tokens: 3}
    - {min_batch: 17, num_speculative_tokens: 0}
serve: {host: 127.0.0.1, port: 30000, tensor_parallel_size: 4, extra_args: ["--enable-metrics"]}
policy: {stack_factors: {sglang: 1.0}}
fallback: embedded
"""


def test_full_file_round_trips():
    cfg = parse_config(FULL)
    assert cfg.stack.name == "sglang" and cfg.hardware.num_gpus == 4
    assert cfg.speculation.tree.num_draft_tokens == 4
    again = parse_config(dump_config(cfg))
    assert again == cfg


def test_stack_shorthand_and_defaults():
    cfg = parse_config("model: qwen3-8b\nstack: llamacpp\n")
    assert cfg.stack.name == "llamacpp" and cfg.hardware == "auto" and cfg.speculation == "auto"
    assert cfg.serve.host == "127.0.0.1"


def test_empty_file_is_all_defaults():
    assert parse_config("") == Config()


def test_unknown_key_names_line_and_suggests():
    with pytest.raises(ConfigError) as exc:
        parse_config("model: x\nworkload:\n  type: chat\n  concurency: 3\n", "my.yaml")
    msg = str(exc.value)
    assert "my.yaml:4" in msg and "concurency" in msg and "Did you mean 'concurrency'" in msg


def test_malformed_yaml_points_at_the_line():
    with pytest.raises(ConfigError) as exc:
        parse_config("model: x\nserve:\n  port: [1\n", "s.yaml")
    assert "s.yaml:" in str(exc.value) and "invalid YAML" in str(exc.value)


def test_bad_values_are_explained():
    with pytest.raises(ConfigError, match="num_gpus"):
        parse_config("hardware: {gpu: h100, num_gpus: 0}\n")
    with pytest.raises(ConfigError, match="prompt_lookup_min"):
        parse_config("speculation: {method: ngram, prompt_lookup_min: 5, prompt_lookup_max: 2}\n")
    with pytest.raises(ConfigError, match="method"):
        parse_config("speculation: {method: eagle4}\n")


def test_newer_schema_version_asks_for_upgrade():
    with pytest.raises(ConfigError, match="upgrade specplug"):
        parse_config("version: 99\n")


def test_top_level_must_be_a_mapping():
    with pytest.raises(ConfigError, match="mapping"):
        parse_config("- a\n- b\n")


def test_json_schema_validates_a_real_file_and_rejects_unknown_keys():
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = json_schema(stack_names())
    jsonschema.validate(yaml.safe_load(FULL), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model": "x", "stak": "vllm"}, schema)


def test_speculation_spec_python_validation():
    with pytest.raises(ValueError):
        SpeculationSpec(method="ngram", prompt_lookup_min=4, prompt_lookup_max=2)


def test_json_schema_accepts_the_stack_shorthand():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate({"model": "x", "stack": "vllm"}, json_schema(stack_names()))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model": "x", "stack": "vllmx"}, json_schema(stack_names()))


def test_speculation_is_read_as_the_member_its_method_names_with_that_methods_rules():
    from specplug.config import CopySpeculation, DrafterSpeculation, NoSpeculation

    read = {m: type(parse_config(f"speculation: {{method: {m}}}\n").speculation) for m in ("none", "suffix", "eagle3")}
    assert read == {"none": NoSpeculation, "suffix": CopySpeculation, "eagle3": DrafterSpeculation}
    # The lookup window is a copy method's rule; a drafter's method never reads it.
    with pytest.raises(ConfigError, match=r"specplug.yaml:1: speculation: prompt_lookup_min \(5\)"):
        parse_config("speculation: {method: lookahead, prompt_lookup_min: 5, prompt_lookup_max: 2}\n")
    with pytest.raises(ConfigError, match="speculation.method: Field required"):
        parse_config("speculation: {drafter: x}\n")
    with pytest.raises(ConfigError, match="speculation.method: Input should be 'none', 'ngram'"):
        parse_config("speculation: {method: eagle4}\n")
    # Built in code, it is held to the same rules, and becomes its member inside a Config.
    assert type(Config(speculation=SpeculationSpec(method="mtp")).speculation) is DrafterSpeculation


def test_json_schema_picks_the_speculation_member_by_method():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json_schema(stack_names())
    mapping = schema["properties"]["speculation"]["anyOf"][1]["discriminator"]["mapping"]
    assert mapping["ngram"].endswith("CopySpeculation") and mapping["mtp"].endswith("DrafterSpeculation")
    jsonschema.validate({"speculation": {"method": "eagle3", "drafter": "x", "num_speculative_tokens": 3}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"speculation": {"method": "eagle4"}}, schema)


def test_every_committed_example_still_parses():
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*/specplug.yaml"))
    assert files and all(parse_config(f.read_text(), str(f)) for f in files)


def test_sampled_drafts_are_for_drafters_not_copy_methods():
    with pytest.raises(ConfigError, match="draft_sampling applies to drafters; ngram copies"):
        parse_config("model: m\nspeculation: {method: ngram, draft_sampling: probabilistic}\n")
    cfg = parse_config("model: m\nspeculation: {method: eagle3, drafter: x, draft_sampling: probabilistic}\n")
    assert cfg.speculation.draft_sampling == "probabilistic"


def test_method_none_refuses_the_controls_that_shape_speculation():
    with pytest.raises(ConfigError, match="verification, acceptance_floor|acceptance_floor, verification"):
        parse_config("model: m\nspeculation: {method: none, verification: block, acceptance_floor: 0.3}\n")
