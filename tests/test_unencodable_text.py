"""Text UTF-8 cannot encode (a lone surrogate) reaches the log as its escape, never fails a run.

``os.listdir`` gives ``'caf\\udce9.txt'`` for a file name written in Latin-1; before, such a
string in a tool's result failed the run after the tool had acted (the log said "not
executed"), in the model's text lost its answer, and in a goal or an answer raised a bare
``TypeError``.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tether import Agent, RulePolicy, Rules, allow, tool
from tether._internal.mend import mended
from tether.codec import read_jsonl, verify_chain
from tether.events import ModelResponded, RunStarted, ToolCallFinished
from tether.knowledge import Document
from tether.memory.base import MemoryRecord
from tether.stores import MemoryStore, SqliteStore
from tether.testing import ScriptedModel, call, finish

NAME = "caf\udce9.txt"  # what os.listdir gives for b"caf\xe9.txt"
SHOWN = "caf\\udce9.txt"  # as the log holds it: the escape, nothing lost


def _content_text(event: ToolCallFinished) -> str:
    text = getattr(event.content[0], "text", None)
    assert isinstance(text, str)
    return text


async def test_a_tool_result_with_a_non_utf8_file_name_is_recorded(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    Path(os.fsdecode(os.path.join(os.fsencode(folder), b"caf\xe9.txt"))).touch()
    moved: list[str] = []

    @tool(destructive=True, open_world=False)
    def archive(path: str) -> str:
        """Archive a folder's files; says which."""
        names = os.listdir(path)
        moved.extend(names)
        return "archived: " + ", ".join(names)

    store = SqliteStore(tmp_path / "runs.db")
    agent = Agent(
        model=ScriptedModel([call("archive", path=str(folder)), finish("done")]),
        tools=[archive],
        policy=RulePolicy(Rules(rules=(allow("archive"),))),
        store=store,
        log_dir=tmp_path / "logs",
    )
    outcome = await agent.run("archive the folder")
    assert moved == [NAME]
    assert outcome.status == "finished", outcome.error
    finished = [e for e in outcome.events if isinstance(e, ToolCallFinished)]
    assert _content_text(finished[0]) == f"archived: {SHOWN}"
    assert not finished[0].is_error
    stored = await store.read(outcome.run_id)
    assert stored == list(outcome.events)
    verify_chain(stored)
    (log,) = (tmp_path / "logs").glob("*.jsonl")
    assert read_jsonl(log) == list(outcome.events)
    await store.close()


async def test_model_text_with_a_lone_surrogate_is_recorded() -> None:
    outcome = await Agent(model=ScriptedModel([f"The file is {NAME}"])).run("which file?")
    assert outcome.status == "finished", outcome.error
    assert outcome.usage.requests == 1
    (responded,) = [e for e in outcome.events if isinstance(e, ModelResponded)]
    assert responded.text == f"The file is {SHOWN}"
    verify_chain(outcome.events)


async def test_a_goal_and_an_answer_with_lone_surrogates_run(tmp_path: Path) -> None:
    store = MemoryStore()
    agent = Agent(
        model=ScriptedModel([call("ask_user", question="which file?"), finish("ok")]),
        can_ask_user=True,
        store=store,
    )
    waiting = await agent.run(f"summarise {NAME}", run_id="r1")
    assert waiting.status == "waiting_for_user"
    started = waiting.events[0]
    assert isinstance(started, RunStarted)
    assert started.goal == f"summarise {SHOWN}"
    # the same goal again under the same id is the same run, not "another goal"
    again = await agent.run(f"summarise {NAME}", run_id="r1")
    assert again.status == "waiting_for_user"
    answered = await agent.resume("r1", answer=NAME)
    assert answered.status == "finished", answered.error
    assert any(getattr(e, "text", None) == SHOWN for e in answered.events)
    verify_chain(answered.events)


def test_memory_records_and_documents_keep_the_escape() -> None:
    record = MemoryRecord(namespace="n", text=f"saw {NAME}")
    assert record.text == f"saw {SHOWN}"
    document = Document(source=NAME, text=f"about {NAME}")
    assert (document.source, document.text) == (SHOWN, f"about {SHOWN}")


@given(st.text(alphabet=st.characters(codec=None)))
def test_mended_text_encodes_and_text_that_encodes_is_untouched(text: str) -> None:
    out = mended(text)
    out.encode("utf-8")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        assert out != text
    else:
        assert out is text


def test_mended_walks_containers_and_keeps_what_did_not_change() -> None:
    clean = {"a": ["x", ("y", 1)], "b": None}
    assert mended(clean) is clean
    dirty = {NAME: [NAME, (NAME, 2)], "ok": "ok"}
    assert mended(dirty) == {SHOWN: [SHOWN, (SHOWN, 2)], "ok": "ok"}


async def test_a_listing_with_a_non_utf8_name_reaches_the_model(tmp_path: Path) -> None:
    # the policy's result check could not encode it: the whole listing was withheld
    from tether.tools.builtin import file_tools

    Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"bad\xff.txt"))).write_text("x")
    (tmp_path / "good.txt").write_text("y")
    model = ScriptedModel([call("list_files", path="."), finish("done")])
    outcome = await Agent(model=model, tools=file_tools(tmp_path)).run("list")
    listed = next(e for e in outcome.events if isinstance(e, ToolCallFinished))
    assert not listed.is_error, _content_text(listed)
    assert "bad\\udcff.txt" in _content_text(listed)
    assert "good.txt" in _content_text(listed)
