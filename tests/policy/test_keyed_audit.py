"""Keyed audit: an edited log that is re-sealed passes the unkeyed check, never the keyed one.

The event hash is unkeyed, so ``tether.codec.seal`` lets anyone who edits a log make its
chain valid again: the unkeyed audit then passes, which these tests pin down as the
documented limit of that mode. With an audit key every event carries a MAC beside the log
(the ``macs`` table, a JSONL line's ``"mac"``) that an editor without the key cannot make.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests import support
from tests.support import add
from tether import Agent, Event
from tether.auditkey import ENV_KEY, ENV_KEY_FILE, AuditKey, audit_key_from_env
from tether.codec import decode_line, encode_event, encode_line, iter_jsonl_lines
from tether.errors import AuditKeyError, LogError
from tether.policy.audit import AuditReport, audit_encoded
from tether.stores import MemoryStore, SqliteStore, export_run, import_run
from tether.stores.transfer import decode_jsonl_log
from tether.testing import ScriptedModel, call, finish

SECRET = b"tether-test-audit-key:7c1e0a5b93d24f68"
"""The audit key of these tests; it must never be found in what tether writes."""
KEY = AuditKey(SECRET, source="the tests' key")
OTHER = AuditKey(b"another-audit-key-0123456789abcdef", source="another key")


def _agent(*, store: SqliteStore | MemoryStore | None, log_dir: Path | None) -> Agent[str]:
    script = [call("add", a=1, b=2), call("add", a=3, b=4), finish("3 and 7")]
    return Agent(
        name="adder", model=ScriptedModel(script), tools=[add], store=store, log_dir=log_dir
    )


def keyed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path, Path]:
    """A finished run, stored keyed in ``t.db`` and logged keyed (from the environment)."""
    key_file = tmp_path / "audit.key"
    key_file.write_bytes(SECRET + b"\n")
    monkeypatch.setenv(ENV_KEY_FILE, str(key_file))
    db, logs = tmp_path / "t.db", tmp_path / "logs"

    async def go() -> str:
        store = SqliteStore(db)  # the key comes from $TETHER_AUDIT_KEY_FILE
        try:
            outcome = await _agent(store=store, log_dir=logs).run("add twice")
        finally:
            await store.close()
        assert outcome.status == "finished"
        return outcome.run_id

    run_id = asyncio.run(go())
    return run_id, db, logs / f"{run_id}.jsonl"


def read_log(path: Path) -> tuple[list[Event], list[str | None]]:
    log = decode_jsonl_log(path.read_bytes())
    return list(log.events), list(log.macs)


def resealed_edit(events: Sequence[Event]) -> tuple[list[Event], int]:
    """``add``'s first result changed to 999, every hash made valid again."""
    return support.resealed_edit(events, "add", "999")


def verdict(report: AuditReport) -> tuple[bool, int | None, bool, int | None, str | None]:
    return (report.ok, report.bad_seq, report.bad_mac, report.verified_through, report.problem)


def file_audit(path: Path, key: AuditKey | None) -> AuditReport:
    return audit_encoded([line for _, line in iter_jsonl_lines(path)], key=key)


def store_audit(db: Path, run_id: str, key: AuditKey | None) -> AuditReport:
    async def go() -> AuditReport:
        store = SqliteStore(db, audit_key=None)
        try:
            lines = await store.read_encoded(run_id)
            macs = await store.read_macs(run_id)
            expected = (await store.info(run_id)).events
        finally:
            await store.close()
        return audit_encoded(lines, expected_events=expected, key=key, macs=macs)

    return asyncio.run(go())


EDITED = (
    "its MAC does not match under the audit key: the event was edited (and the chain "
    "re-sealed) by someone without the key, or its MAC was altered"
)
NO_MAC = (
    "it has no MAC: it was written without the audit key (a writer not given it), or its "
    "MAC was removed; nothing vouches for it or what follows"
)


# -- the key ------------------------------------------------------------------------------


def test_the_key_is_read_from_a_file_without_its_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_bytes(SECRET + b"\r\n")

    key = AuditKey.from_file(path)

    assert key.key_id == KEY.key_id
    assert key.mac("ab" * 32) == KEY.mac("ab" * 32)
    assert repr(key) == f"AuditKey(key_id={KEY.key_id!r}, source='the audit key file {path}')"
    assert SECRET.decode() not in repr(key)


