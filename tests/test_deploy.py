"""Deploy renders: Kubernetes manifests validate against the Kubernetes schemas (LeaderWorkerSet against its
recorded CRD schema), compose files have the shape compose expects, and secrets are only ever references."""

from __future__ import annotations

import copy
from importlib import resources

import pytest
import yaml

from specplug import deploy
from specplug.config import ServeSpec, WorkloadSpec
from specplug.errors import SpecplugError
from specplug.plan import MemoryBudget, ModelRef, Parallelism, Plan, Speculation, StackRef
from specplug.probe import Hardware

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="test dependency kubernetes-validate")
K8S_VERSION = "1.30.0"
HASH = "sha256:" + "0" * 64

CASES = {
    "vllm": ("0.10.2", "eagle3", "meta-llama/Llama-3.1-70B-Instruct", "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", 4),
    "sglang": ("0.5.2", "ngram", "Qwen/Qwen2.5-Coder-32B-Instruct", None, 2),
    "trtllm": ("1.0.0", "mtp", "deepseek-ai/DeepSeek-V3", None, 8),
    "llamacpp": ("b6000", "draft_model", "Qwen/Qwen2.5-32B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", 1),
    "tgi": ("3.3.4", "ngram", "mistralai/Mistral-7B-Instruct-v0.3", None, 1),
}


def make_plan(stack="vllm", version="0.10.2", method="eagle3", model="meta-llama/Llama-3.1-70B-Instruct",
              drafter="yuhuili/EAGLE3-LLaMA3.3-Instruct-70B", tp=4, pp=1, nodes=1, api_key_env=None) -> Plan:
    return Plan(
        model=ModelRef(name=model, hf_id=model),
        hardware=Hardware(gpu="H100-SXM", num_gpus=tp * pp, memory_gb=80, source="named"),
        stack=StackRef(name=stack, version=version, version_source="pinned"),
        workload=WorkloadSpec(),
        parallelism=Parallelism(tensor_parallel_size=tp, pipeline_parallel_size=pp, num_nodes=nodes),
        speculation=Speculation(method=method, drafter=drafter, num_speculative_tokens=3),
        serve=ServeSpec(api_key_env=api_key_env),
        memory=MemoryBudget(gpu_memory_gb=80, target_weights_gb=35.3),
    )


def render(plan: Plan, targets: list[str], **kw) -> dict[str, str]:
    return deploy.expected_files(plan, targets, name=kw.get("name"), image=kw.get("image"), lock_file="specplug.lock.yaml",
                                 inputs_hash=HASH, config_rel="../specplug.yaml")


def k8s_validate(doc: dict) -> None:
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:  # keep the failure readable: the schema dump is huge
        raise AssertionError(f"{doc['kind']} does not validate: {str(exc).splitlines()[0]}") from None


def pod_spec(files: dict[str, str]) -> dict:
    return yaml.safe_load(files["k8s/deployment.yaml"])["spec"]["template"]["spec"]


@pytest.mark.parametrize("stack", sorted(CASES))
def test_k8s_manifests_validate_against_kubernetes_schemas(stack):
    version, method, model, drafter, tp = CASES[stack]
    files = render(make_plan(stack, version, method, model, drafter, tp), ["k8s"])
    docs = [yaml.safe_load(v) for k, v in files.items() if k.startswith("k8s/")]
    assert {d["kind"] for d in docs} >= {"Deployment", "Service", "PersistentVolumeClaim"}
    for doc in docs:
        k8s_validate(doc)


