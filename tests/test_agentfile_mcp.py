"""MCP servers declared in agent files: listed at load, a session opened by the calls."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import free_port, wait_listening
from tether.agentfile import load_agent_file
from tether.errors import ConfigError
from tether.events import ToolCallFinished
from tether.outcome import RunOutcome
from tether.testing import ScriptedModel, call, finish

FIXTURE = Path(__file__).parent / "tools" / "mcp_fixture_server.py"


def write(folder: Path, text: str) -> Path:
    path = folder / "agent.toml"
    path.write_text(textwrap.dedent(text))
    return path


def results(outcome: RunOutcome[str]) -> list[str]:
    return [
        str(e.content)
        for e in outcome.events
        if isinstance(e, ToolCallFinished) and e.tool != "finish_task"
    ]


def test_a_stdio_server_in_a_file_serves_runs_on_any_event_loop(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        name = "timekeeper"
        [[mcp]]
        name = "time"
        command = [{sys.executable!r}, "-m", "mcp_server_time", "--local-timezone", "UTC"]
        only = ["get_current_time"]
        prefix = "time_"
        [policy]
        allow = [{{ tools = ["time_get_current_time"] }}]
        """,
    )
    agent = load_agent_file(path)
    assert set(agent.spec.tool_map) >= {"time_get_current_time"}
    assert "time_convert_time" not in agent.spec.tool_map
    assert agent.spec.tool_map["time_get_current_time"].origin == "mcp:time"
    for _ in range(2):  # each asyncio.run is a new loop: the session is opened again in it
        model = ScriptedModel([call("time_get_current_time", timezone="Asia/Tokyo"), finish("ok")])
        outcome = asyncio.run(agent.run("time in Tokyo?", model=model))
        assert outcome.status == "finished"
        [result] = results(outcome)
        assert "Asia/Tokyo" in result


async def test_a_server_that_dies_is_started_again_at_the_next_call(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        name = "fragile"
        [[mcp]]
        name = "fixture"
        command = [{sys.executable!r}, {str(FIXTURE)!r}]
        only = ["die", "echo"]
        timeout = 20
        [policy]
        allow = [{{ tools = ["die", "echo"] }}]
        """,
    )
    agent = load_agent_file(path)
    script = [call("echo", text="one"), call("die"), call("echo", text="two"), finish("done")]
    outcome = await agent.run("echo, die, echo", model=ScriptedModel(script))
    first, died, second = results(outcome)
    assert "echo: one" in first
    assert "failed during the call" in died
    assert "echo: two" in second  # a new server process, its tools checked against the listing


def test_an_http_server_gets_headers_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(FIXTURE), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, lambda: server.poll() is None, seconds=30)
        monkeypatch.setenv("TEAM_FOR_TEST", "blue")
        path = write(
            tmp_path,
            f"""
            name = "teamed"
            [[mcp]]
            name = "fixture"
            url = "http://127.0.0.1:{port}/mcp"
            headers = {{ X-Team = "${{TEAM_FOR_TEST}}" }}
            only = ["team"]
            [policy]
            allow = [{{ tools = ["team"] }}]
            """,
        )
        agent = load_agent_file(path)
        outcome = asyncio.run(agent.run("team?", model=ScriptedModel([call("team"), finish("x")])))
        assert results(outcome) == ["(TextBlock(kind='text', text='blue'),)"]
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ('name = "x"', "give command = [program, args...] (stdio) or url"),
        ('name = "x"\ncommand = ["a"]\nurl = "http://h"', "give command"),
        ('name = "x"\ncommand = "python -m x"', "command must be an array of strings"),
        ('name = "x"\nurl = "ftp://h"', "url must be an http(s) URL"),
        ('name = "x"\nurl = "http://h"\nenv = { A = "b" }', "env and cwd are for a server"),
        ('name = "x"\ncommand = ["a"]\nheaders = { A = "b" }', "headers are for a server"),
        ('name = "x"\ncommnd = ["a"]', "unknown keys ['commnd']"),
        ('name = "x"\ncommand = ["a"]\ntimeout = 0', "timeout must be a positive number"),
        ('name = "x"\ncommand = ["a"]\nonly = "echo"', "only must be an array"),
        (
            'name = "x"\nurl = "http://h"\nheaders = { A = "${NOT_SET_ANYWHERE_42}" }',
            "the environment variable NOT_SET_ANYWHERE_42 is not set",
        ),
        ('name = "x"\ncommand = ["/nonexistent/program"]\ntimeout = 5', "did not start a session"),
        ('name = "two words"\ncommand = ["a"]', "letters, digits"),
    ],
)
def test_every_mistake_names_the_file_and_the_server(tmp_path: Path, table: str, says: str) -> None:
    path = write(tmp_path, f'name = "a"\n[[mcp]]\n{table}\n')
    with pytest.raises(ConfigError) as raised:
        load_agent_file(path)
    assert str(path) in str(raised.value)
    assert "[[mcp]] #1" in str(raised.value)
    assert says in str(raised.value)