def test_the_key_comes_from_one_environment_variable(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_bytes(SECRET)

    assert audit_key_from_env({}) is None
    from_file = audit_key_from_env({ENV_KEY_FILE: str(path)})
    from_value = audit_key_from_env({ENV_KEY: SECRET.decode()})
    assert from_file is not None
    assert from_value is not None
    assert from_file.key_id == from_value.key_id == KEY.key_id
    with pytest.raises(AuditKeyError, match=r"both \$TETHER_AUDIT_KEY_FILE and"):
        audit_key_from_env({ENV_KEY_FILE: str(path), ENV_KEY: SECRET.decode()})


def test_a_key_set_as_bytes_that_are_not_utf8_is_those_bytes() -> None:
    # os.environ gives such a value with lone surrogates: encoding it strictly raised
    raw = b"\xff\xfe\xfd" + SECRET
    key = audit_key_from_env({ENV_KEY: os.fsdecode(raw)})
    assert key is not None
    assert key.key_id == AuditKey(raw, source="test").key_id


def test_a_short_or_missing_key_is_refused_without_showing_it(tmp_path: Path) -> None:
    with pytest.raises(AuditKeyError) as short:
        audit_key_from_env({ENV_KEY: "hunter2hunter2"})
    assert str(short.value).startswith("$TETHER_AUDIT_KEY is 14 bytes long; an audit key")
    assert "hunter2" not in str(short.value)
    with pytest.raises(AuditKeyError, match="cannot read the audit key file"):
        AuditKey.from_file(tmp_path / "missing")


# -- a JSONL log ----------------------------------------------------------------------------


def test_an_untouched_keyed_log_is_authenticated_through_its_last_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, db, log = keyed_run(tmp_path, monkeypatch)
    events, macs = read_log(log)
    last = len(events) - 1

    assert macs == [KEY.mac(e.hash) for e in events]
    assert verdict(file_audit(log, KEY)) == (True, None, False, last, None)
    assert file_audit(log, KEY).ended
    assert verdict(store_audit(db, run_id, KEY)) == (True, None, False, last, None)


def test_an_edited_resealed_jsonl_log_passes_unkeyed_and_fails_keyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, log = keyed_run(tmp_path, monkeypatch)
    events, macs = read_log(log)
    forged, index = resealed_edit(events)
    # the forger keeps every line's MAC, as an edit of one field in place does
    log.write_bytes(b"".join(encode_line(e, m) + b"\n" for e, m in zip(forged, macs, strict=True)))

    unkeyed = file_audit(log, None)
    keyed = file_audit(log, KEY)

    # Documented limit: without a key, a re-sealed edit is a consistent chain.
    assert verdict(unkeyed) == (True, None, False, None, None)
    assert verdict(keyed) == (False, index, True, index - 1, EDITED)


def test_a_resealed_log_with_its_macs_stripped_fails_keyed_at_seq_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, log = keyed_run(tmp_path, monkeypatch)
    forged, _ = resealed_edit(read_log(log)[0])
    log.write_bytes(b"".join(encode_event(e) + b"\n" for e in forged))

    assert file_audit(log, None).ok
    assert verdict(file_audit(log, KEY)) == (False, 0, True, None, NO_MAC)


def test_a_log_cut_at_its_end_is_authenticated_only_through_its_last_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, log = keyed_run(tmp_path, monkeypatch)
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:4]))

    report = file_audit(log, KEY)

    assert verdict(report) == (True, None, False, 3, None)
    assert not report.ended  # the run's end is missing: the CLI says so


def test_a_wrong_key_fails_at_seq_0_naming_both_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, db, log = keyed_run(tmp_path, monkeypatch)
    other = (
        f"its MAC was made with another key (key id {KEY.key_id!r}; this key's is "
        f"{OTHER.key_id!r}): audit with the key the log was written with"
    )

    assert verdict(file_audit(log, OTHER)) == (False, 0, True, None, other)
    assert verdict(store_audit(db, run_id, OTHER)) == (False, 0, True, None, other)


def test_a_forged_mac_with_the_right_key_id_is_a_mismatch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, log = keyed_run(tmp_path, monkeypatch)
    events, macs = read_log(log)
    forged, index = resealed_edit(events)
    guessed = [f"{KEY.key_id}:{'0' * 64}" if i >= index else m for i, m in enumerate(macs)]
    log.write_bytes(
        b"".join(encode_line(e, m) + b"\n" for e, m in zip(forged, guessed, strict=True))
    )

    assert verdict(file_audit(log, KEY)) == (False, index, True, index - 1, EDITED)


# -- the SQLite store ------------------------------------------------------------------------


def test_a_store_rewritten_in_place_passes_unkeyed_and_fails_keyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, db, log = keyed_run(tmp_path, monkeypatch)
    forged, index = resealed_edit(read_log(log)[0])
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "UPDATE events SET hash = ?, body = ? WHERE run_id = ? AND seq = ?",
            [(e.hash, encode_event(e), run_id, e.seq) for e in forged],
        )
    conn.close()

    assert verdict(store_audit(db, run_id, None)) == (True, None, False, None, None)
    assert verdict(store_audit(db, run_id, KEY)) == (False, index, True, index - 1, EDITED)


def test_an_imported_forgery_is_not_vouched_for_even_by_a_keyed_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, log = keyed_run(tmp_path, monkeypatch)
    events, macs = read_log(log)
    forged, index = resealed_edit(events)
    with_macs = b"".join(encode_line(e, m) + b"\n" for e, m in zip(forged, macs, strict=True))
    without = b"".join(encode_event(e) + b"\n" for e in forged)

    async def into(db: Path, data: bytes) -> str:
        store = SqliteStore(db, audit_key=KEY)  # a keyed importer makes no MACs for copies
        try:
            return await import_run(store, data)
        finally:
            await store.close()

    run_id = asyncio.run(into(tmp_path / "a.db", with_macs))
    assert verdict(store_audit(tmp_path / "a.db", run_id, None))[0]
    assert verdict(store_audit(tmp_path / "a.db", run_id, KEY)) == (
        False,
        index,
        True,
        index - 1,
        EDITED,
    )
    run_id = asyncio.run(into(tmp_path / "b.db", without))
    assert verdict(store_audit(tmp_path / "b.db", run_id, None))[0]
    assert verdict(store_audit(tmp_path / "b.db", run_id, KEY)) == (False, 0, True, None, NO_MAC)


