"""Text that may reach a rendered file or a command line, checked where it enters specplug.

Model ids, drafter ids, folders, versions, hosts and variable names are one line of printable text: a newline
or control character in one is never what the user meant, and is refused with the field named. Free-form values
(extra engine arguments, environment values) may hold any text but NUL, which no argv or environment can carry;
templates escape them for where they land (specplug.templating).
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Annotated

from pydantic import AfterValidator

# Names a shell, a container runtime and Kubernetes all accept for an environment variable.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens.
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def breaking_char(text: str) -> str | None:
    """The first character that would end a line or control a terminal (Cc, line and paragraph separators)."""
    for ch in text:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp"):
            return ch
    return None


def one_line(text: str) -> str:
    bad = breaking_char(text)
    if bad is not None:
        raise ValueError(
            f"{text!r} contains the control character {bad!r}; names, ids, folders and versions are one line of "
            "printable text (check for a stray newline or paste)"
        )
    return text


def no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError(f"{text!r} contains a NUL byte, which no command line or environment can carry")
    return text


def env_name(text: str) -> str:
    if not ENV_NAME.fullmatch(text):
        raise ValueError(f"{text!r} is not an environment variable name: use letters, digits and _, not starting with a digit")
    return text


def host(text: str) -> str:
    """An IP address or an RFC 1123 host name, as a server binds to it."""
    try:
        ipaddress.ip_address(text)
        return text
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if len(text) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueError(
            f"{text!r} is not an IP address or host name: use e.g. 127.0.0.1 (this machine only), 0.0.0.0 (every "
            "interface) or a name like my-host.example.com"
        )
    return text


OneLine = Annotated[str, AfterValidator(one_line)]
NoNul = Annotated[str, AfterValidator(no_nul)]
EnvName = Annotated[str, AfterValidator(env_name)]
Host = Annotated[str, AfterValidator(host)]
