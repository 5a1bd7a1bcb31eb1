"""The ``tether`` command line, driven through Typer's test runner."""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import cast

import pytest
from typer.testing import CliRunner

import tether
from tests.support import long_line, reseal
from tether.cli.app import app
from tether.codec import MAX_LINE_BYTES, read_jsonl, write_jsonl
from tether.content import TextBlock, content_text
from tether.events import (
    Event,
    LimitReached,
    PolicyDecided,
    RunFinished,
    RunStarted,
    SessionContinued,
    ToolCallFinished,
)

DEMO_ANSWER_START = "17% of 2,340 is 397.8, and there are "
CALCULATE_THEN_FINISH: list[dict[str, object]] = [
    {"tool_calls": [{"name": "calculate", "arguments": {"expression": "2+2"}}]},
    {"tool_calls": [{"name": "finish_task", "arguments": {"answer": "4"}}]},
]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:  # pyright: ignore[reportUnusedFunction]
    """Run every command inside tmp_path, with no model or log dir from the environment.

    Garbage is collected after each test so that a file a command left open is reported
    (as an unraisable ResourceWarning) by the test that leaked it, not by a later one.
    """
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TETHER_MODEL", raising=False)
    monkeypatch.delenv("TETHER_LOG_DIR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "2000")  # keep Rich from wrapping long lines
    yield
    gc.collect()


@dataclasses.dataclass(frozen=True, slots=True)
class Ran:
    """What a command did; unlike typer's ``Result`` it keeps no exception chain alive."""

    exit_code: int
    stdout: str
    stderr: str
    output: str
    """stdout and stderr interleaved, and the traceback of an uncaught exception, if any."""


def invoke(*args: str) -> Ran:
    result = CliRunner().invoke(app, list(args))
    crash = "" if isinstance(result.exception, SystemExit | None) else repr(result.exception)
    return Ran(result.exit_code, result.stdout, result.stderr, result.output + crash)


def flat(text: str) -> str:
    """``text`` with every run of whitespace collapsed to one space."""
    return " ".join(text.split())


def write_script(directory: Path, steps: Sequence[dict[str, object]]) -> Path:
    path = directory / "script.json"
    path.write_text(json.dumps(list(steps)))
    return path


def only_log(directory: Path) -> Path:
    logs = sorted(directory.glob("*.jsonl"))
    assert len(logs) == 1, logs
    return logs[0]


def default_logs(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / ".tether" / "runs").glob("*.jsonl"))


def finished_event(events: Sequence[Event]) -> RunFinished:
    last = events[-1]
    assert isinstance(last, RunFinished)
    return last


def demo_log(tmp_path: Path) -> Path:
    result = invoke("demo", "--log-dir", str(tmp_path / "demo"))
    assert result.exit_code == 0, result.output
    return only_log(tmp_path / "demo")


def tool_result_index(events: Sequence[Event], tool: str) -> int:
    return next(
        i for i, e in enumerate(events) if isinstance(e, ToolCallFinished) and e.tool == tool
    )


# -- version, demo, show -------------------------------------------------------------------


def test_version_prints_the_package_version() -> None:
    result = invoke("version")
    assert result.exit_code == 0
    assert result.stdout == f"{tether.__version__}\n"


def test_no_command_prints_help() -> None:
    result = invoke()
    assert result.exit_code == 2
    for command in ("run", "demo", "replay", "show", "version"):
        assert command in result.output


def test_demo_finishes_and_writes_one_verified_log(tmp_path: Path) -> None:
    result = invoke("demo", "--log-dir", str(tmp_path / "logs"))

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(DEMO_ANSWER_START)
    assert result.stdout.endswith(" days until 2027-01-01.\n")
    log = only_log(tmp_path / "logs")
    events = read_jsonl(log)  # verifies the chain
    assert log.name == f"{events[0].run_id}.jsonl"
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.agent_ref == "tether.examples.demo:demo_agent"
    assert started.model == "scripted-demo"
    ended = finished_event(events)
    assert ended.status == "finished"
    assert ended.answer == result.stdout.rstrip("\n")
    assert ended.tool_calls == 2
    assert f"log: {log}" in result.stderr
    assert " run finished " in flat(result.stderr)  # --verbose is on by default


