"""Deploy renders: a docker-compose service, Kubernetes manifests and multi-node LeaderWorkerSets.

Everything is built from the (locked) Plan and the stack adapter's LaunchSpec, so the container runs the
exact argv the launch script would. Python builds the data (images, env, probes, volumes); the templates in
``templates/deploy/`` only lay it out with the header and comments a reviewer reads.

Secrets never reach a rendered file: API keys and hub tokens are ``secretKeyRef``s in Kubernetes and
``${VAR}`` references (read from the host's environment by compose) in docker-compose.

Each output folder gets ``specplug.rendered.yaml``, a manifest of what was rendered from which lock with which
options, so ``specplug check --rendered DIR`` can re-render and list stale or missing files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specplug.errors import SpecplugError
from specplug.fileio import write_atomic
from specplug.plan import Plan
from specplug.safetext import breaking_char
from specplug.stacks.protocol import StackImage
from specplug.stacks.registry import BUILTIN, get_adapter

TARGETS = ("compose", "k8s", "lws")
MANIFEST = "specplug.rendered.yaml"
WORKDIR = "/specplug"  # where LaunchSpec.files land inside the container (argv names them relatively)


@dataclass
class RenderContext:
    """Options that change rendered bytes; recorded in the manifest so check can reproduce them."""

    name: str
    image: str
    lock_file: str
    inputs_hash: str


# ---------------------------------------------------------------------------------------------- helpers


def default_name(plan: Plan) -> str:
    base = plan.model.hf_id.rstrip("/").split("/")[-1].lower()
    return dns_label(f"{base}-{plan.stack.name}")


def dns_label(text: str, limit: int = 40) -> str:
    """A DNS-1123 label short enough to take suffixes like '-model-cache' (Kubernetes caps names at 63)."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    s = re.sub(r"-{2,}", "-", s)[:limit].strip("-")
    if not s:
        raise SpecplugError(f"'{text}' gives an empty Kubernetes name.", "Pass --name with letters or digits.")
    return s


def stack_image(plan: Plan) -> StackImage | None:
    """The image the plan's stack adapter declares (None for a stack that names none)."""
    return get_adapter(plan.stack.name).image


def image_for(plan: Plan, override: str | None = None) -> str:
    if override:
        return override
    info = stack_image(plan)
    if info is None:
        raise SpecplugError(f"No container image is known for stack '{plan.stack.name}'.", "Pass --image REPOSITORY:TAG.")
    if info.dockerfile is not None:  # built locally, at this specplug's version
        from specplug import __version__

        return info.reference(__version__)
    if not plan.stack.version:
        raise SpecplugError(
            f"The plan does not pin a {plan.stack.name} version, so no image tag can be chosen.",
            "Set stack.version in specplug.yaml and re-plan (reproducible deploys need it), or pass --image.",
        )
    return info.reference(plan.stack.version)


def container_plan(plan: Plan) -> Plan:
    """The plan as it runs in a container: bound to all interfaces (the network boundary is the Service or
    the published port, which keeps the configured host)."""
    serve = plan.serve.model_copy(update={"host": "0.0.0.0"})
    return plan.model_copy(update={"serve": serve})


def launch_spec(plan: Plan):
    from specplug.validate import validate_plan

    plan = container_plan(plan)
    validate_plan(plan)  # the same refusals as render and launch, every problem at once
    return get_adapter(plan.stack.name).render_valid(plan)


def gpu_count(plan: Plan) -> int:
    info = stack_image(plan)
    if info is not None and not info.needs_gpu:
        return 0
    par = plan.parallelism
    # The GPUs the engine shards over (tensor x pipeline), which can be fewer than the machine has.
    return max(par.tensor_parallel_size * par.pipeline_parallel_size, 1)


def _argv(plan: Plan, argv: list[str]) -> list[str]:
    info = stack_image(plan)
    executables = dict(info.executable) if info else {}
    first = argv[0]
    base = os.path.basename(first)
    if base in executables:
        first = executables[base]
    elif os.path.isabs(first):
        # A path from the planning machine means nothing in the image; python's is the one we know to map.
        first = "python3" if base.startswith("python") else base
    return [first, *argv[1:]]


def _health_path(url: str | None) -> str:
    if not url:
        return "/health"
    from urllib.parse import urlsplit

    return urlsplit(url).path or "/"


