"""Fields added to an event after logs were written leave those logs verifiable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from tether import Agent, ToolResult, tool
from tether._internal.frozen import frozen
from tether.codec import compute_hash, hashed_fields, read_jsonl, verify_chain
from tether.events import LATE, EventBase, ToolCallFinished, late_fields
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish

OLD_LOG = Path(__file__).parent / "data" / "log_before_late_fields.jsonl"
"""A run logged before ``ToolCallFinished.untrusted`` existed (commit de6ecc1)."""


def test_a_log_written_before_the_field_existed_still_verifies() -> None:
    events = read_jsonl(OLD_LOG)
    verify_chain(events)
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished
    assert all(e.untrusted is None for e in finished)
    assert b'"untrusted"' not in OLD_LOG.read_bytes()


def test_unset_it_is_not_hashed_set_it_is() -> None:
    event = next(e for e in read_jsonl(OLD_LOG) if isinstance(e, ToolCallFinished))
    names = [f.name for f in dataclasses.fields(event) if f.name not in ("hash", "untrusted")]
    before = [getattr(event, n) for n in names]  # the array the hash covered before
    assert hashed_fields(ToolCallFinished)(event) == tuple(before)
    assert compute_hash(event) == event.hash
    marked = dataclasses.replace(event, untrusted=True)
    assert hashed_fields(ToolCallFinished)(marked) == (*before, True)
    assert compute_hash(marked) != event.hash  # a log that says it cannot be edited unseen


def test_late_fields_must_come_last() -> None:
    @frozen
    class Misplaced(EventBase):
        early: int | None = dataclasses.field(default=None, metadata=LATE)
        later: int = 0

    with pytest.raises(TypeError, match="late fields must come after"):
        late_fields(Misplaced)
    assert late_fields(ToolCallFinished) == ("untrusted",)


@tool(read_only=True, open_world=False)
def shared_note() -> ToolResult:
    """A note someone else wrote."""
    return ToolResult.text("hello", untrusted=True)


async def test_the_loop_and_the_store_hash_it_as_the_codec_does(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "t.db")
    agent = Agent(
        model=ScriptedModel([call("shared_note"), finish("ok")]),
        tools=[shared_note],
        store=store,
        log_dir=tmp_path,
    )
    outcome = await agent.run("read the note")
    assert outcome.status == "finished"
    verify_chain(outcome.events)  # made by the journal's generated maker
    stored = await store.read(outcome.run_id)  # encoded by the store from the maker's values
    await store.close()
    assert stored == list(outcome.events)
    [note] = [e for e in stored if isinstance(e, ToolCallFinished) and e.tool == "shared_note"]
    assert note.untrusted is True
    lines = (tmp_path / f"{outcome.run_id}.jsonl").read_bytes().splitlines()
    assert orjson.loads(lines[note.seq])["untrusted"] is True
    verify_chain(read_jsonl(tmp_path / f"{outcome.run_id}.jsonl"))


@pytest.mark.parametrize(
    ("context", "prompt", "hashed_tail"),
    [
        (None, None, ()),
        ({"ticket": 7}, None, ({"ticket": 7},)),  # as a log written before ``prompt`` existed
        (None, {"id": "p"}, (None, {"id": "p"})),
        ({"ticket": 7}, {"id": "p"}, ({"ticket": 7}, {"id": "p"})),
    ],
)
async def test_late_fields_are_hashed_up_to_the_last_one_set(
    context: dict[str, int] | None, prompt: dict[str, str] | None, hashed_tail: tuple[object, ...]
) -> None:
    """A later late field never changes the hash of an event that does not set it."""
    from tether.events import RunStarted
    from tether.prompts import RenderedPrompt

    instructions = (
        "Go." if prompt is None else RenderedPrompt("Go.", prompt_id=prompt["id"], version="v1")
    )
    agent = Agent(name="late", instructions=instructions, model=ScriptedModel([finish("ok")]))
    outcome = await agent.run("now", context=context)
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    late = late_fields(RunStarted)
    assert late == ("context", "prompt", "thinking", "model_choice")
    names = [f.name for f in dataclasses.fields(started) if f.name != "hash" and f.name not in late]
    values = hashed_fields(RunStarted)(started)
    assert values[: len(names)] == tuple(getattr(started, n) for n in names)
    tail = values[len(names) :]
    assert len(tail) == len(hashed_tail)
    if prompt is not None:
        assert tail[-1] == started.prompt
    assert compute_hash(started) == started.hash  # the loop's maker and the codec agree
    verify_chain(outcome.events)