def test_demo_logs_under_dot_tether_by_default(tmp_path: Path) -> None:
    result = invoke("demo")

    assert result.exit_code == 0, result.output
    [log] = default_logs(tmp_path)
    assert finished_event(read_jsonl(log)).status == "finished"


def test_demo_takes_no_log_and_quiet_as_run_does(tmp_path: Path) -> None:
    # its log-dir error told to use --no-log, which demo did not have; -v could not be undone
    result = invoke("demo", "--no-log", "--quiet")

    assert result.exit_code == 0, result.output
    assert default_logs(tmp_path) == []
    assert "run started" not in result.stderr
    assert result.stdout.startswith(DEMO_ANSWER_START)


def test_show_prints_every_event(tmp_path: Path) -> None:
    log = demo_log(tmp_path)
    events = read_jsonl(log)

    result = invoke("show", str(log))

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == len(events)
    assert [int(line.split()[0]) for line in lines] == [e.seq for e in events]
    assert (
        lines[0].split(maxsplit=1)[1].startswith("run started agent=assistant model=scripted-demo")
    )
    assert "call calculate(" in result.stdout
    assert lines[-1].split(maxsplit=1)[1] == "run finished 2 steps, 2 tool calls"


def test_show_of_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = invoke("show", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 2
    assert "does not exist" in flat(result.output)


def test_show_of_an_unknown_event_kind_exits_2(tmp_path: Path) -> None:
    log = demo_log(tmp_path)
    with log.open("a") as fh:
        fh.write('{"kind": "from_the_future"}\n')

    result = invoke("show", str(log))

    assert result.exit_code == 2
    assert result.stdout == ""
    assert "error: unknown event kind 'from_the_future'" in flat(result.stderr)


def test_show_of_a_line_that_is_not_json_exits_2(tmp_path: Path) -> None:
    log = tmp_path / "broken.jsonl"
    log.write_text("not json\n")

    result = invoke("show", str(log))

    assert result.exit_code == 2
    assert "an event is not valid JSON" in flat(result.stderr)
    assert "(line 1)" in flat(result.stderr)


# -- replay ----------------------------------------------------------------------------------


def test_replay_of_the_demo_log_matches(tmp_path: Path) -> None:
    log = demo_log(tmp_path)
    events = read_jsonl(log)

    result = invoke("replay", str(log))

    assert result.exit_code == 0, result.output
    assert flat(result.stderr) == f"replay matches: {len(events)} events reproduced"


def test_replay_with_an_explicit_agent_matches(tmp_path: Path) -> None:
    log = demo_log(tmp_path)
    result = invoke("replay", str(log), "--agent", "tether.examples.demo:assistant")
    assert result.exit_code == 0, result.output


def test_replay_with_an_agent_that_cannot_be_imported_exits_2(tmp_path: Path) -> None:
    log = demo_log(tmp_path)

    result = invoke("replay", str(log), "--agent", "tether.examples.demo:nope")

    assert result.exit_code == 2
    assert "error: cannot import agent 'tether.examples.demo:nope'" in flat(result.stderr)


@pytest.mark.parametrize("command", ["replay", "run"])
def test_an_agent_factory_that_raises_exits_2_saying_whose_failure(
    tmp_path: Path, command: str
) -> None:
    where = [str(demo_log(tmp_path))] if command == "replay" else ["hi", "--no-log"]

    result = invoke(command, *where, "--agent", "json:dumps")

    assert result.exit_code == 2, result.output
    assert "error: calling 'json:dumps' to make the agent failed: TypeError" in flat(result.stderr)
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "ref",
    [
        "sys:exit",
        "os:abort",
        "code:interact",
        "agents.toml",
        "tether.cli.app:main",
        "tests.cli.log_named:AGENT",  # an Agent, but importing its module runs the module
        "tether.examples.x/../../agents.toml",
    ],
)
def test_replay_never_calls_what_a_log_names(tmp_path: Path, ref: str) -> None:
    # a resealed log named sys:exit and replay exited 0, "matching"; os:abort killed it
    events = read_jsonl(demo_log(tmp_path))
    started = events[0]
    assert isinstance(started, RunStarted)
    forged = tmp_path / "forged.jsonl"
    write_jsonl(forged, reseal([dataclasses.replace(started, agent_ref=ref), *events[1:]]))

    result = invoke("replay", str(forged))

    assert result.exit_code == 2, result.output
    assert "a log's words are not run as code" in flat(result.stderr)


