"""Packs: installable packages that bring agents and tools (``tether packs`` lists them).

A package declares a pack under the ``tether.packs`` entry-point group::

    [project.entry-points."tether.packs"]
    billing = "billing_pack:pack"

where ``billing_pack.pack`` is a ``Pack`` (or a function returning one). Its agents run as
``tether run --agent pack:billing/invoicer``, ``tether serve --agent pack:billing/invoicer``;
its tool sets serve agent files as ``[[tools]] pack = "billing/ledger"`` (the table's other
keys are the factory's options). tether ships two: ``engineering`` (files and a shell) and
``research`` (the web and a knowledge base). Installing a pack runs its code: it is as
trusted as any package you install.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

from tether.agent import Agent
from tether.errors import ConfigError
from tether.tools.base import Tool

__all__ = ["GROUP", "InstalledPack", "Pack", "agent_from_pack", "installed_packs", "pack_tools"]

_T = TypeVar("_T")

GROUP = "tether.packs"
"""The entry-point group packs are declared under."""

_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")


@dataclasses.dataclass(frozen=True)
class Pack:
    """What a pack brings: agents (factories) and tool sets (factories taking options)."""

    name: str
    """The pack's name: lowercase letters, digits, ``_`` or ``-``."""
    description: str
    """One line on what it is for."""
    agents: Mapping[str, Callable[[], Agent[Any]]] = dataclasses.field(default_factory=lambda: {})
    """Each agent by name, made when asked for (a pack's import stays cheap)."""
    tools: Mapping[str, Callable[..., list[Tool]]] = dataclasses.field(default_factory=lambda: {})
    """Each tool set by name: a factory whose keyword options an agent file's table gives."""

    def __post_init__(self) -> None:
        for field, members in (("agents", self.agents), ("tools", self.tools)):
            # a list here passed, and `tether run --agent pack:P/A` then failed with a traceback
            if not isinstance(members, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise ConfigError(
                    f"Pack({field}=...) takes a mapping of names to factories "
                    f"({{'name': factory}}), not {type(members).__name__}"
                )
            for name, factory in members.items():
                if not callable(factory):
                    raise ConfigError(
                        f"Pack({field}=...)[{name!r}] must be a factory (a function that "
                        f"makes it), not {type(factory).__name__}"
                    )
        for kind, names in (
            ("a pack", [self.name]),
            ("an agent", self.agents),
            ("a tool set", self.tools),
        ):
            for name in names:
                if not isinstance(name, str) or not _NAME.fullmatch(name):  # pyright: ignore[reportUnnecessaryIsInstance]
                    raise ConfigError(
                        f"{kind}'s name is lowercase letters, digits, '_' or '-', not {name!r}"
                    )


@dataclasses.dataclass(frozen=True)
class InstalledPack:
    """A pack as installed: its entry point's package and version, or why it did not load."""

    name: str
    """The entry point's name (the pack's)."""
    distribution: str
    """The installed package that declares it."""
    version: str
    """That package's version."""
    pack: Pack | None
    """The pack, or ``None`` if it failed to load."""
    problem: str = ""
    """Why it failed to load."""


def installed_packs() -> list[InstalledPack]:
    """Every pack installed in this environment, by name; one that fails to load says why."""
    points = sorted(entry_points(group=GROUP), key=lambda p: p.name)
    return [_installed(point, points) for point in points]


def _installed(point: EntryPoint, points: list[EntryPoint]) -> InstalledPack:
    dist = point.dist
    name, version = (dist.name, dist.version) if dist is not None else ("?", "?")
    rivals = sorted(
        p.dist.name if p.dist is not None else "?" for p in points if p.name == point.name
    )
    if len(rivals) > 1:  # which would win depends on the path's order: neither does
        return InstalledPack(
            point.name, name, version, None,
            f"the packages {', '.join(rivals)} each declare a pack {point.name!r}: "
            "uninstall all but one",
        )  # fmt: skip
    try:
        pack = _load(point)
    except (Exception, SystemExit) as exc:  # a broken pack is reported, not fatal to others
        from tether.policy.redaction import Redactor  # its message may hold a secret

        problem = Redactor().redact_text(f"{type(exc).__name__}: {exc}")
        return InstalledPack(point.name, name, version, None, problem)
    return InstalledPack(point.name, name, version, pack)


def _load(point: EntryPoint) -> Pack:
    value = point.load()
    if not isinstance(value, Pack) and callable(value):
        value = value()
    if not isinstance(value, Pack):
        raise ConfigError(f"entry point {point.value!r} is a {type(value).__name__}, not a Pack")
    if value.name != point.name:
        raise ConfigError(f"entry point {point.name!r} gives a pack named {value.name!r}")
    return value


def _find(name: str) -> Pack:
    points = sorted(entry_points(group=GROUP), key=lambda p: p.name)
    named = [p for p in points if p.name == name]  # only this pack is imported
    if not named:
        known = ", ".join(sorted({p.name for p in points})) or "none"
        raise ConfigError(f"no pack {name!r} is installed (installed: {known}; see `tether packs`)")
    found = _installed(named[0], points)
    if found.pack is None:
        raise ConfigError(f"the pack {name!r} did not load: {found.problem}")
    return found.pack


def _split(ref: str, what: str) -> tuple[str, str]:
    pack, sep, item = ref.partition("/")
    if not sep or not pack or not item:
        raise ConfigError(f"a pack's {what} is named PACK/NAME, not {ref!r}")
    return pack, item


def _member(ref: str, what: str, members: Callable[[Pack], Mapping[str, _T]]) -> tuple[str, _T]:
    """The pack's name and its ``what`` that ``PACK/NAME`` names."""
    pack_name, name = _split(ref, what)
    found = members(_find(pack_name))
    member = found.get(name)
    if member is None:
        has = ", ".join(sorted(found)) or "none"
        raise ConfigError(f"the pack {pack_name!r} has no {what} {name!r} (it has: {has})")
    return pack_name, member


def agent_from_pack(ref: str) -> Agent[Any]:
    """The agent ``PACK/AGENT`` names, made by its pack."""
    pack_name, factory = _member(ref, "agent", lambda pack: pack.agents)
    name = ref.partition("/")[2]
    try:
        agent = factory()
    except (Exception, SystemExit) as exc:
        raise ConfigError(
            f"the pack {pack_name!r} failed to make its agent {name!r}: {type(exc).__name__}"
        ) from None
    if not isinstance(agent, Agent):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ConfigError(f"the pack {pack_name!r} made a {type(agent).__name__} for {name!r}")
    return agent


def pack_tools(ref: str) -> Callable[..., list[Tool]]:
    """The tool set factory ``PACK/TOOLS`` names."""
    return _member(ref, "tool set", lambda pack: pack.tools)[1]