def test_deployment_requests_gpus_probes_health_and_mounts_the_cache():
    files = render(make_plan(), ["k8s"])
    spec = pod_spec(files)
    c = spec["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["image"] == "vllm/vllm-openai:v0.10.2"
    assert {"name": "model-cache", "mountPath": "/root/.cache/huggingface"} in c["volumeMounts"]
    claim = spec["volumes"][0]["persistentVolumeClaim"]["claimName"]
    assert yaml.safe_load(files["k8s/pvc.yaml"])["metadata"]["name"] == claim
    # The container binds every interface; the Service is the boundary.
    assert c["command"][c["command"].index("--host") + 1] == "0.0.0.0"
    service = yaml.safe_load(files["k8s/service.yaml"])
    assert service["spec"]["selector"] == yaml.safe_load(files["k8s/deployment.yaml"])["spec"]["selector"]["matchLabels"]


def test_secrets_are_secret_key_refs_and_compose_references_never_values(monkeypatch):
    monkeypatch.setenv("SPECPLUG_API_KEY", "sk-do-not-leak")
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_leak")
    files = render(make_plan(api_key_env="SPECPLUG_API_KEY"), ["compose", "k8s"])
    assert not any("do-not-leak" in t or "do_not_leak" in t for t in files.values())
    env = {e["name"]: e for e in pod_spec(files)["containers"][0]["env"]}
    assert env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "SPECPLUG_API_KEY"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True
    svc = next(iter(yaml.safe_load(files["docker-compose.yaml"])["services"].values()))
    assert svc["environment"]["VLLM_API_KEY"].startswith("${SPECPLUG_API_KEY:?")
    assert svc["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}"


# The compose-spec service keys specplug writes (compose-spec/compose-spec schema/compose-spec.json,
# definitions.service.properties); the whole schema is not vendored, so the shape is checked here.
COMPOSE_SERVICE_KEYS = {
    "image", "build", "entrypoint", "working_dir", "environment", "ports", "volumes", "ipc", "deploy", "healthcheck", "restart",
}


@pytest.mark.parametrize("stack", sorted(CASES))
def test_compose_service_shape(stack):
    version, method, model, drafter, tp = CASES[stack]
    files = render(make_plan(stack, version, method, model, drafter, tp), ["compose"])
    doc = yaml.safe_load(files["docker-compose.yaml"])
    assert set(doc) == {"name", "services", "volumes"}
    (name, svc), = doc["services"].items()
    assert set(svc) <= COMPOSE_SERVICE_KEYS and name == doc["name"]
    assert all(isinstance(a, str) for a in svc["entrypoint"])
    assert svc["ports"] == ["127.0.0.1:8000:8000"]  # published on the configured (loopback) host only
    dev = svc["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev == {"driver": "nvidia", "count": tp, "capabilities": ["gpu"]}
    for vol in svc["volumes"]:
        src = vol.split(":")[0]
        assert src in doc["volumes"] or src.startswith("./files/")
        if src.startswith("./files/"):
            assert src[2:] in files  # every mounted file is rendered beside the compose file


def test_trtllm_options_file_travels_as_configmap_and_compose_mount():
    version, method, model, drafter, tp = CASES["trtllm"]
    files = render(make_plan("trtllm", version, method, model, drafter, tp), ["compose", "k8s"])
    cm = yaml.safe_load(files["k8s/configmap.yaml"])
    assert any("MTP" in v for v in cm["data"].values())
    c = pod_spec(files)["containers"][0]
    assert c["workingDir"] == deploy.WORKDIR
    assert c["image"] == "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"


def _lws_schema() -> dict:
    text = resources.files("specplug.schemas").joinpath("leaderworkerset-v1.openapi.yaml").read_text()
    schema = yaml.safe_load(text)

    def relax(node):
        # Structural schema semantics as the API server applies them with strict field validation:
        # unknown fields are errors; the embedded pod specs are checked separately against core/v1.
        if isinstance(node, dict):
            if node.pop("x-specplug-podspec", False):
                node["type"] = "object"
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                relax(v)
        elif isinstance(node, list):
            for v in node:
                relax(v)
    relax(schema)
    return schema


def validate_lws(doc: dict) -> None:
    import jsonschema

    jsonschema.validate(doc, _lws_schema())
    for role in ("leaderTemplate", "workerTemplate"):
        template = copy.deepcopy(doc["spec"]["leaderWorkerTemplate"][role])
        k8s_validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})


def test_405b_on_h100_renders_a_vllm_ray_leaderworkerset():
    # vLLM before 0.30 refuses speculation with pipeline parallelism (the compatibility table's row).
    plan = make_plan(version="0.32.0", model="meta-llama/Llama-3.1-405B-Instruct", tp=8, pp=2, nodes=2)
    files = render(plan, ["lws"])
    lws = yaml.safe_load(files["lws/leaderworkerset.yaml"])
    validate_lws(lws)
    tmpl = lws["spec"]["leaderWorkerTemplate"]
    assert tmpl["size"] == 2
    leader = tmpl["leaderTemplate"]["spec"]["containers"][0]
    worker = tmpl["workerTemplate"]["spec"]["containers"][0]
    assert "ray start --head" in leader["args"][0] and "--distributed-executor-backend ray" in leader["args"][0]
    assert "LWS_LEADER_ADDRESS" in worker["args"][0] and "readinessProbe" not in worker
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == 8
    for k in ("lws/service.yaml", "lws/pvc.yaml"):
        k8s_validate(yaml.safe_load(files[k]))
    assert yaml.safe_load(files["lws/pvc.yaml"])["spec"]["accessModes"] == ["ReadWriteMany"]


def test_sglang_multi_node_flags():
    plan = make_plan("sglang", "0.5.2", "ngram", "meta-llama/Llama-3.1-405B-Instruct", None, tp=16, nodes=2)
    lws = yaml.safe_load(render(plan, ["lws"])["lws/leaderworkerset.yaml"])
    validate_lws(lws)
    written = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"][0]
    assert "$(" not in written.replace("$$", "")  # nothing Kubernetes would expand itself
    script = written.replace("$$", "$")  # what the container runs: Kubernetes reads $$ as a literal $
    assert "--nnodes 2" in script and '--node-rank "${LWS_WORKER_INDEX}"' in script
    assert '--dist-init-addr "${LWS_LEADER_ADDRESS}:20000"' in script


def test_lws_rejects_an_invalid_field():
    lws = yaml.safe_load(render(make_plan(version="0.32.0", tp=8, pp=2, nodes=2), ["lws"])["lws/leaderworkerset.yaml"])
    lws["spec"]["leaderWorkerTemplate"]["sizee"] = 2
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        validate_lws(lws)


def test_targets_that_cannot_hold_the_plan_say_what_to_use():
    multi = make_plan(tp=8, pp=2, nodes=2)
    for target in ("compose", "k8s"):
        with pytest.raises(SpecplugError, match="--target lws"):
            render(multi, [target])
    with pytest.raises(SpecplugError, match="vLLM .Ray. or SGLang"):
        render(make_plan("tgi", "3.3.4", "ngram", "x/y", None, tp=8, nodes=2), ["lws"])
    unpinned = make_plan().model_copy(update={"stack": StackRef(name="vllm", version=None)})
    with pytest.raises(SpecplugError, match="stack.version"):
        render(unpinned, ["compose"])
    assert deploy.default_targets(multi) == ["lws"]


def test_image_and_name_overrides_are_recorded_for_check():
    files = render(make_plan(), ["k8s"], name="Chat API", image="registry.local/vllm:pinned")
    assert pod_spec(files)["containers"][0]["image"] == "registry.local/vllm:pinned"
    meta = yaml.safe_load(files[deploy.MANIFEST])
    assert meta["image"] == "registry.local/vllm:pinned" and meta["name"] == "chat-api"


@pytest.mark.parametrize(("stack", "want"), [
    ("vllm", "vllm/vllm-openai:v0.10.2"),
    ("sglang", "lmsysorg/sglang:v0.5.2"),
    ("trtllm", "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"),
    ("llamacpp", "ghcr.io/ggml-org/llama.cpp:server-cuda-b6000"),  # build numbers keep one 'b'
    ("tgi", "ghcr.io/huggingface/text-generation-inference:3.3.4"),
])
def test_each_stack_deploys_its_adapters_image_with_its_cache(stack, want):
    version, method, model, drafter, tp = CASES[stack]
    compose = yaml.safe_load(render(make_plan(stack, version, method, model, drafter, tp), ["compose"])["docker-compose.yaml"])
    (service,) = compose["services"].values()
    assert service["image"] == want and "build" not in service
    cache = {"llamacpp": "/root/.cache/llama.cpp", "tgi": "/data"}.get(stack, "/root/.cache/huggingface")
    assert f"model-cache:{cache}" in service["volumes"] and service["environment"]["HF_HOME"] == cache
    if stack == "llamacpp":
        assert service["entrypoint"][0] == "/app/llama-server" and service["environment"]["LLAMA_CACHE"] == cache


def test_embedded_stack_builds_its_image_at_this_specplug_version_without_gpus():
    from specplug import __version__

    plan = make_plan("embedded", "0.1.0", "ngram", "smollm2-135m", None, 1)
    compose = yaml.safe_load(render(plan, ["compose"])["docker-compose.yaml"])
    (service,) = compose["services"].values()
    assert service["image"] == f"specplug-embedded:{__version__}"
    assert f"'specplug[runtime]=={__version__}'" in service["build"]["dockerfile_inline"]
    assert "deploy" not in service  # no GPU reservation


def test_a_stack_without_an_image_asks_for_one(monkeypatch):
    from specplug.adapters.vllm import VLLMAdapter

    monkeypatch.setattr(VLLMAdapter, "image", None)
    with pytest.raises(SpecplugError, match="No container image is known for stack 'vllm'") as err:
        render(make_plan(), ["compose"])
    assert "--image" in err.value.hint
    # Given one, it deploys with the Hugging Face cache mounted.
    files = render(make_plan(), ["compose"], image="registry.local/custom:1")
    (service,) = yaml.safe_load(files["docker-compose.yaml"])["services"].values()
    assert service["image"] == "registry.local/custom:1"
    assert "model-cache:/root/.cache/huggingface" in service["volumes"]