@pytest.mark.parametrize("content", [b"", b"\n \n"], ids=["empty", "blank"])
def test_replay_of_a_log_without_events_exits_2(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "run.jsonl").write_bytes(content)

    result = invoke("replay", "run.jsonl")

    assert result.exit_code == 2, result.output
    assert flat(result.stderr).startswith("error: the log run.jsonl holds no events")


def test_replay_of_a_line_over_the_cap_exits_2_naming_the_line(tmp_path: Path) -> None:
    log = demo_log(tmp_path)
    lines = len(read_jsonl(log))
    with log.open("ab") as fh:
        fh.write(long_line(MAX_LINE_BYTES + 1))

    result = invoke("replay", str(log))

    assert result.exit_code == 2, result.output
    message = flat(result.stderr)
    assert message.startswith(f"error: {log}: a line is longer than 16 MiB")
    assert message.endswith(f"(line {lines + 1})")


def test_replay_of_an_edited_and_resealed_finish_result_diverges(tmp_path: Path) -> None:
    events = read_jsonl(demo_log(tmp_path))
    index = tool_result_index(events, "finish_task")
    edited = list(events)
    edited[index] = dataclasses.replace(
        cast(ToolCallFinished, edited[index]), content=(TextBlock(text="accepted"),)
    )
    log = tmp_path / "edited.jsonl"
    write_jsonl(log, reseal(edited))
    read_jsonl(log)  # the chain is valid again

    result = invoke("replay", str(log))

    assert result.exit_code == 1, result.output
    assert flat(result.stderr) == (
        f"replay diverged: event {index} (tool_call_finished): content was "
        "[{'kind': 'text', 'text': 'accepted'}] in the recording, "
        "[{'kind': 'text', 'text': 'done'}] in the replay"
    )


def test_replay_of_a_resealed_tool_result_that_no_longer_answers_its_call_diverges(
    tmp_path: Path,
) -> None:
    # calculate's result is relabelled as a result tether wrote itself (synthetic): the
    # replay then has no recorded result to serve for the call, which is a divergence.
    events = read_jsonl(demo_log(tmp_path))
    index = tool_result_index(events, "calculate")
    edited = list(events)
    edited[index] = dataclasses.replace(cast(ToolCallFinished, edited[index]), synthetic=True)
    log = tmp_path / "edited.jsonl"
    write_jsonl(log, reseal(edited))

    result = invoke("replay", str(log))

    assert result.exit_code == 1, result.output
    assert flat(result.stderr).startswith("replay diverged: event ")


def test_replay_of_an_edited_tool_result_serves_the_recorded_value(tmp_path: Path) -> None:
    # Tool results are the replay's inputs: a consistently re-sealed content edit is served
    # as recorded, so it reproduces (only the hash chain can show that a log was edited).
    events = read_jsonl(demo_log(tmp_path))
    index = tool_result_index(events, "calculate")
    edited = list(events)
    edited[index] = dataclasses.replace(
        cast(ToolCallFinished, edited[index]), content=(TextBlock(text="400"),)
    )
    log = tmp_path / "edited.jsonl"
    write_jsonl(log, reseal(edited))

    result = invoke("replay", str(log))

    assert result.exit_code == 0, result.output
    assert flat(result.stderr) == f"replay matches: {len(events)} events reproduced"


