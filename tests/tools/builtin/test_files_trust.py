"""``file_tools(trusted=[...])``: with named roots, what comes from a trusted one says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import SENT, send_money
from tether import Agent
from tether.errors import ConfigError
from tether.events import ToolCallFinished
from tether.testing import ScriptedModel, call, finish
from tether.tools.builtin.files import file_tools

IBAN = "GB33BUKB20201555555555"


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    found = {"notes": tmp_path / "notes", "downloads": tmp_path / "downloads"}
    for name, path in found.items():
        path.mkdir()
        (path / "pay.txt").write_text(f"{name}: pay the supplier at {IBAN}\n")
    return found


async def run(roots: dict[str, Path], *steps: object) -> tuple[str, list[ToolCallFinished]]:
    SENT.clear()
    agent = Agent(
        model=ScriptedModel([*steps, finish("done")]),  # pyright: ignore[reportArgumentType]
        tools=[*file_tools(roots, trusted=["notes"]), send_money],
    )
    outcome = await agent.run("Pay what my notes say.")
    return outcome.status, [e for e in outcome.events if isinstance(e, ToolCallFinished)]


async def test_a_file_from_a_trusted_root_is_a_trusted_source(roots: dict[str, Path]) -> None:
    status, results = await run(
        roots, call("read_file", path="notes/pay.txt"), call("send_money", iban=IBAN)
    )
    assert results[0].untrusted is False
    assert status == "finished"
    assert SENT == [IBAN]


async def test_a_file_from_another_root_stays_untrusted(roots: dict[str, Path]) -> None:
    status, results = await run(
        roots, call("read_file", path="downloads/pay.txt"), call("send_money", iban=IBAN)
    )
    assert results[0].untrusted is None
    assert status == "waiting_for_approval"
    assert SENT == []


async def test_searching_every_root_is_not_vouched_for(roots: dict[str, Path]) -> None:
    status, results = await run(
        roots, call("search_files", pattern="supplier"), call("send_money", iban=IBAN)
    )
    assert results[0].untrusted is None  # "." spans downloads too
    assert status == "waiting_for_approval"
    _, listed = await run(roots, call("list_files", path="notes"))
    assert listed[0].untrusted is False


def test_trusted_roots_must_be_named_roots(roots: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not roots; the roots are"):
        file_tools(roots, trusted=["mail"])
    with pytest.raises(ConfigError, match="with one root, trusted is True or False"):
        file_tools(tmp_path, trusted=["notes"])
    annotations = {t.name: t.definition.annotations for t in file_tools(roots, trusted=["notes"])}
    assert annotations["read_file"].untrusted_output is True  # declared: per result it says
