"""Package discovery: specplug/ plus the top-level adapters/, templates/ and policies/ folders.

pyproject.toml maps those folders onto specplug.adapters, specplug.templates and specplug.policies;
this file only lists the packages, which a static table cannot do for a mapped tree.
"""

from setuptools import find_namespace_packages, setup

MAPPED = ["specplug.adapters", "specplug.templates", "specplug.policies"]

setup(packages=find_namespace_packages(include=["specplug", "specplug.*"], exclude=["specplug.*.__pycache__"]) + MAPPED)
