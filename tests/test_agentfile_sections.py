"""An agent file's [memory], [knowledge] and [thinking] tables."""

from __future__ import annotations

import asyncio
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from tether import Remember
from tether.agentfile import load_agent_file
from tether.errors import ConfigError
from tether.knowledge import KnowledgeBase
from tether.memory import SqliteMemory
from tether.testing import ScriptedModel, finish


def write(folder: Path, text: str) -> Path:
    path = folder / "agent.toml"
    path.write_text(textwrap.dedent(text))
    return path


async def test_memory_is_a_sqlite_file_beside_the_agent_file(tmp_path: Path) -> None:
    path = write(tmp_path, """
        name = "rememberer"
        [memory]
        database = "memory.db"
        namespace = "support"
        ttl = 3600
    """)  # fmt: skip
    agent = load_agent_file(path)
    assert isinstance(agent.memory, Remember)
    assert agent.memory.namespace == "support"
    assert agent.memory.ttl == timedelta(hours=1)
    outcome = await agent.run("note the build is green", model=ScriptedModel([finish("noted")]))
    assert any(e.kind == "memory_written" for e in outcome.events)
    assert (tmp_path / "memory.db").is_file()


def test_knowledge_and_thinking(tmp_path: Path) -> None:
    kb = KnowledgeBase(SqliteMemory(tmp_path / "kb.db"))
    asyncio.run(kb.add(_doc(tmp_path)))
    path = write(tmp_path, """
        name = "librarian"
        [knowledge]
        database = "kb.db"
        min_confidence = 0.4
        [thinking]
        plan = true
        reflect = false
        max_replans = 1
    """)  # fmt: skip
    agent = load_agent_file(path)
    assert agent.spec.knowledge is not None
    assert agent.spec.knowledge.min_confidence == 0.4
    assert agent.spec.thinking is not None
    described = agent.spec.thinking.describe()
    assert described["planner"] == "ModelPlanner"
    assert described["reflector"] is None
    assert described["max_replans"] == 1


def _doc(folder: Path) -> Path:
    doc = folder / "guide.md"
    doc.write_text("# Guide\n\nRestart the router by holding reset for ten seconds.\n")
    return doc


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[memory]\nnamespace = "x"\n', "[memory]: database must be"),
        (
            '[memory]\ndatabase = "m.db"\nembedder = "bert"\n',
            'embedder must be "minilm", or left out, not "bert" (a string)',
        ),
        ('[memory]\ndatabase = "m.db"\nttl = -5\n', "ttl must be a positive number of seconds"),
        ('[memory]\ndatabase = "m.db"\nttl = inf\n', "ttl must be a positive number of seconds"),
        ('[memory]\ndatabase = "m.db"\nttl = nan\n', "ttl must be a positive number of seconds"),
        ('[memory]\ndatabase = "m.db"\nrecal_limit = 3\n', "recal_limit"),
        ('[knowledge]\ndatabase = "kb.db"\nlimt = 3\n', "limt"),
        ('[thinking]\nplan = "yes"\n', "plan must be true or false"),
        ("[thinking]\nreplan = 2\n", "replan"),
    ],
)
def test_every_mistake_names_the_file_and_the_table(tmp_path: Path, text: str, says: str) -> None:
    path = write(tmp_path, f'name = "a"\n{text}')
    with pytest.raises(ConfigError) as raised:
        load_agent_file(path)
    assert str(path) in str(raised.value)
    assert says in str(raised.value)