@pytest.mark.parametrize("command", ["show", "replay"])
def test_a_tampered_log_exits_2_naming_the_seq(tmp_path: Path, command: str) -> None:
    events = read_jsonl(demo_log(tmp_path))
    index = tool_result_index(events, "calculate")
    tampered = list(events)
    tampered[index] = dataclasses.replace(
        cast(ToolCallFinished, tampered[index]), content=(TextBlock(text="400"),)
    )
    log = tmp_path / "tampered.jsonl"
    write_jsonl(log, tampered)

    result = invoke(command, str(log))

    assert result.exit_code == 2
    assert result.stdout == ""
    message = flat(result.stderr)
    assert message.startswith(
        f"error: event log chain broken at seq {events[index].seq}: the hash does not match "
        "the event's content."
    )


# -- run ---------------------------------------------------------------------------------------


def test_run_with_a_scripted_model_finishes_and_logs(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}")

    assert result.exit_code == 0, result.output
    assert result.stdout == "4\n"
    assert flat(result.stderr).startswith("finished · 2 steps · 1 tool calls · ")
    [log] = default_logs(tmp_path)
    events = read_jsonl(log)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.goal == "What is 2+2?"
    assert started.agent == "assistant"
    assert started.agent_ref == "tether.examples.demo:assistant"
    assert started.model == f"scripted:{script}"
    [calculated] = [e for e in events if isinstance(e, ToolCallFinished) and e.tool == "calculate"]
    assert content_text(calculated.content) == "4"
    assert finished_event(events).output == "4"


def test_run_continues_a_session_and_show_says_so(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    given = ["run", "What is 2+2?", "--model", f"scripted:{script}", "--session", "chat-7"]
    assert invoke(*given).exit_code == 0
    assert invoke(*given).exit_code == 0
    logs = sorted(default_logs(tmp_path))
    second = [e for e in read_jsonl(logs[-1]) if isinstance(e, SessionContinued)]
    assert [(e.session, e.goals, e.answers) for e in second] == [
        ("chat-7", ("What is 2+2?",), ("4",))
    ]
    assert "session chat-7: 1 earlier turn" in flat(invoke("show", str(logs[-1])).stdout)
    refused = invoke(*given, "--no-store")
    assert refused.exit_code == 2
    assert "--session keeps its turns in the run store" in flat(refused.stderr)


def test_run_takes_context_as_json_or_from_a_file(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    given = ["run", "What is 2+2?", "--model", f"scripted:{script}"]
    assert invoke(*given, "--context", '{"user": "ada", "units": "metric"}').exit_code == 0
    (tmp_path / "ctx.json").write_text('{"ticket": 7}')
    assert invoke(*given, "--context", "@ctx.json").exit_code == 0
    contexts: list[object] = []
    for log in default_logs(tmp_path):
        started = read_jsonl(log)[0]
        assert isinstance(started, RunStarted)
        contexts.append(started.context)
    assert sorted(contexts, key=str) == [{"ticket": 7}, {"units": "metric", "user": "ada"}]
    shown = [invoke("show", str(log)).stdout for log in default_logs(tmp_path)]
    assert any('context={"ticket":7}' in flat(text) for text in shown)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{user: ada}", "error: --context is not JSON"),
        ('["a list"]', "error: --context must be a JSON object ({...}), not list"),
        ("@missing.json", "error: cannot read the context file missing.json"),
        ("@/dev/zero", "error: the context file /dev/zero is over 1 MiB"),
    ],
)
def test_run_refuses_a_context_that_is_not_a_json_object(value: str, message: str) -> None:
    result = invoke("run", "What is 2+2?", "--model", "scripted:none.json", "--context", value)
    assert result.exit_code == 2
    assert flat(result.stderr).startswith(message), result.output
    assert "Traceback" not in result.output
    assert not (Path.cwd() / ".tether").exists()  # refused before anything was opened


