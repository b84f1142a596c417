"""A package face's lazy names (PEP 562): `from agent.review import load_results` imports agent/review/load.py
then, on first use, not when the package is imported; so a face costs nothing to the modules that are only its
siblings' importers, and the command line's start-up stays as small as its lazy imports made it."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_names(package: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: each name of `homes` is looked up in its home module, spelled
    "module" (the same name there) or "module:name" (another name there); any other name is no attribute, so
    `from package import submodule` still finds the submodule."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attr = homes[name].partition(":")
        return getattr(importlib.import_module(module), attr or name)

    return __getattr__
