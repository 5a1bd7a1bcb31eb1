"""Agents declared in TOML files: what a file gives, and errors that name the file and key."""

from __future__ import annotations

import os
import textwrap
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.agentfile import agents_in, load_agent_file
from tether.cli.app import app
from tether.errors import ConfigError
from tether.events import ToolCallFinished
from tether.limits import Limits, PhaseLimits
from tether.policy import RulePolicy
from tether.testing import ScriptedModel, call, finish

FULL = """
name = "support"
instructions_file = "prompt.md"
model = "scripted:script.json"
can_ask_user = true

[limits]
max_steps = 7
max_seconds = 60
[limits.think]
max_steps = 2

[[tools]]
builtin = "calculator"
[[tools]]
builtin = "files"
root = "docs"
trusted = true
[[tools]]
function = "tests.agentfile_tools:lookup"

[policy]
require_approval = [{ tools = ["write_file"] }]
"""


def write(folder: Path, text: str, name: str = "agent.toml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


async def test_a_file_declares_the_whole_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "hello.txt").write_text("hello from the docs")
    (tmp_path / "prompt.md").write_text("You answer from the docs.")
    agent = load_agent_file(write(tmp_path, FULL))
    assert agent.name == "support"
    assert agent.instructions == "You answer from the docs."
    assert agent.can_ask_user
    assert agent.limits == Limits(max_steps=7, max_seconds=60, think=PhaseLimits(max_steps=2))
    names = set(agent.spec.tool_map)
    assert {"calculate", "read_file", "write_file", "lookup"} <= names
    assert isinstance(agent.policy, RulePolicy)
    [rule] = agent.policy.rules.rules
    assert rule.decision == "needs_approval"
    # the files root is the file's folder's docs/, wherever the command runs
    monkeypatch.chdir(Path("/"))
    model = ScriptedModel([call("read_file", path="hello.txt"), finish("read")])
    outcome = await agent.run("read hello.txt", model=model)
    [result] = [e for e in outcome.events if isinstance(e, ToolCallFinished)][:1]
    assert "hello from the docs" in str(result.content)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('name = "a"\nmodle = "local"\n', "unknown keys ['modle']"),
        ('instructions = "x"\n', "name must be a non-empty string"),
        ('name = "a"\n[limits]\nmax_stepz = 3\n', "[limits]: unknown keys ['max_stepz']"),
        ('name = "a"\n[limits.think]\ntimeout = "soon"\n', "[limits.think]"),
        ('name = "a"\n[[tools]]\nbuiltin = "rocket"\n', "[[tools]] #1: builtin 'rocket' is not"),
        (
            'name = "a"\n[[tools]]\nbuiltin = "files"\nrot = "."\n',
            "(files): unknown keys ['rot'] (known: follow_symlinks, ",
        ),
        (
            'name = "a"\n[[tools]]\nfunction = "nowhere:nothing"\n',
            "cannot import function 'nowhere:nothing'",
        ),
        ('name = "a"\n[[tools]]\nbuiltin = "calculator"\nfunction = "x:y"\n', "give builtin"),
        ('name = "a"\n[policy]\nalow = []\n', "[policy]"),
        ('name = "a"\ncan_ask_user = "yes"\n', "can_ask_user must be true or false"),
        ("name = \n", "is not valid TOML"),
        ('name = "a"\na = ' + "[" * 5000 + "]" * 5000 + "\n", "nests arrays or tables too deeply"),
        ('name = "a"\ninstructions_file = "bad.txt"\n', "it is not UTF-8 text"),
        (
            'name = "a"\n[limits]\nmax_steps = 7.5\n',
            "[limits]: max_steps must be a whole number such as 10, not 7.5 (a number)",
        ),
        (
            'name = "a"\n[limits]\nmax_tool_calls = true\n',
            "max_tool_calls must be a whole number such as 10, not true (a boolean)",
        ),
        (
            'name = "a"\n[[tools]]\nbuiltin = "shell"\nworkspace = "."\nallow = { ls = "x" }\n',
            "(shell): ",
        ),
        ('name = "a"\n[[tools]]\nfunction = "json:JSONDecoder"\n', "is a type, not a tool"),
    ],
)
def test_every_mistake_names_the_file_and_the_key(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe\x00garbage")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_agent_file(path)
    assert str(path) in str(raised.value)
    assert says in str(raised.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_file_named_beside_it_is_a_regular_file_of_at_most_4_mib(tmp_path: Path) -> None:
    (tmp_path / "huge.md").write_bytes(b"")
    os.truncate(tmp_path / "huge.md", (4 << 20) + 1)  # sparse: no disk used
    path = write(tmp_path, 'name = "a"\ninstructions_file = "huge.md"\n')
    with pytest.raises(
        ConfigError, match=r"instructions_file: cannot read .*huge.md: it is larger than 4 MiB"
    ):
        load_agent_file(path)
    os.mkfifo(tmp_path / "schema.json")  # reading it waited for a writer forever
    done = threading.Event()

    def unblock_a_reader() -> None:  # so that a reader that opens it is not stuck
        while not done.wait(0.05):
            try:
                os.close(os.open(tmp_path / "schema.json", os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader yet
                continue

    writer = threading.Thread(target=unblock_a_reader)
    writer.start()
    try:
        path = write(tmp_path, 'name = "a"\noutput_file = "schema.json"\n')
        with pytest.raises(ConfigError, match=r"output_file: .*schema.json: it is not a regular"):
            load_agent_file(path)
    finally:
        done.set()
        writer.join()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_an_agent_or_policy_file_that_is_a_fifo_or_huge_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    # before: `tether run --agent fifo.toml` waited for a writer forever
    from tether.policy import load_rules

    os.mkfifo(tmp_path / "agent.toml")
    result: list[BaseException] = []

    def read() -> None:
        try:
            load_agent_file(tmp_path / "agent.toml")
        except ConfigError as exc:
            result.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # let it go: a writer that opens and closes ends the read
        os.close(os.open(tmp_path / "agent.toml", os.O_WRONLY | os.O_NONBLOCK))
        reader.join(30)
        pytest.fail("reading a FIFO agent file waited for a writer")
    assert "it is not a regular file" in str(result[0])
    (tmp_path / "policy.toml").write_bytes(b"")
    os.truncate(tmp_path / "policy.toml", (4 << 20) + 1)
    with pytest.raises(ConfigError, match=r"policy.toml: it is larger than 4 MiB"):
        load_rules(tmp_path / "policy.toml")


def test_a_folder_of_files_is_several_agents(tmp_path: Path) -> None:
    write(tmp_path, 'name = "one"\n', "one.toml")
    write(tmp_path, 'name = "two"\n[[tools]]\nbuiltin = "clock"\n', "two.toml")
    assert [a.name for a in agents_in(tmp_path)] == ["one", "two"]
    with pytest.raises(ConfigError, match="no agent files"):
        agents_in(tmp_path / "one.toml.d")


def test_tether_run_takes_an_agent_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"tool_calls": [{"name": "calculate", "arguments": {"expression": "6*7"}}]},'
                      ' {"tool_calls": [{"name": "finish_task", "arguments": {"answer": "42"}}]}]')  # fmt: skip
    path = write(tmp_path, 'name = "calc"\n[[tools]]\nbuiltin = "calculator"\n')
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(
        app,
        ["run", "what is 6*7?", "--agent", str(path), "--model", f"scripted:{script}", "--no-log"],
    )
    assert done.exit_code == 0, done.output
    assert "42" in done.output
    bad = write(tmp_path, 'name = "calc"\n[[tools]]\nbuiltin = "calculater"\n', "bad.toml")
    failed = CliRunner().invoke(app, ["run", "x", "--agent", str(bad)])
    assert failed.exit_code == 2
    assert "bad.toml: [[tools]] #1: builtin 'calculater'" in failed.output


def test_the_tether_command_finds_modules_beside_the_file_and_in_the_current_directory(
    tmp_path: Path,
) -> None:
    """The ``tether`` script (unlike ``python -m``) has no current directory on its path."""
    import subprocess
    import sys

    script = Path(sys.executable).with_name("tether")
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "beside_tools.py").write_text(
        'def lookup(key: str) -> str:\n    """Looks up.\n\n    Args:\n        key: The key.\n    """\n'
        '    return "found " + key\n'
    )
    (tmp_path / "steps.json").write_text(
        '[{"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}]},'
        ' {"tool_calls": [{"name": "finish_task", "arguments": {"answer": "done"}}]}]'
    )
    write(folder, 'name = "a"\n[[tools]]\nfunction = "beside_tools:lookup"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = subprocess.run(
        [str(script), "run", "go", "--agent", str(folder / "agent.toml"),
         "--model", f"scripted:{tmp_path / 'steps.json'}", "--no-log", "--json"],
        cwd=elsewhere, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert '"answer": "done"' in ran.stdout
    (elsewhere / "here_agent.py").write_text(
        "from tether import Agent\nfrom tether.testing import ScriptedModel, finish\n"
        'agent = Agent(model=ScriptedModel([finish("from here")]))\n'
    )
    here = subprocess.run(
        [str(script), "run", "go", "--agent", "here_agent:agent", "--no-log"],
        cwd=elsewhere, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert here.returncode == 0, here.stderr
    assert "from here" in here.stdout


def test_two_agent_files_with_their_own_tools_py_do_not_share_one(tmp_path: Path) -> None:
    for team in ("billing", "support"):
        folder = tmp_path / team
        folder.mkdir()
        (folder / "tools_for_teams.py").write_text(
            f'def lookup(key: str) -> str:\n    """{team} lookup.\n\n    Args:\n'
            f'        key: The key.\n    """\n    return "{team}"\n'
        )
        write(folder, 'name = "a"\n[[tools]]\nfunction = "tools_for_teams:lookup"\n')
    try:
        billing = load_agent_file(tmp_path / "billing" / "agent.toml")
        assert "billing" in billing.spec.tool_map["lookup"].description
        with pytest.raises(ConfigError, match="shadowed by the 'tools_for_teams' already imported"):
            load_agent_file(tmp_path / "support" / "agent.toml")
    finally:
        import sys

        sys.modules.pop("tools_for_teams", None)
