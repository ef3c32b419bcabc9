"""One error type for everything a user can fix: the CLI prints it as a paragraph and exits 1 (2 for a
:class:`UsageError`, a malformed flag value: the README's exit code rule)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class SpecplugError(Exception):
    """A problem the user can act on: what was wrong, and (in ``hint``) what would work."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message


def invalid(exc: ValidationError, heading: str, hint: str | None = None,
            kind: type[SpecplugError] | None = None, limit: int = 12) -> SpecplugError:
    """The user error for data that failed its pydantic model: ``heading``, then one line per problem named by its
    key (``runs.0.wall_s: Input should be a valid number.``), each once, at most ``limit``. specplug.yaml and the
    plan flags add line numbers and key suggestions on top (specplug.config.explain_options)."""
    lines: list[str] = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(top level)"
        line = f"{key}: {err['msg'].removeprefix('Value error, ')}."
        if line not in lines:
            lines.append(line)
    return (kind or ConfigError)(f"{heading}:\n  " + "\n  ".join(lines[:limit]), hint)


class ConfigError(SpecplugError):
    """specplug.yaml (or a policy/calibration file) is malformed or invalid."""


class CatalogError(SpecplugError):
    """An unknown model, drafter or GPU name."""


class StackError(SpecplugError):
    """A serving stack is missing, at an unknown version, or cannot do what the plan asks."""


class MissingExtra(SpecplugError):
    """An optional dependency is not installed: ``what`` needs ``package``, which ``extra`` brings. The library
    names itself as ``what``; the CLI names the command that ran instead (:meth:`needed_by`)."""

    def __init__(self, what: str, package: str, extra: str, hint: str | None = None) -> None:
        super().__init__(f"{what} needs {package}: pip install 'specplug[{extra}]'", hint)
        self.package = package
        self.extra = extra

    def needed_by(self, what: str) -> MissingExtra:
        """The same error, naming ``what`` (e.g. 'specplug bench') as the one that needs the extra."""
        return MissingExtra(what, self.package, self.extra, self.hint)


class UsageError(SpecplugError):
    """A flag's value is malformed or names nothing there (``--traffic-map nonsense``, a --rendered folder that does
    not exist): a usage error, exit 2, as click gives for a value outside an option's type."""

    exit_code = 2
