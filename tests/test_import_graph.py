"""The package's import graph: no cycles, and no import that climbs the layers.

Every import counts, also those under ``TYPE_CHECKING`` and inside functions: a module
that imports another, however lazily, cannot be read, tested or moved without it.

The layers, lowest first; a module may import its own layer and those below it:

- domain: the values everything speaks of (events, content, messages, errors, the codec);
- ports: the small interfaces adapters implement (a model, a run store, a tool, a policy);
- engine: the run loop and what it consults (journal, policy gate, state);
- adapters: models, stores and tools that talk to the world;
- interfaces: what users hold (``Agent``, which composes the engine with adapters, the
  CLI, replay, the shipped test doubles).

A module's layer is that of the longest prefix in ``LAYERS`` that names it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "tether"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "domain",
        (
            "tether._internal.frozen",
            "tether._internal.sealed",
            "tether._internal.ids",
            "tether._internal.clock",
            "tether._internal.linearregex",
            "tether._internal.eventmaker",
            "tether._internal.lazy",
            "tether._internal.configfiles",
            "tether._internal.mend",
            "tether._internal.leftbehind",
            "tether._internal.daemonthreads",
            "tether._internal.textcut",
            "tether._internal.redirects",
            "tether._internal.optionkinds",
            "tether.jsontypes",
            "tether.content",
            "tether.messages",
            "tether.usage",
            "tether.limits",
            "tether.status",
            "tether.outcome",
            "tether.events",
            "tether.eventbase",
            "tether.memoryevents",
            "tether.knowledgeevents",
            "tether.latefields",
            "tether.phases",
            "tether.eventdispatch",
            "tether.errors",
            "tether.codec",
            "tether.retry",
            "tether.auditkey",
        ),
    ),
    (
        "ports",
        (
            "tether.tools.base",
            "tether.tools.function",
            "tether.tools.output",
            "tether.tools.registry",
            "tether.models.base",
            "tether.models.tokens",
            "tether.stores.base",
            "tether.stores._pages",
            "tether.stores.kv",
            "tether.policy.base",
            "tether.memory.base",
            "tether.memory.embedder",
            "tether.memory.ranking",
            "tether.memory.config",
            "tether.memory.vectors",
            "tether.memory.rows",
            "tether.sinks",
            "tether.thinking",
            "tether.compaction",
            "tether.knowledge",
        ),
    ),
    (
        "engine",
        (
            "tether.run",
            "tether.loop",
            "tether.spec",
            "tether.state",
            "tether.policy",
            "tether.hooks",
            "tether.prompts",
        ),
    ),
    ("adapters", ("tether.models", "tether.stores", "tether.tools", "tether.memory")),
    (
        "interfaces",
        (
            "tether",
            "tether.agent",
            "tether.agentfile",
            "tether.agentsections",
            "tether.cli",
            "tether.server",
            "tether.mcpserve",
            "tether.mcptools",
            "tether.mcpresults",
            "tether.directcall",
            "tether.packs",
            "tether.replay",
            "tether.testing",
            "tether.examples",
        ),
    ),
]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (not its own parent packages)."""
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    return {
        name: {
            target
            for target in _imports(path, name)
            if target in files and target != name and not name.startswith(target + ".")
        }
        for name, path in files.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[1]
            ):
                best = (rank, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best[0]


def test_there_is_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_no_import_climbs_the_layers() -> None:
    climbing = [
        f"{source} ({LAYERS[layer_of(source)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for source, targets in sorted(graph().items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(source)
    ]
    assert climbing == []


NONE: set[str] = set()
CASES: list[tuple[dict[str, set[str]], list[list[str]]]] = [
    ({"a": {"b"}, "b": {"a"}, "c": NONE}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": NONE}, []),
]


@pytest.mark.parametrize(("edges", "expected"), CASES)
def test_the_cycle_finder_finds_cycles(
    edges: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert cycles(edges) == expected


def test_the_layer_check_sees_a_climbing_import() -> None:
    assert layer_of("tether.events") < layer_of("tether.loop") < layer_of("tether.stores.sqlite")
    assert layer_of("tether.stores.base") < layer_of("tether.stores.sqlite")
    assert layer_of("tether.agent") == len(LAYERS) - 1
    # the graph holds the edges the check reads: the engine imports the journal
    assert "tether.run.journal" in graph()["tether.loop"]
