"""Release strings compared the one way every part of specplug compares them (adapters' version windows, the
compatibility table): a pure module, so the policy's data can order versions without reaching the registry."""

from __future__ import annotations

import re


def version_key(version: str) -> tuple[int, ...]:
    """Comparable key for release strings: '0.10.1' -> (0, 10, 1, 0, 0, 0), 'b4600' -> (4600, 0, 0, 0, 0, 0).

    A release candidate sorts before its release and by its number ('1.3.0rc8' -> (1, 3, 0, 0, -1, 8)), since
    TensorRT-LLM changes fields between release candidates of one version."""
    main, rc, tail = version.split("+")[0].split(".dev")[0].partition("rc")
    nums = [int(n) for n in re.findall(r"\d+", main)[:4]] or [0]
    nums += [0] * (4 - len(nums))
    if not rc:
        return (*nums, 0, 0)
    rc_num = re.match(r"\d+", tail)
    return (*nums, -1, int(rc_num.group()) if rc_num else 0)
