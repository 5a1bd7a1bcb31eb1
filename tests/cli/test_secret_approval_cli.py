"""``tether approve`` of a call whose arguments hold a secret, from another process."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tether import Agent, RulePolicy, require_approval, tool
from tether.cli.app import app
from tether.run import vault
from tether.testing import ScriptedModel, call, finish

KEY = "sk-proj-Abcdefghijklmnopqrstuvwxyz012345"
given: list[str] = []


@tool(open_world=False)
def deploy(token: str) -> str:
    """Deploys.

    Args:
        token: A credential.
    """
    given.append(token)
    return f"deployed with a token of {len(token)} characters"


AGENT = Agent(
    name="deployer",
    model=ScriptedModel([call("deploy", token=KEY), finish("deployed")]),
    tools=[deploy],
    policy=RulePolicy(None, require_approval("deploy")),
)
REF = "tests.cli.test_secret_approval_cli:AGENT"


def waiting_run(db: Path) -> str:
    ran = CliRunner().invoke(app, ["run", "deploy", "--agent", REF, "--db", str(db), "--no-log"])
    assert ran.exit_code == 1, ran.output  # waiting: not a success yet
    assert "[REDACTED:openai_key]" in ran.output
    assert KEY not in ran.output
    listed = CliRunner().invoke(app, ["runs", "--db", str(db)])
    vault.clear()  # `tether approve` runs in a process of its own: the secret is not there
    return listed.stdout.splitlines()[0].split("\t")[0]


def test_approving_without_the_secret_says_to_give_it_in_full(tmp_path: Path) -> None:
    given.clear()
    db = tmp_path / "t.db"
    run_id = waiting_run(db)
    ran = CliRunner().invoke(app, ["approve", run_id, "--all", "--agent", REF, "--db", str(db)])
    assert given == []
    shown = CliRunner().invoke(app, ["show", run_id, "--db", str(db)])
    assert "not executed: the arguments of call_0_0 held a secret" in shown.stdout, ran.output


def test_approving_with_the_arguments_in_full_runs_and_never_shows_or_stores_them(
    tmp_path: Path,
) -> None:
    given.clear()
    db = tmp_path / "t.db"
    run_id = waiting_run(db)
    ran = CliRunner().invoke(
        app,
        [
            *("approve", run_id, "call_0_0", "--agent", REF),
            *("--args", f'{{"token": "{KEY}"}}', "--db", str(db)),
        ],
    )
    assert ran.exit_code == 0, ran.output
    assert given == [KEY]
    assert KEY not in ran.output
    assert "[REDACTED:openai_key]" in ran.output
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("t.db*") if p.is_file())
    assert KEY.encode() not in stored