def _cache_size_gi(plan: Plan) -> int:
    m = plan.memory
    if m is None:
        return 200
    per_gpu = m.target_weights_gb + m.drafter_weights_gb
    total = per_gpu * max(plan.parallelism.tensor_parallel_size * plan.parallelism.pipeline_parallel_size, 1)
    # Checkpoints on disk run a little larger than weights in memory (optimizer-free, but with extra files).
    return max(10, int(-(-total * 1.3 // 10) * 10))


def _header(ctx: RenderContext, what: str, notes: list[str]) -> str:
    from specplug import __version__
    from specplug.templating import comment_lines

    lines = [
        f"{what}: rendered by specplug {__version__} from {ctx.lock_file} (inputs {ctx.inputs_hash[:19]}).",
        "Do not edit: change specplug.yaml, run 'specplug plan' then 'specplug deploy'.",
        "'specplug check --rendered' fails when this file no longer matches the lock.",
    ]
    lines += [f"note: {n}" for n in notes]
    return comment_lines(lines)


def _dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        # Rendered manifests are read by people and by tools that dislike anchors: never alias repeated data.
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def text(dumper: yaml.SafeDumper, value: str):
        # Scripts read best as literal blocks; other line breaks (\r, NEL, U+2028) and control characters only
        # survive a round trip as double-quoted escapes.
        odd = breaking_char(value.replace("\n", ""))
        style = '"' if odd else ("|" if "\n" in value else None)
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return Dumper


def _environment():
    import yaml

    from specplug.templating import Verbatim, environment

    env = environment().overlay()
    _Dumper = _dumper()  # noqa: N806

    def toyaml(value: Any, indent: int = 0) -> str:
        text = yaml.dump(
            value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1_000_000, allow_unicode=True
        )
        pad = " " * indent
        # The dumper escaped every value (line breaks in a value become a block or quoted escapes).
        return Verbatim("\n".join(pad + ln if ln else ln for ln in text.rstrip("\n").split("\n")))

    env.filters["toyaml"] = toyaml
    return env


def _render(template: str, **ctx: Any) -> str:
    return _environment().get_template(f"deploy/{template}").render(**ctx)


# ---------------------------------------------------------------------------------------------- pieces


@dataclass
class Pieces:
    """What every target needs, computed once from the plan and the launch spec."""

    argv: list[str]
    env: dict[str, str]  # plain values
    secret_env: dict[str, str]  # variable in the container -> key in the secret (the caller's variable name)
    optional_secret_env: list[str]  # hub tokens: used when present
    files: dict[str, str]
    port: int
    health_path: str
    gpus: int
    cache_path: str
    notes: list[str]


def pieces(plan: Plan) -> Pieces:
    spec = launch_spec(plan)
    # A stack whose adapter names no image runs in the one the user gives (--image); Hugging Face's cache is
    # the best guess for where it keeps weights.
    info = stack_image(plan)
    cache_path, cache_env = (info.cache_path, info.cache_env) if info else ("/root/.cache/huggingface", ("HF_HOME",))
    env = dict(spec.env)
    for var in cache_env:
        env.setdefault(var, cache_path)
    notes = list(spec.notes)
    if plan.model.local_path:
        notes.append(f"the model is a local folder ({plan.model.local_path}); mount it at that path in the container")
    return Pieces(
        argv=_argv(plan, list(spec.argv)),
        env=dict(sorted(env.items())),
        secret_env=dict(sorted(spec.env_from.items())),
        optional_secret_env=sorted(v for v in spec.env_passthrough if v not in spec.env_from),
        files=dict(sorted(spec.files.items())),
        port=plan.serve.port,
        health_path=_health_path(spec.health_url),
        gpus=gpu_count(plan),
        cache_path=cache_path,
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------- compose


def _compose_escape(value: str) -> str:
    # Compose interpolates $VAR in every value; a literal dollar sign is written $$.
    return value.replace("$", "$$")


def _local_build(info: StackImage) -> dict[str, Any]:
    from specplug import __version__

    assert info.dockerfile is not None
    return {"context": ".", "dockerfile_inline": info.dockerfile.format(version=__version__, workdir=WORKDIR)}


def render_compose(plan: Plan, ctx: RenderContext) -> dict[str, str]:
    if plan.parallelism.num_nodes > 1:
        raise SpecplugError(
            f"The plan needs {plan.parallelism.num_nodes} nodes; docker-compose runs on one.",
            "Render a LeaderWorkerSet instead: 'specplug deploy --target lws'.",
        )
    p = pieces(plan)
    environment: dict[str, str] = {k: _compose_escape(v) for k, v in p.env.items()}
    for var, source in p.secret_env.items():
        environment[var] = f"${{{source}:?set {source} in the environment that runs docker compose}}"
    for var in p.optional_secret_env:
        environment[var] = f"${{{var}:-}}"
    volumes: list[Any] = [f"model-cache:{p.cache_path}"]
    volumes += [f"./files/{rel}:{WORKDIR}/{rel}:ro" for rel in p.files]
    if plan.model.local_path:
        # The long form: a folder with ':' in its name cannot split into another mount.
        local = _compose_escape(plan.model.local_path)
        volumes.append({"type": "bind", "source": local, "target": local, "read_only": True})
    # Publish on the configured host address: loopback unless specplug.yaml says otherwise.
    host = plan.serve.host
    service: dict[str, Any] = {"image": ctx.image}
    info = stack_image(plan)
    if info is not None and info.dockerfile is not None and ctx.image == image_for(plan):
        service["build"] = _local_build(info)
    service["entrypoint"] = [_compose_escape(a) for a in p.argv]
    if p.files:
        service["working_dir"] = WORKDIR
    service["environment"] = environment
    service["ports"] = [f"{host}:{p.port}:{p.port}"]
    service["volumes"] = volumes
    if p.gpus:
        service["ipc"] = "host"  # NCCL and the stacks' shared-memory queues outgrow Docker's 64 MB /dev/shm
        service["deploy"] = {
            "resources": {"reservations": {"devices": [{"driver": "nvidia", "count": p.gpus, "capabilities": ["gpu"]}]}}
        }
    service["healthcheck"] = {
        "test": ["CMD-SHELL", f"curl -fsS http://localhost:{p.port}{p.health_path} || exit 1"],
        "interval": "30s",
        "timeout": "5s",
        "retries": 3,
        # Weights download and load before the first healthy answer; do not count that as failure.
        "start_period": "30m",
    }
    service["restart"] = "unless-stopped"
    doc = {"name": ctx.name, "services": {ctx.name: service}, "volumes": {"model-cache": {}}}
    out = {"docker-compose.yaml": _render("compose.yaml.j2", header=_header(ctx, "docker-compose service", p.notes), doc=doc)}
    for rel, content in p.files.items():
        out[f"files/{rel}"] = content
    return out


# ---------------------------------------------------------------------------------------------- Kubernetes


def _labels(ctx: RenderContext, plan: Plan) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": ctx.name,
        "app.kubernetes.io/managed-by": "specplug",
        "specplug.dev/stack": plan.stack.name,
    }


def _k8s_env(p: Pieces, secret: str) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": _k8s_escape(v)} for k, v in p.env.items()]
    for var, key in p.secret_env.items():
        env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    for var in p.optional_secret_env:
        env.append({"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": var, "optional": True}}})
    return env


def _k8s_escape(value: str) -> str:
    # Kubernetes expands $(VAR) in command, args and env values (a drafter id could pull in a secret); $$ is a
    # literal dollar sign.
    return value.replace("$", "$$")


def _config_map_key(rel: str) -> str:
    return re.sub(r"[^-._a-zA-Z0-9]", "_", rel)


def _probes(p: Pieces) -> dict[str, Any]:
    get = {"httpGet": {"path": p.health_path, "port": "http"}}
    return {
        # Loading weights can take many minutes: the startup probe holds liveness off for up to an hour.
        "startupProbe": {**get, "periodSeconds": 10, "failureThreshold": 360},
        "readinessProbe": {**get, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "livenessProbe": {**get, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 5},
    }


def _container(
    ctx: RenderContext, p: Pieces, gpus: int, *, command: list[str], args: list[str] | None = None, serves: bool = True
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "server", "image": ctx.image, "command": [_k8s_escape(a) for a in command]}
    if args:
        c["args"] = [_k8s_escape(a) for a in args]
    if p.files:
        c["workingDir"] = WORKDIR
    c["env"] = _k8s_env(p, f"{ctx.name}-secrets")
    if serves:
        c["ports"] = [{"name": "http", "containerPort": p.port, "protocol": "TCP"}]
    if gpus:
        c["resources"] = {"requests": {"nvidia.com/gpu": gpus}, "limits": {"nvidia.com/gpu": gpus}}
    if serves:
        c.update(_probes(p))
    mounts = [{"name": "model-cache", "mountPath": p.cache_path}]
    if gpus:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if p.files:
        mounts.append({"name": "files", "mountPath": WORKDIR, "readOnly": True})
    c["volumeMounts"] = mounts
    return c


def _volumes(ctx: RenderContext, p: Pieces, gpus: int) -> list[dict[str, Any]]:
    vols: list[dict[str, Any]] = [{"name": "model-cache", "persistentVolumeClaim": {"claimName": f"{ctx.name}-model-cache"}}]
    if gpus:
        vols.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}})
    if p.files:
        items = [{"key": _config_map_key(rel), "path": rel} for rel in p.files]
        vols.append({"name": "files", "configMap": {"name": f"{ctx.name}-files", "items": items}})
    return vols


