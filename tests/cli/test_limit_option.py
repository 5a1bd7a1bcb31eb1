"""``tether run --limit NAME=VALUE``: the run's limits and its phases' own, from the shell."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_cli import (  # _isolated: every command in tmp_path, nothing from the env
    CALCULATE_THEN_FINISH,
    _isolated,  # pyright: ignore[reportPrivateUsage, reportUnusedImport]  # noqa: F401
    default_logs,
    flat,
    invoke,
    write_script,
)
from tether.cli.limitoptions import with_limits
from tether.codec import read_jsonl
from tether.errors import ConfigError
from tether.events import RunStarted
from tether.limits import Limits, PhaseLimits


def test_limits_and_phase_limits_are_set_by_name() -> None:
    limits = with_limits(
        Limits(),
        [
            "max_seconds=120",
            "max_cost=none",
            "max_steps=7",
            "think.timeout=30",
            "reflect.max_steps=2",
            "reflect.max_seconds=9.5",
        ],
    )
    assert limits == Limits(
        max_seconds=120.0,
        max_cost=None,
        max_steps=7,
        think=PhaseLimits(timeout=30.0),
        reflect=PhaseLimits(max_steps=2, max_seconds=9.5),
    )


def test_a_phase_with_nothing_left_set_has_no_limits_of_its_own() -> None:
    assert with_limits(Limits(), ["think.timeout=none"]).think is None
    assert with_limits(Limits(), ["think.timeout=none"]) == Limits()
    limits = with_limits(Limits(), ["think.timeout=30", "think.timeout=none"])
    assert limits.think is None
    assert with_limits(Limits(), ["reflect.max_steps=2", "reflect.timeout=none"]).reflect == (
        PhaseLimits(max_steps=2)
    )


@pytest.mark.parametrize(
    ("option", "says"),
    [
        ("max_seconds", "write NAME=VALUE"),
        ("=3", "write NAME=VALUE"),
        ("max_secs=3", "no such limit; the run's are max_steps, max_tool_calls"),
        ("act.timeout=3", "'act' is not a phase with limits of its own"),
        ("think.retries=3", "a phase's limits are max_steps, timeout, max_seconds"),
        ("max_steps=2.5", "'2.5' is not a whole number"),
        ("think.timeout=soon", "'soon' is not a number"),
        ("max_steps=none", "this limit cannot be none"),
        ("max_seconds=-1", "Limits.max_seconds must be a finite number >= 0"),
        ("think.max_steps=-1", "PhaseLimits.max_steps must be an int from 0 to 2**63 - 1"),
    ],
)
def test_a_bad_limit_option_is_a_config_error_that_says_what_to_write(
    option: str, says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        with_limits(Limits(), [option])
    assert says in str(raised.value)


def test_run_records_the_limits_it_was_given(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    result = invoke(
        "run",
        "What is 2+2?",
        "--model",
        f"scripted:{script}",
        "--limit",
        "max_seconds=60",
        "--limit",
        "think.max_steps=5",
    )
    assert result.exit_code == 0, result.output
    [log] = default_logs(tmp_path)
    started = read_jsonl(log)[0]
    assert isinstance(started, RunStarted)
    assert started.limits.max_seconds == 60.0
    assert started.limits.think == PhaseLimits(max_steps=5)


def test_run_with_a_bad_limit_is_one_line_and_exit_2(tmp_path: Path) -> None:
    script = write_script(tmp_path, CALCULATE_THEN_FINISH)
    result = invoke("run", "hi", "--model", f"scripted:{script}", "--limit", "think.timeout=soon")
    assert result.exit_code == 2
    assert flat(result.stderr).startswith("error: --limit 'think.timeout=soon': 'soon' is not a")
    assert "Traceback" not in result.output
    assert default_logs(tmp_path) == []
