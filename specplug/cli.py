"""The ``specplug`` command line: a click group whose commands load lazily from specplug.commands.

Each command lives in its own module and is imported only when it runs, so ``specplug --help`` and the
light commands never import torch, transformers or a serving stack.
"""

from __future__ import annotations

import importlib
import sys

import click

from specplug import __version__
from specplug.errors import MissingExtra, SpecplugError
from specplug.output import silence_stdout

# name -> ("module:attribute", one-line help), in the order a user meets them. Adding a command means
# adding its module and one line here; listing commands imports none of them.
_TABLE: dict[str, tuple[str, str]] = {
    "recommend": ("specplug.commands.recommend:recommend", "Decide technique, drafter, k and schedule; predict the speedup."),
    "estimate": ("specplug.commands.estimate:estimate", "Score one fixed configuration: speedup and acceptance length."),
    "init": ("specplug.commands.init:init", "Write a commented specplug.yaml."),
    "plan": ("specplug.commands.plan:plan", "Resolve specplug.yaml into specplug.lock.yaml (deterministic)."),
    "render": ("specplug.commands.render:render", "Render a stack's launch script and files (or the launch spec)."),
    "launch": ("specplug.commands.launch:launch", "Start a stack with the plan: preflight, health wait, supervision."),
    "deploy": ("specplug.commands.deploy:deploy", "Render docker-compose, Kubernetes or LeaderWorkerSet manifests."),
    "check": ("specplug.commands.check:check", "CI check: schema, lock drift, stale renders, compatibility."),
    "migrate": ("specplug.commands.migrate:migrate", "Bring specplug.yaml to the current schema version."),
    "generate": ("specplug.commands.generate:generate", "Generate text with the embedded speculative runtime."),
    "bench": ("specplug.commands.bench:bench", "Measure an endpoint against a baseline: throughput, latency, acceptance."),
    "verify": ("specplug.commands.verify:verify", "Check a speculative endpoint returns the baseline's greedy outputs."),
    "calibrate": ("specplug.commands.calibrate:calibrate", "Compare measured with predicted acceptance; write a calibration."),
    "tune": ("specplug.commands.tune:tune", "Measure candidates against a control at your load; pin what wins."),
    "stacks": ("specplug.commands.stacks:stacks", "List stack adapters, installed versions and supported techniques."),
    "policy": ("specplug.commands.policy:policy", "Show the merged policy data: priors, stack factors, rules."),
    "models": ("specplug.commands.models:models", "The model catalog: list, search, show."),
    "gpus": ("specplug.commands.gpus:gpus", "List the GPU catalog, or show one GPU."),
    "probe": ("specplug.commands.probe:probe", "Read this machine's GPUs (NVML) and map them to the catalog."),
    "schema": ("specplug.commands.schema:schema", "Print the JSON Schema of specplug.yaml."),
}
COMMANDS: dict[str, str] = {name: target for name, (target, _) in _TABLE.items()}
HELP: dict[str, str] = {name: text for name, (_, text) in _TABLE.items()}


class LazyGroup(click.Group):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            text = HELP.get(name)
            if text is None:  # a command without a listed summary: load it for its own
                cmd = self.get_command(ctx, name)
                text = cmd.get_short_help_str(limit=80) if cmd else ""
            rows.append((name, text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except MissingExtra as exc:
            # The library says what needs the extra in its own terms; the user ran a command, so name that.
            raise exc.needed_by(f"{ctx.command_path} {ctx.invoked_subcommand}") from None

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = args[0] if args else None
        if name is not None and name not in COMMANDS and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise click.UsageError(f"No such command '{name}'.{hint} Run 'specplug --help' for the list.")
        return super().resolve_command(ctx, args)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, "--version", prog_name="specplug")
def cli() -> None:
    """Speculative decoding for your LLM serving stack: decide, configure, launch, measure."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors print one paragraph and exit 1, never a traceback."""
    sys.exit(_run(argv))


def _run(argv: list[str] | None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="specplug", standalone_mode=False)
        # Output still buffered would meet a closed pipe in the interpreter's exit, out of reach of the handler.
        sys.stdout.flush()
        return rv if isinstance(rv, int) else 0
    except SpecplugError as exc:
        _print_error(exc)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return 130
    except BrokenPipeError:  # whoever read our output stopped early (``| head``): no failure
        silence_stdout()
        return 0
    except Exception as exc:  # a bug of ours: one line for the user, the traceback on request
        import os

        if os.environ.get("SPECPLUG_DEBUG"):
            raise
        click.echo(
            f"Internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in specplug; rerun with SPECPLUG_DEBUG=1 for the traceback and report it.",
            err=True,
        )
        return 1


def _print_error(exc: SpecplugError) -> None:
    text = f"Error: {exc.message}"
    if exc.hint:
        text += f"\n{exc.hint}"
    click.echo(text, err=True)


if __name__ == "__main__":
    main()