def _pvc(ctx: RenderContext, plan: Plan, labels: dict[str, str], access: str, notes: list[str]) -> str:
    return _render(
        "k8s/pvc.yaml.j2",
        header=_header(ctx, "model cache volume", notes),
        name=f"{ctx.name}-model-cache",
        labels=labels,
        access=access,
        size=f"{_cache_size_gi(plan)}Gi",
    )


def _config_map(ctx: RenderContext, p: Pieces, labels: dict[str, str]) -> dict[str, str]:
    if not p.files:
        return {}
    data = {_config_map_key(rel): content for rel, content in p.files.items()}
    return {
        "configmap.yaml": _render(
            "k8s/configmap.yaml.j2", header=_header(ctx, "files the server reads", []), name=f"{ctx.name}-files", labels=labels, data=data
        )
    }


def _service(ctx: RenderContext, p: Pieces, labels: dict[str, str], selector: dict[str, str]) -> str:
    return _render(
        "k8s/service.yaml.j2",
        header=_header(ctx, "Service for the OpenAI-compatible API", []),
        name=ctx.name,
        labels=labels,
        selector=selector,
        port=p.port,
    )


def _secret_note(p: Pieces, ctx: RenderContext) -> list[str]:
    keys = sorted(set(p.secret_env.values()) | set(p.optional_secret_env))
    if not keys:
        return []
    return [
        f"secrets come from the Secret '{ctx.name}-secrets' (keys: {', '.join(keys)}), created outside this repo, e.g. "
        f"kubectl create secret generic {ctx.name}-secrets --from-literal=HF_TOKEN=..."
    ]


