"""specplug policy show: the merged policy (shipped + fitted + your overrides)."""

from __future__ import annotations

import click

from specplug.commands._common import config_option
from specplug.commands._output import output_option
from specplug.output import emit


@click.group()
def policy() -> None:
    """The policy data: acceptance priors, stack cost factors, rules."""


@policy.command("show")
@click.option("--policy", "policy_path", type=click.Path(dir_okay=False), default=None, help="Policy overrides (YAML).")
@config_option
@output_option
def show(policy_path, config_path, output) -> None:
    """Print the merged, validated policy (shipped defaults, fitted priors, config 'policy:', then --policy)."""
    from specplug.commands._common import read_config
    from specplug.policy.data import load_policy

    cfg, _ = read_config(config_path)
    pol = load_policy(policy_path, cfg.policy or None)

    def render(p):
        from specplug.output import table

        workloads = sorted({w for m in p.acceptance.methods.values() for w in m.alpha})
        acc = table(
            "acceptance priors: first-position alpha at T=0 (decay per position, logit slope per unit T)",
            ["method", "kind", "decay", "T slope", *workloads],
            [
                (name, m.kind, f"{m.decay:.2f}", f"{m.temperature_slope:+.2f}", *(f"{m.alpha_for(w):.2f}" for w in workloads))
                for name, m in p.acceptance.methods.items()
            ],
        )
        st = table(
            "stack cost factors",
            ["stack", "BW eff", "FLOP eff", "layer ms", "fwd ms", "step ms", "spec ms", "layer us", "MoE layer us"],
            [
                (n, f"{s.bw_efficiency:.2f}", f"{s.flops_efficiency:.2f}", f"{s.layer_overhead_ms:.3f}", f"{s.forward_overhead_ms:.2f}",
                 f"{s.step_overhead_ms:.2f}", f"{s.spec_overhead_ms:.2f}", f"{s.layer_latency_us:g}", f"{s.moe_layer_latency_us:g}")
                for n, s in [*p.stacks.items(), ("(default)", p.stack_default)]
            ],
        )
        r = p.rules
        rules = table("rules", ["rule", "value"], [(k, v) for k, v in r.model_dump().items()])
        extra = table(
            "two-model and tree drafting",
            ["parameter", "value"],
            [
                ("draft_model.size_slope", p.acceptance.draft_model.size_slope),
                ("draft_model.reference_ratio", p.acceptance.draft_model.reference_ratio),
                ("draft_model.params_slope", p.acceptance.draft_model.params_slope),
                ("draft_model.reference_params_b", p.acceptance.draft_model.reference_params_b),
                ("tree.gain", p.acceptance.tree.gain),
                ("tree.confidence", p.acceptance.tree.confidence),
                ("max_alpha", p.acceptance.max_alpha),
            ],
        )
        return [acc, extra, st, rules]

    emit(pol, output, render)