def test_run_streams_the_models_text_with_stream(tmp_path: Path) -> None:
    steps: list[dict[str, object]] = [
        {
            "text": "Let me add them.\nThe calculator knows.",
            "tool_calls": [{"name": "calculate", "arguments": {"expression": "2+2"}}],
        },
        {"tool_calls": [{"name": "finish_task", "arguments": {"answer": "4"}}]},
    ]
    script = write_script(tmp_path, steps)
    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}", "--stream")
    assert result.exit_code == 0, result.output
    assert result.stdout == "4\n"
    assert "│ Let me add them." in result.stderr
    assert "│ The calculator knows." in result.stderr
    assert '│ → calculate {"expression":"2+2"}' in result.stderr  # its calls too
    assert '│ → finish_task {"answer":"4"}' in result.stderr
    shown = result.stderr
    assert shown.index("The calculator knows.") < shown.index("→ calculate")  # in order
    assert shown.index("→ calculate") < shown.index("→ finish_task")
    quiet = invoke("run", "What is 2+2?", "--model", f"scripted:{script}")
    assert "Let me add them." not in quiet.stderr
    assert "→ calculate" not in quiet.stderr


def test_run_log_replays(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    assert invoke("run", "What is 2+2?", "--model", f"scripted:{script}").exit_code == 0
    [log] = default_logs(tmp_path)

    result = invoke("replay", str(log))

    assert result.exit_code == 0, result.output
    assert flat(result.stderr) == f"replay matches: {len(read_jsonl(log))} events reproduced"


def test_run_where_the_model_calls_finish_task_at_once(tmp_path: Path) -> None:
    script = write_script(
        tmp_path, [{"tool_calls": [{"name": "finish_task", "arguments": {"answer": "hello"}}]}]
    )

    result = invoke("run", "Say hello", "--model", f"scripted:{script}")

    assert result.exit_code == 0, result.output
    assert result.stdout == "hello\n"
    [log] = default_logs(tmp_path)
    ended = finished_event(read_jsonl(log))
    assert (ended.status, ended.steps, ended.tool_calls) == ("finished", 1, 0)


def test_run_reports_a_cost_no_model_reported_as_unknown(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)  # a script reports no cost

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}")

    assert result.exit_code == 0, result.output
    assert "0+0 tokens · cost unknown ·" in flat(result.stderr)
    assert "$0" not in result.stderr


def test_run_where_the_model_answers_in_text(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"text": "Hello there."}])

    result = invoke("run", "Say hello", "--model", f"scripted:{script}")

    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello there.\n"


def test_run_json_prints_the_outcome(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}", "--json")

    assert result.exit_code == 0, result.output
    data = cast(dict[str, object], json.loads(result.stdout))
    [log] = default_logs(tmp_path)
    assert data == {
        "run_id": log.stem,
        "status": "finished",
        "answer": "4",
        "steps": 2,
        "tool_calls": 1,
        "usage": {"input_tokens": 0, "output_tokens": 0, "requests": 2, "cost": None},
        "error": None,
        "limit": None,
        "denied": [],
        "unresolved_denials": [],
    }


def test_run_verbose_prints_every_event(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}", "-v")

    assert result.exit_code == 0, result.output
    [log] = default_logs(tmp_path)
    events = read_jsonl(log)
    stderr = flat(result.stderr)
    assert "0 run started agent=assistant" in stderr
    assert 'call calculate({"expression":"2+2"})' in stderr
    assert f"{events[-1].seq} run finished 2 steps, 1 tool calls" in stderr