def render_k8s(plan: Plan, ctx: RenderContext) -> dict[str, str]:
    if plan.parallelism.num_nodes > 1:
        raise SpecplugError(
            f"The plan spans {plan.parallelism.num_nodes} nodes; a Deployment's pod runs on one.",
            "Render a LeaderWorkerSet instead: 'specplug deploy --target lws'.",
        )
    p = pieces(plan)
    labels = _labels(ctx, plan)
    selector = {"app.kubernetes.io/name": ctx.name}
    notes = p.notes + _secret_note(p, ctx)
    pod = {
        "containers": [_container(ctx, p, p.gpus, command=p.argv)],
        "volumes": _volumes(ctx, p, p.gpus),
    }
    out = {
        "k8s/deployment.yaml": _render(
            "k8s/deployment.yaml.j2",
            header=_header(ctx, "Kubernetes Deployment", notes),
            name=ctx.name,
            labels=labels,
            selector=selector,
            pod=pod,
        ),
        "k8s/service.yaml": _service(ctx, p, labels, selector),
        "k8s/pvc.yaml": _pvc(ctx, plan, labels, "ReadWriteOnce", []),
    }
    out.update({f"k8s/{k}": v for k, v in _config_map(ctx, p, labels).items()})
    return out


# ---------------------------------------------------------------------------------------------- LeaderWorkerSet