def test_export_then_import_keeps_the_macs_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, db, log = keyed_run(tmp_path, monkeypatch)
    copy = tmp_path / "copy.db"

    async def go() -> tuple[bytes, bytes]:
        source = SqliteStore(db, audit_key=None)
        target = SqliteStore(copy, audit_key=None)  # no key: MACs are copied all the same
        try:
            exported = await export_run(source, run_id)
            await import_run(target, exported)
            return exported, await export_run(target, run_id)
        finally:
            await source.close()
            await target.close()

    exported, again = asyncio.run(go())
    assert exported == again == log.read_bytes()
    assert verdict(store_audit(copy, run_id, KEY))[0]


def test_an_unkeyed_log_still_imports_and_fails_only_a_keyed_audit(tmp_path: Path) -> None:
    logs = tmp_path / "logs"

    async def go() -> str:
        outcome = await _agent(store=None, log_dir=logs).run("add twice")
        store = SqliteStore(tmp_path / "t.db", audit_key=KEY)
        try:
            return await import_run(store, logs / f"{outcome.run_id}.jsonl")
        finally:
            await store.close()

    run_id = asyncio.run(go())

    assert verdict(store_audit(tmp_path / "t.db", run_id, None))[0]
    assert verdict(store_audit(tmp_path / "t.db", run_id, KEY)) == (False, 0, True, None, NO_MAC)


def test_a_store_without_the_macs_table_opens_and_gets_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, db, _ = keyed_run(tmp_path, monkeypatch)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TABLE macs")  # as a store written before MACs existed
    conn.close()

    assert verdict(store_audit(db, run_id, None))[0]
    assert verdict(store_audit(db, run_id, KEY)) == (False, 0, True, None, NO_MAC)
    with sqlite3.connect(db) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "macs" in tables


def test_records_of_a_keyed_writer_keep_their_macs_when_another_store_applies_them(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"

    async def go() -> tuple[list[Event], dict[int, str]]:
        writer = SqliteStore(db, audit_key=KEY, apply_interval=3600)  # records stay pending
        reader = SqliteStore(db, audit_key=None)
        try:
            outcome = await _agent(store=writer, log_dir=None).run("add twice")
            assert writer.pending_dir is not None
            assert list(writer.pending_dir.glob("*.pending"))
            return await reader.read(outcome.run_id), await reader.read_macs(outcome.run_id)
        finally:
            await reader.close()
            await writer.close()

    events, macs = asyncio.run(go())
    assert macs == {e.seq: KEY.mac(e.hash) for e in events}


def test_the_key_is_never_written_by_tether(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key_file = tmp_path / "keys" / "audit.key"
    key_file.parent.mkdir()
    key_file.write_bytes(SECRET)
    monkeypatch.setenv(ENV_KEY_FILE, str(key_file))
    written = tmp_path / "written"
    seen: list[bytes] = []

    def contents() -> bytes:
        return b"".join(p.read_bytes() for p in sorted(written.rglob("*")) if p.is_file())

    async def go() -> None:
        store = SqliteStore(written / "t.db", apply_interval=3600)
        try:
            run_id = (await _agent(store=store, log_dir=written / "logs").run("add")).run_id
            seen.append(await asyncio.to_thread(contents))  # the pending file, the WAL
            seen.append(await export_run(store, run_id))
        finally:
            await store.close()
        seen.append(await asyncio.to_thread(contents))

    asyncio.run(go())
    for data in seen:
        assert KEY.key_id.encode() in data  # the MACs are there
        for form in (SECRET, SECRET.hex().encode()):
            assert form not in data


def test_a_keyed_memory_store_keeps_macs_and_copies_them_on_import() -> None:
    async def go() -> tuple[dict[int, str], dict[int, str], list[Event]]:
        keyed, plain = MemoryStore(audit_key=KEY), MemoryStore(audit_key=OTHER)
        outcome = await _agent(store=keyed, log_dir=None).run("add twice")
        await import_run(plain, await export_run(keyed, outcome.run_id))
        events = await keyed.read(outcome.run_id)
        return await keyed.read_macs(outcome.run_id), await plain.read_macs(outcome.run_id), events

    made, copied, events = asyncio.run(go())
    assert made == copied == {e.seq: KEY.mac(e.hash) for e in events}


def test_a_line_whose_mac_is_not_a_string_does_not_decode() -> None:
    line = b'{"kind":"run_started","mac":7}'
    with pytest.raises(LogError, match="an event's 'mac' must be a string"):
        decode_line(line)