def test_markup_in_a_runs_text_is_shown_as_it_is_and_never_ends_the_run(tmp_path: Path) -> None:
    # "[/INST]" is a token some models write; Rich read it as a closing tag, raised
    # MarkupError from -v's printing, and the finished run was stored as cancelled
    answer = "x = a[/] [/INST] [bold]b[/bold] [link=http://evil.example]c[/link]"
    steps: list[dict[str, object]] = [
        {
            "text": "[/INST]",
            "tool_calls": [{"name": "calculate", "arguments": {"expression": "2+2"}}],
        },
        {"tool_calls": [{"name": "finish_task", "arguments": {"answer": answer}}]},
    ]
    script = write_script(tmp_path, steps)

    ran = invoke("run", "print [bold]x[/bold] [/]", "--model", f"scripted:{script}", "-v")

    assert ran.exit_code == 0, ran.output
    [log] = default_logs(tmp_path)
    assert finished_event(read_jsonl(log)).status == "finished"
    assert "goal='print [bold]x[/bold] [/]'" in ran.stderr
    assert "says '[/INST]'" in ran.stderr
    shown = invoke("show", str(log))
    assert shown.exit_code == 0, shown.output
    assert answer in shown.stdout


def test_run_that_hits_max_steps_exits_1(tmp_path: Path) -> None:
    forever: list[dict[str, object]] = [
        {"tool_calls": [{"name": "calculate", "arguments": {"expression": f"{n}+1"}}]}
        for n in range(5)
    ]
    script = write_script(tmp_path, forever)

    result = invoke("run", "Count", "--model", f"scripted:{script}", "--max-steps", "1", "--json")

    assert result.exit_code == 1, result.output
    data = cast(dict[str, object], json.loads(result.stdout))
    assert data["status"] == "budget_exhausted"
    assert data["limit"] == "max_steps"
    assert data["steps"] == 1
    [log] = default_logs(tmp_path)
    events = read_jsonl(log)
    started = events[0]
    assert isinstance(started, RunStarted)
    assert started.limits.max_steps == 1
    [reached] = [e for e in events if isinstance(e, LimitReached)]
    assert (reached.limit, reached.used, reached.maximum) == ("max_steps", 1.0, 1.0)
    ended = finished_event(events)
    assert (ended.status, ended.limit) == ("budget_exhausted", "max_steps")


def test_run_that_hits_max_steps_reports_the_limit(tmp_path: Path) -> None:
    forever: list[dict[str, object]] = [
        {"tool_calls": [{"name": "calculate", "arguments": {"expression": "1+1"}}]}
    ] * 3
    script = write_script(tmp_path, forever)

    result = invoke("run", "Count", "--model", f"scripted:{script}", "--max-steps", "1")

    assert result.exit_code == 1, result.output
    assert "budget_exhausted (max_steps) · 1 steps · 1 tool calls" in flat(result.stderr)


