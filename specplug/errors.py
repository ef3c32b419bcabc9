"""One error type for everything a user can fix: the CLI prints it as a paragraph and exits 1."""

from __future__ import annotations


class SpecplugError(Exception):
    """A problem the user can act on: what was wrong, and (in ``hint``) what would work."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} {self.hint}" if self.hint else self.message


class ConfigError(SpecplugError):
    """specplug.yaml (or a policy/calibration file) is malformed or invalid."""


class CatalogError(SpecplugError):
    """An unknown model, drafter or GPU name."""


class StackError(SpecplugError):
    """A serving stack is missing, at an unknown version, or cannot do what the plan asks."""
