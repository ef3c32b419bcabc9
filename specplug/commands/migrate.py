"""specplug migrate: rewrite specplug.yaml from an older schema version, keeping comments."""

from __future__ import annotations

import click

from specplug.commands._common import config_option
from specplug.commands._output import output_option


@click.command()
@config_option
@click.option("--check", "check_only", is_flag=True, help="Write nothing; exit 1 if the file needs migrating.")
@click.option("--diff", "show_diff", is_flag=True, help="Print the change as a unified diff.")
@output_option(help="table: what changed, in words; json or yaml: the same as data (with the diff when --diff).")
def migrate(config_path: str | None, check_only: bool, show_diff: bool, output: str) -> None:
    """Bring specplug.yaml to the current schema version and say what changed.

    Comments and layout are kept: only the lines that change are edited. A file already at the current
    version is left untouched.
    """
    import difflib
    from pathlib import Path

    from specplug.config import DEFAULT_CONFIG
    from specplug.errors import SpecplugError
    from specplug.migrate import migrate_file

    path = Path(config_path or DEFAULT_CONFIG)
    if not path.is_file():
        raise SpecplugError(f"No config file at {path}.", "Pass -c FILE.")
    before = path.read_text(encoding="utf-8")
    result = migrate_file(path, write=not check_only)
    diff = "".join(difflib.unified_diff(
        before.splitlines(keepends=True), result.text.splitlines(keepends=True), f"{path} (v{result.from_version})",
        f"{path} (v{result.to_version})",
    ))
    if output != "table":
        from specplug.output import emit

        emit({"path": str(path), "changed": result.changed, "written": result.changed and not check_only,
              "from_version": result.from_version, "to_version": result.to_version, "changes": list(result.changes),
              **({"diff": diff} if show_diff else {})}, output)
        if check_only and result.changed:
            raise SystemExit(1)
        return
    if not result.changed:
        click.echo(f"{path} is already at schema version {result.to_version}; nothing to do.")
        return
    verb = "needs migrating" if check_only else "migrated"
    click.echo(f"{path} {verb} from schema version {result.from_version} to {result.to_version}:")
    for c in result.changes:
        click.echo(f"  {c}")
    if show_diff:
        click.echo(diff, nl=False)
    if check_only:
        raise SystemExit(1)
    click.echo("Re-plan with 'specplug plan' if a lock sits beside it.")
