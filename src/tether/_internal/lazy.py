"""Attributes of a package loaded when first used (PEP 562), so that importing it is cheap."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, attributes: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A package's ``__getattr__`` and ``__dir__`` for names loaded from other modules.

    ``attributes`` maps a name to the module that defines it; ``submodules`` are the
    package's own modules reachable as attributes before anyone imported them.
    """
    subs = frozenset(submodules)

    def getattr_(name: str) -> Any:
        if name in subs:
            return import_module(f"{package}.{name}")
        module = attributes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *attributes, *subs})

    return getattr_, dir_
