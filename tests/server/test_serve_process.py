"""``tether serve`` as users run it: a real server process, keys made by the CLI, a live
event stream dropped mid-run and resumed with ``Last-Event-ID``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

AGENT = textwrap.dedent(
    '''
    import asyncio
    from tether import Agent, tool
    from tether.testing import ScriptedModel, call, finish

    @tool(read_only=True, open_world=False)
    async def pause(seconds: float) -> str:
        """Waits a while."""
        await asyncio.sleep(seconds)
        return "waited"

    steps = [call("pause", seconds=0.3) for _ in range(6)] + [finish("done")]
    agent = Agent(name="pauser", model=ScriptedModel(steps), tools=[pause])
    '''
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tether(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(cwd)},
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    (tmp_path / "served.py").write_text(AGENT)
    db = tmp_path / "runs.db"
    made = _tether("keys", "create", "--tenant", "acme", "--scope", "run", "--scope", "read",
                   "--db", str(db), cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    port = _port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether",
            "serve",
            "--agent",
            "served:agent",
            "--port",
            str(port),
            "--db",
            str(db),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/v1/runs", timeout=1)
            break
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate()
                raise AssertionError(f"tether serve did not start: {err.decode()}") from None
            time.sleep(0.1)
    yield url, token, db
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()


def _events(lines: Iterator[str], until: int | None = None) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    seq, kind = None, ""
    for line in lines:
        if line.startswith("id: "):
            seq = int(line[4:])
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            assert seq is not None
            assert orjson.loads(line[6:])["seq"] == seq
            found.append((seq, kind))
            if until is not None and len(found) >= until:
                break
    return found


def test_a_live_stream_dropped_mid_run_resumes_with_no_gap_and_no_duplicate(
    server: tuple[str, str, Path],
) -> None:
    url, token, db = server
    auth = {"Authorization": f"Bearer {token}"}
    started = httpx.post(f"{url}/v1/runs", json={"goal": "pause a while"}, headers=auth)
    assert started.status_code == 202, started.text
    run_id = started.json()["run_id"]
    with httpx.stream("GET", f"{url}/v1/runs/{run_id}/events", headers=auth, timeout=30) as r:
        first = _events(r.iter_lines(), until=3)  # then the connection drops, mid-run
    assert httpx.get(f"{url}/v1/runs/{run_id}", headers=auth).json()["status"] == "running"
    resumed = {**auth, "Last-Event-ID": str(first[-1][0])}
    with httpx.stream("GET", f"{url}/v1/runs/{run_id}/events", headers=resumed, timeout=30) as r:
        rest = _events(r.iter_lines())
    seqs = [seq for seq, _ in first + rest]
    assert seqs == list(range(len(seqs)))  # no gap, no duplicate
    assert rest[-1][1] == "run_finished"
    # the CLI reads the same store: the run is there, finished
    shown = _tether("runs", "--db", str(db), cwd=db.parent)
    assert run_id in shown.stdout
    assert "finished" in shown.stdout


def test_a_key_revoked_by_the_cli_is_refused_by_the_running_server(
    server: tuple[str, str, Path],
) -> None:
    url, token, db = server
    got = httpx.get(f"{url}/v1/runs", headers={"Authorization": "Bearer nope"})
    assert got.status_code == 401
    assert "not a tether API key" in got.json()["error"]
    assert httpx.get(f"{url}/v1/runs", headers={"X-API-Key": token}).status_code == 200
    listed = _tether("keys", "list", "--db", str(db), cwd=db.parent)
    [row] = [line.split("\t") for line in listed.stdout.splitlines()]
    assert row[1:4] == ["acme", "read,run", ""]
    revoked = _tether("keys", "revoke", row[0], "--db", str(db), cwd=db.parent)
    assert revoked.returncode == 0, revoked.stderr
    refused = httpx.get(f"{url}/v1/runs", headers={"X-API-Key": token})
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]
