"""Measuring a live endpoint: load generator, per-stack metric readers, verify, calibrate, reports.

Nothing here is imported by ``specplug`` at start-up; the bench/verify/calibrate commands import these
modules when they run (httpx and matplotlib come with the ``[bench]`` extra).
"""
