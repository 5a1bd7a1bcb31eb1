"""Every public module declares ``__all__``, complete and sorted."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import tether


def public_modules() -> list[ModuleType]:
    modules: list[ModuleType] = [tether]
    for info in pkgutil.walk_packages(tether.__path__, "tether."):
        if "._" in info.name:
            continue
        modules.append(importlib.import_module(info.name))
    return modules


@pytest.mark.parametrize("module", public_modules(), ids=lambda m: m.__name__)
def test_all_is_declared_sorted_and_complete(module: ModuleType) -> None:
    exported: list[str] = getattr(module, "__all__", None) or []
    if module.__name__ in {"tether.cli", "tether.examples", "tether.run"}:
        return  # namespace packages holding only submodules
    assert exported, f"{module.__name__} has no __all__"
    assert exported == sorted(
        exported, key=lambda n: (not n.isupper(), n.startswith("_"), n)
    ) or exported == sorted(exported)
    for name in exported:
        assert hasattr(module, name), f"{module.__name__}.__all__ names missing {name!r}"
    defined = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", None) == module.__name__
        and (isinstance(value, type) or callable(value))
    }
    missing = defined - set(exported)
    assert not missing, f"{module.__name__} defines public names not in __all__: {sorted(missing)}"


def test_the_root_reexports_the_core() -> None:
    for name in ("Agent", "tool", "Limits", "RunOutcome", "Event", "fold", "ToolResult", "Usage"):
        assert name in tether.__all__
