"""``tether audit`` and ``tether export`` read a long stored run a page at a time.

Their output is what it was when they read the run whole, tampered with or not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from tests.stores.helpers import stored_long_run
from tests.stores.tampering import Tampering, audited_whole, tamper
from tether.auditkey import AuditKey
from tether.cli import safety_commands
from tether.cli.app import app
from tether.codec import encode_line, verify_chain
from tether.errors import TetherError
from tether.events import Event
from tether.policy import audit
from tether.stores import SqliteStore

LENGTH = 3000
"""User replies in the run: many pages."""
SECRET = b"long-runs-cli-audit-key:6a0e93b1c4"
KEY = AuditKey(SECRET)
AT = 1234
"""Where a run is tampered with: a user reply's seq, in the middle of a page."""


def long_run(db: Path, how: Tampering | None = None) -> str:
    """A long keyed run in the store at ``db`` (tampered with ``how``); its id."""

    async def go() -> str:
        store = SqliteStore(db, audit_key=None)
        try:
            return (await stored_long_run(store, LENGTH, key=KEY))[0].run_id
        finally:
            await store.close()

    run_id = asyncio.run(go())
    if how is not None:
        tamper(db, run_id, how, AT)
    return run_id


def whole_audit(db: Path, run_id: str, key: AuditKey | None) -> Any:
    """The audit's report, as JSON data, as it was made of the run read whole."""

    async def go() -> Any:
        store = SqliteStore(db, audit_key=None)
        try:
            return orjson.loads(orjson.dumps(await audited_whole(store, run_id, key)))
        finally:
            await store.close()

    return asyncio.run(go())


def whole_export(db: Path, run_id: str) -> bytes | TetherError:
    """``tether export``'s output as it was when it read the run whole, or its error."""

    async def go() -> bytes:
        store = SqliteStore(db, audit_key=None)
        try:
            events = await store.read(run_id)
            verify_chain(events, run_id=run_id)
            macs = await store.read_macs(run_id)
            return b"".join(encode_line(e, macs.get(e.seq)) + b"\n" for e in events)
        finally:
            await store.close()

    try:
        return asyncio.run(go())
    except TetherError as exc:
        return exc


def refuse_whole_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, any SQLite store's read of a whole run fails the test."""

    async def whole(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the whole run was read at once")

    for name in ("read", "read_encoded", "read_macs"):
        monkeypatch.setattr(SqliteStore, name, whole)


@pytest.mark.parametrize(
    ("keyed", "how"),
    [(False, None), (True, None), (False, "resealed"), (True, "resealed"), (True, "removed")],
)
def test_audit_of_a_long_stored_run_is_the_same_report_read_a_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keyed: bool, how: Tampering | None
) -> None:
    db = tmp_path / "t.db"
    run_id = long_run(db, how)
    expected = whole_audit(db, run_id, KEY if keyed else None)
    assert (expected["ok"], expected["bad_seq"]) == (
        (True, None) if how is None else (False, AT + (how == "resealed" and not keyed))
    )
    key_file = tmp_path / "audit.key"
    key_file.write_bytes(SECRET)
    refuse_whole_reads(monkeypatch)
    extra = ["--key-file", str(key_file)] if keyed else []
    got = CliRunner().invoke(app, ["audit", run_id, "--db", str(db), "--json", *extra])

    assert got.exit_code == (0 if how is None else 1), got.output
    assert json.loads(got.stdout) == expected


def test_audit_of_a_jsonl_log_checks_each_line_as_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "t.db"
    exported = CliRunner().invoke(app, ["export", long_run(db), "--db", str(db)])
    log = tmp_path / "run.jsonl"
    log.write_bytes(exported.stdout_bytes)
    read: list[int] = []  # how many lines had been read when each was checked
    lines, decode = safety_commands.iter_jsonl_lines, audit.decode_line

    def counted(*args: Any, **kwargs: Any) -> Iterator[tuple[int, bytes]]:
        for line in lines(*args, **kwargs):
            read.append(line[0])
            yield line

    def decoded(data: bytes | str, *, line: int | None = None) -> tuple[Event, str | None]:
        checked.append(read[-1])
        return decode(data, line=line)

    checked: list[int] = []
    monkeypatch.setattr(safety_commands, "iter_jsonl_lines", counted)
    monkeypatch.setattr(audit, "decode_line", decoded)

    got = CliRunner().invoke(app, ["audit", str(log), "--json"])

    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout)["events"] == len(read) > LENGTH
    assert checked == read  # each line checked once read, before the next is


@pytest.mark.parametrize("how", [None, "resealed", "undecodable", "removed"])
def test_export_of_a_long_stored_run_is_the_same_bytes_read_a_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: Tampering | None
) -> None:
    db = tmp_path / "t.db"
    run_id = long_run(db, how)
    expected = whole_export(db, run_id)
    assert isinstance(expected, bytes) == (how is None)
    refuse_whole_reads(monkeypatch)

    got = CliRunner().invoke(app, ["export", run_id, "--db", str(db)])

    if isinstance(expected, bytes):
        assert got.exit_code == 0, got.output
        assert got.stdout_bytes == expected
        assert expected.count(b'"mac":') == expected.count(b"\n") > LENGTH
    else:  # nothing written, and the error reading it whole gave
        assert got.exit_code == 2
        assert got.stdout_bytes == b""
        assert " ".join(got.stderr.split()) == f"error: {' '.join(str(expected).split())}"
