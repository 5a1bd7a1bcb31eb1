"""schemathesis against a real ``tether serve``: examples, coverage, fuzzing and stateful
phases of its OpenAPI schema, with 0 failures (every status answered is documented, every
body matches its schema, nothing valid is refused and nothing invalid accepted)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import AGENT, serve, tether_cli

WAITING = textwrap.dedent(
    """
    from tether.policy import RulePolicy, Rules, require_approval

    @tool(destructive=True, open_world=False)
    def wire(amount: float) -> str:
        \"\"\"Wires money.\"\"\"
        return "wired"

    holder = Agent(name="holder", model=ScriptedModel([call("wire", amount=5), finish("paid")]),
                   tools=[wire], policy=RulePolicy(Rules(rules=(require_approval("wire"),))))
    asker = Agent(name="asker", can_ask_user=True, model=ScriptedModel(
        [call("ask_user", question="Which city?"), finish("ok")]))
    """
)


@pytest.fixture
def waiting_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """``tether serve`` with agents whose runs wait: one for approval, one for an answer."""
    (tmp_path / "served.py").write_text(AGENT + WAITING)
    db = tmp_path / "runs.db"
    agents = ("--agent", "served:holder", "--agent", "served:asker")
    proc, url = serve(tmp_path, db, "served:agent", *agents)
    yield url, db
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert b"Traceback" not in err, err.decode()


def _waiting(url: str, token: str, agent: str, status: str) -> str:
    """A run of ``agent`` that waits (``status``), for the fuzzer to act on."""
    headers = {"Authorization": f"Bearer {token}"}
    started = httpx.post(f"{url}/v1/runs", json={"goal": "go", "agent": agent}, headers=headers)
    assert started.status_code == 202, started.text
    run_id = str(started.json()["run_id"])
    for _ in range(200):
        if httpx.get(f"{url}/v1/runs/{run_id}", headers=headers).json()["status"] == status:
            return run_id
        time.sleep(0.05)
    raise AssertionError(f"the {agent} run did not reach {status}")


CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.mark.timeout(600)
def test_the_openapi_schema_survives_schemathesis(
    waiting_server: tuple[str, Path],
) -> None:
    url, db = waiting_server
    made = tether_cli("keys", "create", "--tenant", "fuzz", "--scope", "admin", "--db", str(db),
                      cwd=db.parent)  # fmt: skip
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    env = {  # runs that wait, so that these operations reach more than a 404
        **os.environ,
        "TETHER_FUZZ_APPROVAL_RUN": _waiting(url, token, "holder", "waiting_for_approval"),
        "TETHER_FUZZ_ANSWER_RUN": _waiting(url, token, "asker", "waiting_for_user"),
        "TETHER_FUZZ_RESUME_RUN": _waiting(url, token, "holder", "waiting_for_approval"),
        "TETHER_FUZZ_CANCEL_RUN": _waiting(url, token, "holder", "waiting_for_approval"),
    }
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli is not None, "schemathesis is in the [test] extra: pip install -e '.[test]'"
    done = subprocess.run(
        [
            cli,
            "--config-file",
            str(CONFIG),
            "run",
            f"{url}/openapi.json",
            "-H",
            f"Authorization: Bearer {token}",
            "--max-examples",
            "40",
            "--seed",
            "20261127",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in done.stdout, done.stdout[-3000:]
    warned = done.stdout.partition("Missing test data")[2].partition("💡")[0]
    for given in ("approvals", "answer", "resume", "cancel"):  # each had a real waiting run
        assert f"/{{run_id}}/{given}" not in warned, done.stdout[-3000:]
