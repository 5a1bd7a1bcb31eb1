"""An agent file's ``[memory]``, ``[knowledge]`` and ``[thinking]`` tables (``tether.agentfile``).

```toml
[memory]                       # long-term memory (tether.memory.Remember's options)
database = "memory.db"         # a SQLite file beside the agent file, or "postgresql://..."
embedder = "minilm"            # optional: vectors by the offline MiniLM (tether[memory])
namespace = "support"
recall_limit = 5
ttl = 2592000                  # seconds a record is kept (optional)

[knowledge]                    # documents to search and cite (tether.knowledge.Knowledge)
database = "kb.db"             # where KnowledgeBase(...).add(...) put them
namespace = "knowledge"
min_confidence = 0.5

[thinking]                     # plan, reflect, route (tether.thinking.Thinking)
plan = true
reflect = true
max_replans = 2
```
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from tether._internal.optionkinds import wrong_kind
from tether.memory.base import Memory

__all__ = ["knowledge_section", "memory_section", "thinking_section"]

Build = Callable[[Callable[..., Any], Mapping[str, Any], Path, str], Any]
"""``agentfile._built``: a factory called with a table, errors naming file and key."""


def _store(table: dict[str, Any], file: Path, where: str) -> Memory:
    database = table.pop("database", None)
    embedder_name = table.pop("embedder", None)
    if not isinstance(database, str) or not database:
        raise wrong_kind(
            f"{file}: {where}",
            "database",
            database,
            'a SQLite file\'s path such as "memory.db", or a URL such as "postgresql://host/db"',
        )
    embedder: Any = None
    if embedder_name == "minilm":
        from tether.memory import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    elif embedder_name is not None:
        raise wrong_kind(f"{file}: {where}", "embedder", embedder_name, '"minilm", or left out')
    if database.startswith(("postgresql://", "postgres://")):
        from tether.memory import PostgresMemory

        return PostgresMemory(database, embedder=embedder)
    from tether.memory import SqliteMemory

    return SqliteMemory((file.parent / database).resolve(), embedder=embedder)


def memory_section(
    value: object, file: Path, table_of: Callable[..., dict[str, Any]], build: Build
) -> Any:
    """``[memory]``: a ``Remember`` over the memory the table names."""
    from tether.memory.config import Remember

    table = dict(table_of(value, file, "[memory]"))
    memory = _store(table, file, "[memory]")
    ttl = table.get("ttl")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < 1e10:
            expected = "a positive number of seconds below 1e10, such as 2592000"
            raise wrong_kind(f"{file}: [memory]", "ttl", ttl, expected)
        table["ttl"] = timedelta(seconds=ttl)
    return build(Remember, {"memory": memory, **table}, file, "[memory]")


def knowledge_section(
    value: object, file: Path, table_of: Callable[..., dict[str, Any]], build: Build
) -> Any:
    """``[knowledge]``: a ``Knowledge`` over the knowledge base the table names."""
    from tether.knowledge import Knowledge, KnowledgeBase

    table = dict(table_of(value, file, "[knowledge]"))
    memory = _store(table, file, "[knowledge]")
    base_options = {k: table.pop(k) for k in ("namespace", "chunk_size", "overlap") if k in table}
    base = build(KnowledgeBase, {"memory": memory, **base_options}, file, "[knowledge]")
    return build(Knowledge, {"base": base, **table}, file, "[knowledge]")


def thinking_section(
    value: object, file: Path, table_of: Callable[..., dict[str, Any]], build: Build
) -> Any:
    """``[thinking]``: a ``Thinking`` of the stages the table turns on (true/false each)."""
    from tether.thinking import Thinking

    # plan, reflect and route take true or false here (a Planner object only in Python):
    # ``build`` checks each option against its type
    return build(Thinking, dict(table_of(value, file, "[thinking]")), file, "[thinking]")