def render_lws(plan: Plan, ctx: RenderContext) -> dict[str, str]:
    nodes = plan.parallelism.num_nodes
    adapter = get_adapter(plan.stack.name)
    if not adapter.multi_node:
        able = [a for a in (get_adapter(n) for n in BUILTIN) if a.multi_node]
        raise SpecplugError(
            f"{adapter.display_name} serves from one node, and this plan needs {nodes}.",
            f"Use {' or '.join(f'{a.display_name} ({a.multi_node})' for a in able)} for models that need several "
            "nodes, or pick GPUs with more memory so one node fits.",
        )
    p = pieces(plan)
    total = max(p.gpus, plan.hardware.num_gpus)
    per_node = max(1, -(-total // nodes))
    labels = _labels(ctx, plan)
    # LeaderWorkerSet gives every pod the leader's address and its own index in the group.
    leader_script, worker_script = adapter.node_scripts(
        list(p.argv), nodes, per_node, "${LWS_LEADER_ADDRESS}", "${LWS_WORKER_INDEX}"
    )
    leader = _container(ctx, p, per_node, command=["/bin/bash", "-c"], args=[leader_script])
    worker = _container(ctx, p, per_node, command=["/bin/bash", "-c"], args=[worker_script], serves=False)
    vols = _volumes(ctx, p, per_node)
    role_leader = {**labels, "specplug.dev/role": "leader"}
    role_worker = {**labels, "specplug.dev/role": "worker"}
    notes = p.notes + _secret_note(p, ctx) + [
        f"{nodes} nodes x {per_node} GPUs; needs the LeaderWorkerSet controller (kubernetes-sigs/lws) installed",
        "the model cache claim is ReadWriteMany so every node of the group shares one download",
    ]
    spec = {
        "replicas": 1,
        "startupPolicy": "LeaderCreated",
        # A group is only whole with every node: restart all of it when one pod fails.
        "leaderWorkerTemplate": {
            "size": nodes,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": {"metadata": {"labels": role_leader}, "spec": {"containers": [leader], "volumes": vols}},
            "workerTemplate": {"metadata": {"labels": role_worker}, "spec": {"containers": [worker], "volumes": vols}},
        },
        # One group holds every GPU of several nodes: replace it in place rather than surge a second one.
        "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1}},
    }
    out = {
        "lws/leaderworkerset.yaml": _render(
            "lws/leaderworkerset.yaml.j2",
            header=_header(ctx, "LeaderWorkerSet (multi-node)", notes),
            name=ctx.name,
            labels=labels,
            spec=spec,
        ),
        "lws/service.yaml": _service(ctx, p, labels, {"app.kubernetes.io/name": ctx.name, "specplug.dev/role": "leader"}),
        "lws/pvc.yaml": _pvc(ctx, plan, labels, "ReadWriteMany", []),
    }
    out.update({f"lws/{k}": v for k, v in _config_map(ctx, p, labels).items()})
    return out


# ---------------------------------------------------------------------------------------------- entry points

_RENDERERS = {"compose": render_compose, "k8s": render_k8s, "lws": render_lws}


def default_targets(plan: Plan) -> list[str]:
    return ["compose", "k8s"] if plan.parallelism.num_nodes == 1 else ["lws"]


def render_targets(plan: Plan, targets: list[str], ctx: RenderContext) -> dict[str, str]:
    out: dict[str, str] = {}
    for t in targets:
        if t not in _RENDERERS:
            raise SpecplugError(f"Unknown deploy target '{t}'.", f"Targets: {', '.join(TARGETS)}.")
        out.update(_RENDERERS[t](plan, ctx))
    return dict(sorted(out.items()))


def manifest_text(ctx: RenderContext, targets: list[str], files: list[str], image_override: str | None, config_rel: str) -> str:
    import yaml

    data = {
        "config": config_rel,
        "inputs": ctx.inputs_hash,
        "name": ctx.name,
        "image": image_override,
        "targets": targets,
        "files": sorted(files),
    }
    return (
        "# What 'specplug deploy' rendered here; 'specplug check --rendered' re-renders it from the lock and compares.\n"
        + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    )


def context_for(plan: Plan, *, name: str | None, image: str | None, lock_file: str, inputs_hash: str) -> RenderContext:
    return RenderContext(
        name=dns_label(name) if name else default_name(plan),
        image=image_for(plan, image),
        lock_file=lock_file,
        inputs_hash=inputs_hash,
    )


def expected_files(
    plan: Plan, targets: list[str], *, name: str | None, image: str | None, lock_file: str, inputs_hash: str, config_rel: str
) -> dict[str, str]:
    """Every file a deploy render writes into its folder, manifest included: what check compares against."""
    ctx = context_for(plan, name=name, image=image, lock_file=lock_file, inputs_hash=inputs_hash)
    files = render_targets(plan, targets, ctx)
    files[MANIFEST] = manifest_text(ctx, targets, list(files), image, config_rel)
    return files


def write_files(out_dir: Path, files: dict[str, str]) -> list[Path]:
    written = []
    for rel, content in files.items():
        target = out_dir / rel
        if not target.is_file() or target.read_text(encoding="utf-8") != content:
            write_atomic(target, content)
        written.append(target)
    return written