def test_replay_of_a_run_with_overridden_max_steps_matches(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    run = invoke("run", "What is 2+2?", "--model", f"scripted:{script}", "--max-steps", "5")
    assert run.exit_code == 0, run.output
    [log] = default_logs(tmp_path)

    result = invoke("replay", str(log))

    assert result.exit_code == 0, result.output


def test_run_whose_model_fails_exits_1(tmp_path: Path) -> None:
    script = write_script(tmp_path, [{"error": "the model is down", "transient": False}])

    result = invoke("run", "Anything", "--model", f"scripted:{script}")

    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "failed: ModelError: the model is down" in flat(result.stderr)
    [log] = default_logs(tmp_path)
    assert finished_event(read_jsonl(log)).status == "failed"


def test_run_with_an_unknown_model_prefix_exits_2(tmp_path: Path) -> None:
    result = invoke("run", "Anything", "--model", "nosuchprovider:x")

    assert result.exit_code == 2
    assert result.stdout == ""
    assert flat(result.stderr).startswith(
        "error: no model provider for 'nosuchprovider:x'. Known prefixes: "
    )
    assert "scripted" in result.stderr
    assert default_logs(tmp_path) == []  # the run never started: no log


def test_run_with_a_missing_script_exits_2(tmp_path: Path) -> None:
    result = invoke("run", "Anything", "--model", f"scripted:{tmp_path / 'missing.json'}")

    assert result.exit_code == 2
    assert "error: cannot read the model script" in flat(result.stderr)
    assert default_logs(tmp_path) == []


def test_run_without_a_model_says_what_to_configure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tether.models.registry.local_model_available", lambda: False)
    result = invoke("run", "Anything")

    assert result.exit_code == 2
    assert result.stdout == ""
    message = flat(result.stderr)
    assert message.startswith("error: no model configured")
    assert "TETHER_MODEL" in message
    assert "pip install 'tether[local]'" in message
    assert default_logs(tmp_path) == []


def test_run_uses_tether_model_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    monkeypatch.setenv("TETHER_MODEL", f"scripted:{script}")

    result = invoke("run", "What is 2+2?")

    assert result.exit_code == 0, result.output
    assert result.stdout == "4\n"


def test_run_uses_tether_log_dir_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    monkeypatch.setenv("TETHER_LOG_DIR", str(tmp_path / "from_env"))

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}")

    assert result.exit_code == 0, result.output
    only_log(tmp_path / "from_env")
    assert default_logs(tmp_path) == []


def test_run_with_an_explicit_log_dir(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)

    result = invoke(
        "run", "What is 2+2?", "--model", f"scripted:{script}", "--log-dir", str(tmp_path / "mine")
    )

    assert result.exit_code == 0, result.output
    log = only_log(tmp_path / "mine")
    assert f"log: {log}" in result.stderr


def test_run_no_log_no_store_writes_nothing(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)

    result = invoke(
        "run", "What is 2+2?", "--model", f"scripted:{script}", "--no-log", "--no-store"
    )

    assert result.exit_code == 0, result.output
    assert result.stdout == "4\n"
    assert "log:" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["script.json"]


def test_run_no_log_still_stores_the_run(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}", "--no-log")

    assert result.exit_code == 0, result.output
    assert (tmp_path / ".tether" / "tether.db").exists()
    assert default_logs(tmp_path) == []


def test_run_with_an_unimportable_agent_exits_2() -> None:
    result = invoke("run", "Anything", "--agent", "no_such_package.module:agent")

    assert result.exit_code == 2
    assert "error: cannot import agent 'no_such_package.module:agent'" in flat(result.stderr)


def test_run_with_an_empty_goal_exits_2(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)

    result = invoke("run", "   ", "--model", f"scripted:{script}")

    assert result.exit_code == 2
    assert "error: the goal must be a non-empty string" in flat(result.stderr)


def test_run_with_a_policy_file_applies_its_rules(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    policy = tmp_path / "policy.toml"
    policy.write_text('[[deny]]\ntools = ["calculate"]\nreason = "no arithmetic today"\n')

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}", "--policy", str(policy))

    [log] = default_logs(tmp_path)
    decided = [e for e in read_jsonl(log) if isinstance(e, PolicyDecided) and e.tool == "calculate"]
    assert [(e.decision, e.rule, e.reason) for e in decided] == [
        ("deny", "deny:calculate", "no arithmetic today")
    ]
    assert result.exit_code == 3, result.output  # it finished without the denied call


def test_run_with_a_broken_policy_file_exits_2_naming_the_key(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    policy = tmp_path / "policy.toml"
    policy.write_text('[[deny]]\ntoolz = ["calculate"]\n')

    result = invoke("run", "What is 2+2?", "--model", f"scripted:{script}", "--policy", str(policy))

    assert result.exit_code == 2
    assert "toolz" in flat(result.stderr)
    assert default_logs(tmp_path) == []  # nothing ran
