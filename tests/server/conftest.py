"""A real ``tether serve`` process for the tests that need one."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import free_port

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


def tether_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(cwd)},
    )


def serve(
    cwd: Path, db: Path, agent: str = "served:agent", *extra: str
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``tether serve`` on a free port over ``db``; returns the process and its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "serve", "--agent", agent,
         "--port", str(port), "--db", str(db), *extra],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(cwd)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/v1/runs", timeout=1)
            return proc, url
        except httpx.TransportError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate()
                raise AssertionError(f"tether serve did not start: {err.decode()}") from None
            time.sleep(0.1)


@pytest.fixture
def served(tmp_path: Path) -> tuple[Path, str]:
    """A directory with the served agent's module, and a run key of tenant acme."""
    (tmp_path / "served.py").write_text(AGENT)
    db = tmp_path / "runs.db"
    made = tether_cli("keys", "create", "--tenant", "acme", "--scope", "run", "--scope", "read",
                      "--db", str(db), cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    return db, made.stdout.strip()


@pytest.fixture
def server(served: tuple[Path, str]) -> Iterator[tuple[str, str, Path]]:
    db, token = served
    proc, url = serve(db.parent, db)
    yield url, token, db
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()
