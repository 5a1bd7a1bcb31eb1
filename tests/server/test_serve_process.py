"""``tether serve`` as users run it: a real server process, keys made by the CLI, a live
event stream dropped mid-run and resumed with ``Last-Event-ID``."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson

from tests.server.conftest import serve, tether_cli


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
    shown = tether_cli("runs", "--db", str(db), cwd=db.parent)
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
    listed = tether_cli("keys", "list", "--db", str(db), cwd=db.parent)
    [row] = [line.split("\t") for line in listed.stdout.splitlines()]
    assert row[1:4] == ["acme", "read,run", ""]
    revoked = tether_cli("keys", "revoke", row[0], "--db", str(db), cwd=db.parent)
    assert revoked.returncode == 0, revoked.stderr
    refused = httpx.get(f"{url}/v1/runs", headers={"X-API-Key": token})
    assert refused.status_code == 401
    assert "revoked" in refused.json()["error"]


def test_runs_in_flight_when_the_server_is_killed_finish_after_it_restarts(
    served: tuple[Path, str],
) -> None:
    db, token = served
    proc, _, auth, run_id = _serve_and_start(db, token)
    time.sleep(0.5)  # mid-run: a pause in flight
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert tether_cli("runs", "--db", str(db), cwd=db.parent).stdout.count("running") == 1
    _restarted_and_finished(db, auth, run_id)  # resumes what the killed server left


def test_more_runs_left_running_than_the_limit_all_finish_after_a_restart(
    served: tuple[Path, str],
) -> None:
    db, token = served
    auth = {"Authorization": f"Bearer {token}"}
    proc, url = serve(db.parent, db)
    started = [
        httpx.post(f"{url}/v1/runs", json={"goal": f"pause {i}"}, headers=auth).json()["run_id"]
        for i in range(3)
    ]
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    proc, url = serve(db.parent, db, "served:agent", "--max-active-runs", "1")
    try:  # one at a time, as the limit says
        assert _statuses_once_ended(url, auth, started, seconds=90) == ["finished"] * 3
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_sigterm_with_a_stream_open_stops_the_server_and_the_restart_finishes_the_run(
    served: tuple[Path, str],
) -> None:
    # before: a graceful shutdown ended every run in flight "cancelled", for good (a rolling
    # restart lost them), while a killed server's runs were resumed when it started again
    db, token = served
    proc, url, auth, run_id = _serve_and_start(db, token)
    with httpx.stream("GET", f"{url}/v1/runs/{run_id}/events", headers=auth, timeout=30) as r:
        _events(r.iter_lines(), until=2)  # the stream is open, the run mid-way
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 15
    assert b"Traceback" not in err, err.decode()
    listed = tether_cli("runs", "--db", str(db), cwd=db.parent).stdout
    if "finished" not in listed:  # (it may have ended before the signal came)
        assert "running" in listed
        assert "cancelled" not in listed
    _restarted_and_finished(db, auth, run_id)  # resumes what the stopped server left


def _restarted_and_finished(db: Path, auth: dict[str, str], run_id: str) -> None:
    """A server started again over ``db`` finishes ``run_id``, its log audited whole."""
    proc, url = serve(db.parent, db)
    try:
        assert _statuses_once_ended(url, auth, [run_id], seconds=60) == ["finished"]
        audited = tether_cli("audit", run_id, "--db", str(db), cwd=db.parent)
        assert audited.returncode == 0, audited.stdout + audited.stderr
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _statuses_once_ended(
    url: str, auth: dict[str, str], run_ids: list[str], *, seconds: float
) -> list[str]:
    """The runs' statuses once none is running any more (or ``seconds`` have passed)."""
    deadline = time.monotonic() + seconds
    while True:
        statuses = [httpx.get(f"{url}/v1/runs/{r}", headers=auth).json()["status"] for r in run_ids]
        if "running" not in statuses or time.monotonic() > deadline:
            return statuses
        time.sleep(0.2)


def _serve_and_start(
    db: Path, token: str
) -> tuple[subprocess.Popen[bytes], str, dict[str, str], str]:
    """A server over ``db``, and a run started on it."""
    auth = {"Authorization": f"Bearer {token}"}
    proc, url = serve(db.parent, db)
    run_id = httpx.post(f"{url}/v1/runs", json={"goal": "pause"}, headers=auth).json()["run_id"]
    return proc, url, auth, run_id


def test_an_absolute_form_target_is_its_path_and_a_trailing_slash_is_no_redirect(
    server: tuple[str, str, Path],
) -> None:
    # before: "GET http://host/v1/runs HTTP/1.1" was 404 (uvicorn gives the whole URL as the
    # path), and GET /v1/runs/ answered 307 to the address in the client's own Host header
    import socket
    from urllib.parse import urlsplit

    url, token, _ = server
    where = urlsplit(url)
    assert where.hostname is not None
    assert where.port is not None
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(
            f"GET {url}/v1/runs HTTP/1.1\r\nHost: {where.netloc}\r\n"
            f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    slashed = httpx.get(
        f"{url}/v1/runs/", headers={"Authorization": f"Bearer {token}", "Host": "evil.example"}
    )
    assert slashed.status_code == 404
    assert "location" not in slashed.headers
    assert "error" in slashed.json()
