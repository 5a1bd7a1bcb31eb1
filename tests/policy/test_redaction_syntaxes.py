"""Secrets written in many syntaxes, through a whole run: never in the store, JSONL or CLI.

A property test: hypothesis draws a secret and the syntax it is written in (an environment
line, a config value, a URL's password, a JSON key, an HTTP header); a tool returns it, the
model passes it bare to another tool that echoes it, and repeats it in its answer. Then the raw bytes of the SQLite store (its file and its
pending files), the run's JSONL log, and what ``tether show`` and ``tether export`` print
are searched for it.
"""

from __future__ import annotations

import asyncio
import base64
import string
import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tether import Agent, tool
from tether.cli.app import app
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish

# what people put in passwords, except whitespace, quotes and "@" (a raw "@" followed by a
# host name is where a URL's password ends: percent-encode it)
_PASSWORD = string.ascii_letters + string.digits + "/!#%^*+-_.~$()[]{}|<>?"
_TOKEN = string.ascii_letters + string.digits + "._~+/-"

SYNTAXES: dict[str, str] = {
    "aws env": "AWS_SECRET_ACCESS_KEY={}",
    "aws lower": "aws_secret_access_key = {}",
    "aws exported": "export AWS_SECRET_ACCESS_KEY='{}'",
    "dotenv": 'DB_PASSWORD="{}"',
    "yaml": "password: {}",
    "ini": "api_key={}",
    "json": '{{"client_secret": "{}"}}',
    "url": "postgres://admin:{}@db.example.com:5432/app",
    "url without user": "redis://:{}@cache:6379/0",
    "basic header": "Authorization: Basic {}",
    "bearer header": "Authorization: Bearer {}",
}


@st.composite
def written(draw: st.DrawFn) -> tuple[str, str]:
    """``(text, secret)``: a secret, written in one of ``SYNTAXES``."""
    syntax = draw(st.sampled_from(sorted(SYNTAXES)))
    if syntax == "bearer header":
        secret = "Zq9" + draw(st.text(alphabet=_TOKEN, min_size=16, max_size=40))
    else:
        secret = "Zq9" + draw(st.text(alphabet=_PASSWORD, min_size=5, max_size=30))
        if syntax == "basic header":  # what the header holds is user:password, in base64
            secret = base64.b64encode(f"admin:{secret}".encode()).decode()
        elif syntax in ("dotenv", "aws exported"):
            secret = secret.replace("$", "")  # a shell would expand it
        if syntax in ("yaml", "ini", "aws env", "aws lower"):
            secret = secret.replace("&", "")  # ends an unquoted value (a query string's)
    return SYNTAXES[syntax].format(secret), secret


def _run(text: str, secret: str, folder: Path) -> tuple[str, Path]:
    @tool(read_only=True, open_world=False)
    def read_config() -> str:
        """Reads the configuration."""
        return f"the configuration:\n{text}\n"

    @tool(read_only=True, open_world=False)
    def check(value: str) -> str:
        """Checks a value.

        Args:
            value: The value.
        """
        return f"{value} checks out"  # the secret bare: known from the first result only

    db = folder / "t.db"
    agent = Agent(
        name="config",
        model=ScriptedModel(
            [call("read_config"), call("check", value=secret), finish(f"it says {text}")]
        ),
        tools=[read_config, check],
        log_dir=folder / "runs",
    )

    async def go() -> str:
        store = SqliteStore(db)
        try:
            outcome = await replace(agent, store=store).run("read the configuration")
        finally:
            await store.close()
        assert outcome.status == "finished"
        return outcome.run_id

    return asyncio.run(go()), db


@settings(max_examples=100, deadline=None)
@given(case=written())
def test_a_secret_in_any_syntax_reaches_neither_store_log_nor_console(
    case: tuple[str, str],
) -> None:
    text, secret = case
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        run_id, db = _run(text, secret, folder)
        runner = CliRunner()
        shown = runner.invoke(app, ["show", run_id, "--db", str(db)])
        exported = runner.invoke(app, ["export", run_id, "--db", str(db)])
        assert shown.exit_code == 0, shown.output
        assert exported.exit_code == 0, exported.output
        stored = b"".join(p.read_bytes() for p in folder.rglob("t.db*") if p.is_file())
        log = b"".join(p.read_bytes() for p in (folder / "runs").glob("*.jsonl"))
        for where, data in {
            "store": stored,
            "jsonl": log,
            "show": shown.output.encode(),
            "export": exported.output.encode(),
        }.items():
            assert secret.encode() not in data, f"{where} holds the secret of {text!r}"
        assert b"[REDACTED:" in log
