"""The sandboxed shell tool: configuration, argv rules, isolation, limits and clean-up."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.corpora.shell import Outcome, call, gone, run_corpus, running
from tether.content import content_text
from tether.errors import ConfigError, ModelRetry
from tether.tools.base import Tool
from tether.tools.builtin import _cgroups, _sandbox, shell
from tether.tools.builtin._sandbox import (
    BwrapStatus,
    CgroupSupport,
    Sandbox,
    probe_bwrap,
    probe_cgroups,
    run_sandboxed,
)
from tether.tools.builtin.shell import CommandRule, ResourceLimits, shell_tool

BWRAP = probe_bwrap()
LIMITS = ResourceLimits(cpu_seconds=10, memory_bytes=1024**3, max_processes=64)
ISOLATIONS = [
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(BWRAP.path is None, reason=f"bwrap cannot run: {BWRAP.reason}"),
    ),
    "none",
]
needs_cgroup = pytest.mark.skipif(
    probe_cgroups().version is None, reason=f"no writable pids cgroup: {probe_cgroups().reason}"
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace inside ``tmp_path`` (whose other children are 'outside')."""
    path = tmp_path / "ws"
    path.mkdir()
    return path


def make(
    ws: Path, allow: Any, isolation: Literal["auto", "bwrap", "none"] = "auto", **kw: Any
) -> Tool:
    return shell_tool(ws, allow=allow, isolation=isolation, limits=LIMITS, **kw)


def text(out: Outcome) -> str:
    assert out.result is not None, out.describe()
    return content_text(out.result.content)


# -- the corpus ------------------------------------------------------------------------------


async def test_corpus_every_case_holds(tmp_path: Path) -> None:
    results = await run_corpus(tmp_path)
    failing = [f"{r.name}: {r.detail}" for r in results if not r.ok]
    assert failing == []
    assert sum(r.attack for r in results) >= 20
    assert sum(not r.attack for r in results) >= 8
    assert len({r.name for r in results}) == len(results)


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allow", "message"),
    [
        ([], "explicit allowlist"),
        ({}, "explicit allowlist"),
        ("ls", "not one string"),
        (["/bin/ls"], "bare name"),
        (["no-such-binary-xyz"], "not on"),
        ({"ls": CommandRule(allow_options="-l")}, "allow_options"),
        ({"ls": CommandRule(allow_options=["l"])}, "allow_options"),
        ({"ls": CommandRule(deny_args=["("])}, "deny_args"),
        ({"ls": CommandRule(deny_args=[r"(-\w)\1"])}, "no backreferences"),
        ({"ls": CommandRule(max_args=-1)}, "max_args"),
    ],
)
def test_bad_configuration_is_refused(ws: Path, allow: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make(ws, allow)


def test_bad_workspace_env_and_timeout_are_refused(ws: Path) -> None:
    with pytest.raises(ConfigError, match="not a directory"):
        make(ws / "missing", ["ls"])
    with pytest.raises(ConfigError, match="cannot be '/'"):
        make(Path("/"), ["ls"])
    with pytest.raises(ConfigError, match="PATH is fixed"):
        make(ws, ["ls"], env={"PATH": "/tmp"})
    with pytest.raises(ConfigError, match="invalid variable"):
        make(ws, ["ls"], env={"A=B": "x"})
    with pytest.raises(ConfigError, match="positive"):
        make(ws, ["ls"], timeout=0)


def test_bwrap_required_but_unavailable(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "probe_bwrap", lambda: BwrapStatus(path=None, reason="no userns"))
    with pytest.raises(ConfigError, match="no userns"):
        make(ws, ["ls"], isolation="bwrap")
    tool = make(ws, ["ls"], isolation="auto")  # falls back, and says it is open-world
    assert tool.annotations.open_world is True


def test_root_without_cgroup_fails_closed(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shell, "probe_cgroups", lambda: CgroupSupport(reason="read-only"))
    monkeypatch.setattr(shell.os, "geteuid", lambda: 0)
    with pytest.raises(ConfigError, match="fork bomb"):
        make(ws, ["ls"], isolation="none")
    unbounded = ResourceLimits(max_processes=None)
    assert shell_tool(ws, allow=["ls"], isolation="none", limits=unbounded).name == "run_command"


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_annotations_are_honest(ws: Path, isolation: Literal["bwrap", "none"]) -> None:
    hints = make(ws, ["ls"], isolation=isolation).annotations
    assert (hints.read_only, hints.destructive, hints.idempotent) == (False, True, False)
    assert hints.open_world is (isolation == "none")


# -- argv rules ------------------------------------------------------------------------------


_ARG = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=30
).filter(lambda s: not s.startswith("-"))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(args=st.lists(_ARG, max_size=5))
async def test_arguments_arrive_verbatim(ws: Path, args: list[str]) -> None:
    tool = make(ws, ["printf"], isolation="none")
    out = await call(tool, ["printf", "%s\\0", *args])
    assert out.data.get("exit_code") == 0, out.describe()
    received = out.stdout.split("\0")[:-1] if args else []
    assert received == args


@given(
    option=st.text(min_size=1, max_size=20).map(lambda s: "-" + s),
    before=st.lists(st.text(max_size=5).filter(lambda s: not s.startswith("-")), max_size=3),
)
def test_any_dash_argument_is_refused_without_options(option: str, before: list[str]) -> None:
    rule = shell._Rule(  # pyright: ignore[reportPrivateUsage]
        name="find",
        path="/usr/bin/find",
        any_option=False,
        options=frozenset({"-name"}),
        max_args=None,
        deny=(),
    )
    if option == "-name":
        rule.check([*before, option])
        return
    with pytest.raises(ModelRetry, match="not allowed"):
        rule.check([*before, option])


async def test_option_rules(ws: Path) -> None:
    tool = make(
        ws,
        {
            "head": CommandRule(allow_options=["-n", "--lines"], max_args=3),
            "echo": CommandRule(deny_args=[r"secret", r"^(a|aa)+b$"]),  # RE2: linear time
        },
    )
    (ws / "f").write_text("1\n2\n3\n")
    assert (await call(tool, ["head", "-n", "1", "f"])).stdout == "1\n"
    assert (await call(tool, ["head", "--lines=2", "f"])).stdout == "1\n2\n"
    # on Python's re the second pattern backtracks for ages on 40 a's; on RE2 it is instant
    assert (await call(tool, ["echo", "a" * 40])).stdout == "a" * 40 + "\n"
    refused = [
        ["head", "-n1", "f"],  # only the exact option, not glued values
        ["head", "--lines-x=1", "f"],
        ["head", "-c", "1", "f"],
        ["head", "-n", "1", "f", "f"],  # max_args
        ["echo", "my-secret-value"],
        ["cat", "f"],
        ["", "f"],
        ["echo", "\ud800"],
    ]
    for argv in refused:
        assert (await call(tool, argv)).refused is not None, argv


async def test_path_in_the_workspace_cannot_shadow_a_binary(ws: Path) -> None:
    marker = ws / "shadowed"
    fake = ws / "echo"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\n")
    fake.chmod(0o755)
    tool = make(ws, {"echo": CommandRule(), "sh": CommandRule(allow_options=["-c"])})
    assert (await call(tool, ["echo", "hi"])).stdout == "hi\n"
    out = await call(tool, ["sh", "-c", "echo $PATH; echo hi"])
    assert out.stdout == f"{_sandbox.SAFE_PATH}\nhi\n"
    assert not marker.exists()


# -- the working directory -------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_cwd_through_a_symlink_out_of_the_workspace_is_refused(
    tmp_path: Path, ws: Path, isolation: Literal["bwrap", "none"]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "sub").mkdir()
    (ws / "out").symlink_to(outside)
    (ws / "sub" / "up").symlink_to("../../outside")
    (ws / "alias").symlink_to(ws / "sub")  # a link that stays inside is followed
    tool = make(ws, {"pwd": CommandRule(allow_options=["-P"]), "touch": CommandRule()}, isolation)
    for cwd in ["out", "sub/up", "out/.", "alias/up"]:
        out = await call(tool, ["touch", "ran"], cwd=cwd)
        assert out.refused is not None, (cwd, out.describe())
    assert list(outside.iterdir()) == []
    assert (await call(tool, ["pwd", "-P"], cwd="alias")).stdout == f"{ws / 'sub'}\n"


def _exchange(a: Path, b: Path) -> None:
    """Swap two names in one step (``renameat2(RENAME_EXCHANGE)``), or fail with ``OSError``."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


async def test_cwd_swapped_for_a_symlink_never_runs_outside(tmp_path: Path, ws: Path) -> None:
    """A directory and a link out of the workspace trade places while commands start in it.

    Without bwrap the command starts in the directory the confinement walk opened (by its
    descriptor), so wherever the name points a moment later, it runs inside the workspace.
    """
    outside = tmp_path / "outside"
    outside.mkdir()
    sub, link = ws / "sub", ws / "link"
    sub.mkdir()
    link.symlink_to(outside)
    try:
        _exchange(sub, link)
        _exchange(sub, link)
        atomic = True
    except (OSError, AttributeError):  # no renameat2 here: the name is missing at moments
        atomic = False
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                if atomic:
                    _exchange(sub, link)
                else:
                    os.rename(sub, ws / "real")
                    os.symlink(outside, sub)
                    os.unlink(sub)
                    os.rename(ws / "real", sub)

    tool = make(ws, {"pwd": CommandRule(allow_options=["-P"])}, isolation="none")
    swapper = threading.Thread(target=swap)
    swapper.start()
    ran: list[str] = []
    rounds, give_up = 0, time.monotonic() + 60
    try:
        # ten rounds at least, and on until some commands ran: on a busy machine the swapper
        # can win every walk of a round (each then refused), which exercises nothing
        while rounds < 10 or (len(ran) < 10 and time.monotonic() < give_up):
            rounds += 1
            outs = await asyncio.gather(*(call(tool, ["pwd", "-P"], cwd="sub") for _ in range(8)))
            for out in outs:
                if out.refused is None:
                    assert out.data["exit_code"] == 0, out.describe()
                    ran.append(out.stdout.strip())
    finally:
        stop.set()
        swapper.join()
    outside_runs = [p for p in ran if not Path(p).is_relative_to(ws)]
    assert outside_runs == []
    assert ran, "no command ran: the race was never exercised"


# -- results ---------------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_results_exit_codes_and_streams(
    ws: Path, isolation: Literal["bwrap", "none"]
) -> None:
    tool = make(ws, {"sh": CommandRule(allow_options=["-c"]), "cat": CommandRule()}, isolation)
    out = await call(tool, ["sh", "-c", "echo out; echo err >&2; printf '\\377'; exit 3"])
    assert out.result is not None
    assert not out.result.is_error
    assert out.data["exit_code"] == 3
    assert out.stdout == "out\n\ufffd"
    assert out.data["stderr"] == "err\n"
    assert out.data["isolation"] == isolation
    assert out.data["cgroup"] == probe_cgroups().version
    assert (await call(tool, ["cat"], stdin="über")).stdout == "über"


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_environment_is_scrubbed(
    ws: Path, isolation: Literal["bwrap", "none"], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-must-not-leak")
    tool = make(ws, ["env"], isolation, env={"GREETING": "hi there"})
    lines = set((await call(tool, ["env"])).stdout.splitlines())
    assert "sk-test-must-not-leak" not in "".join(lines)
    assert {
        f"PATH={_sandbox.SAFE_PATH}",
        f"HOME={ws}",
        "LANG=C.UTF-8",
        "GREETING=hi there",
    } <= lines
    names = {line.split("=", 1)[0] for line in lines}
    assert names <= {"PATH", "HOME", "LANG", "TMPDIR", "GREETING", "PWD"}


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_rlimits_are_applied(ws: Path, isolation: Literal["bwrap", "none"]) -> None:
    limits = ResourceLimits(
        cpu_seconds=7, memory_bytes=512 * 1024**2, max_file_bytes=1024**2, max_open_files=99
    )
    tool = shell_tool(ws, allow={"sh": CommandRule(allow_options=["-c"])}, isolation=isolation,
                      limits=limits)  # fmt: skip
    out = await call(tool, ["sh", "-c", "ulimit -t; ulimit -v; ulimit -f; ulimit -n"])
    assert out.stdout.split() == ["7", str(512 * 1024), str(1024**2 // 512), "99"]


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_timeout_kills_and_reports(ws: Path, isolation: Literal["bwrap", "none"]) -> None:
    # 2 s: time to start the sandbox and print "started" even on a busy machine
    tool = make(ws, {"sh": CommandRule(allow_options=["-c"])}, isolation, timeout=2.0)
    seconds = f"1000.{secrets.randbelow(10**6):06d}"
    out = await call(tool, ["sh", "-c", f"echo started; sleep {seconds} & wait"])
    assert out.result is not None
    assert out.result.is_error
    assert "did not finish within 2s and was killed" in text(out)
    assert out.data["timed_out"] is True
    assert out.stdout == "started\n"
    assert out.seconds < 30  # killed at the timeout, not after the sleep's 1000 s
    assert await gone(f"sleep\0{seconds}") == []


@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_output_cap_per_stream(ws: Path, isolation: Literal["bwrap", "none"]) -> None:
    tool = make(ws, {"sh": CommandRule(allow_options=["-c"])}, isolation, max_output_bytes=1000)
    out = await call(tool, ["sh", "-c", "echo small; head -c 5000 /dev/zero >&2; sleep 300"])
    assert out.data["stderr_truncated"] is True
    assert out.data["stdout_truncated"] is False
    assert len(out.data["stderr"]) == 1000
    assert out.stdout == "small\n"
    assert out.data["timed_out"] is False  # killed at the cap, not at the timeout (30 s) ...
    assert out.seconds < 25  # ... nor after the sleep


async def test_cancellation_kills_the_command(ws: Path) -> None:
    tool = make(ws, {"sh": CommandRule(allow_options=["-c"])}, timeout=30)
    seconds = f"1000.{secrets.randbelow(10**6):06d}"
    task = asyncio.ensure_future(call(tool, ["sh", "-c", f"sleep {seconds} & wait"]))
    assert await running(f"sleep\0{seconds}") != []  # the detector sees it while it runs
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(f"sleep\0{seconds}") == []


# -- the sandbox directly ------------------------------------------------------------------


def _sandbox_for(
    ws: Path,
    cgroups: CgroupSupport,
    isolation: Literal["bwrap", "none"] = "none",
    limits: ResourceLimits = LIMITS,
) -> Sandbox:
    return Sandbox(
        isolation=isolation,
        bwrap=BWRAP.path,
        limits=limits,
        env={"PATH": _sandbox.SAFE_PATH, "HOME": str(ws)},
        workspace=str(ws),
        cgroups=cgroups,
    )


async def test_process_group_kill_without_cgroup(ws: Path) -> None:
    seconds = f"1000.{secrets.randbelow(10**6):06d}"
    done = await run_sandboxed(
        _sandbox_for(ws, CgroupSupport()),
        ["/bin/sh", "-c", f"sleep {seconds} & echo $$"],
        cwd=str(ws),
        stdin=None,
        timeout=30,  # sh ends at once; only the sleep it leaves behind would run on
        max_output_bytes=1000,
    )
    assert done.exit_code == 0
    assert done.cgroup is None
    assert await gone(f"sleep\0{seconds}") == []  # left behind by sh, killed with its group


@needs_cgroup
@pytest.mark.parametrize("isolation", ISOLATIONS)
async def test_cgroup_bounds_processes_even_for_root(
    ws: Path, isolation: Literal["bwrap", "none"]
) -> None:
    # sh ends once it has tried every fork; the sleeps it started are killed with it
    script = "for i in $(seq 60); do sleep 1000 & done"
    sandbox = _sandbox_for(ws, probe_cgroups(), isolation, ResourceLimits(max_processes=20))
    done = await run_sandboxed(
        sandbox,
        ["/bin/sh", "-c", script],
        cwd=str(ws),
        stdin=None,
        timeout=30,
        max_output_bytes=10_000,
    )
    assert not done.timed_out
    assert done.peak_processes is not None
    assert done.peak_processes <= 20
    assert b"fork" in done.stderr.lower()
    parent = probe_cgroups().pids_parent or "/"
    assert not [d for d in os.listdir(parent) if d.startswith(f"tether-{os.getpid()}-")]


@needs_cgroup
async def test_setup_failure_fails_closed(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        _cgroups.CommandCgroups,
        "procs_files",
        property(lambda self: ["/proc/no-such-dir/cgroup.procs"]),
    )
    marker = ws / "ran"
    tool = make(ws, ["touch"], isolation="none")
    out = await call(tool, ["touch", str(marker)])
    assert out.result is not None
    assert out.result.is_error
    assert "sandbox setup failed" in text(out)
    assert out.data["exit_code"] is None
    assert not marker.exists()


_HOLD = """
import sys, time
from pathlib import Path

i = sys.argv[1]
x = b"x" * 120_000_000
Path(f"ready-{i}").touch()
deadline = time.monotonic() + 30
while time.monotonic() < deadline:  # until all three hold theirs at once, or are dead
    if len({p.name[-1] for p in [*Path().glob("ready-*"), *Path().glob("dead-*")]}) == 3:
        Path(f"m{i}").touch()
        break
    time.sleep(0.02)
"""


@pytest.mark.skipif(
    probe_cgroups().memory_parent is None, reason=f"no memory cgroup: {probe_cgroups().reason}"
)
async def test_memory_cgroup_bounds_the_total(ws: Path) -> None:
    """Three processes each under RLIMIT_AS, together over the cgroup's limit.

    Each holds its 120 MB until all three hold theirs (or died): a process that wrote its
    ``m`` file did so while the others held theirs too, so three ``m`` files mean 360 MB
    were in the cgroup at once.
    """
    limits = ResourceLimits(memory_bytes=256 * 1024**2, max_processes=64)
    tool = shell_tool(ws, allow={"sh": CommandRule(allow_options=["-c"])}, limits=limits,
                      isolation="none", timeout=60)  # fmt: skip
    (ws / "hold.py").write_text(_HOLD)
    script = "for i in 1 2 3; do (python3 hold.py $i || touch dead-$i) & done; wait"
    out = await call(tool, ["sh", "-c", script])
    assert out.data["exit_code"] == 0, out.describe()
    assert not out.data["timed_out"], out.describe()
    made = sorted(p.name for p in ws.glob("m*"))
    assert len(made) < 3, made


# -- honesty about what "none" does not stop -------------------------------------------------


async def test_without_bwrap_writes_outside_are_not_prevented(tmp_path: Path, ws: Path) -> None:
    """Documented limitation; also proves the corpus's marker check can see an escape."""
    marker = tmp_path / "outside-marker"
    tool = make(ws, ["touch"], isolation="none")
    await call(tool, ["touch", str(marker)])
    assert marker.exists()


async def test_a_command_line_too_long_to_pass_says_so_before_it_runs(ws: Path) -> None:
    # each argument within its own limit, together over what one exec argument may hold:
    # "sandbox setup failed: Argument list too long" after the call was let through
    tool = make(ws, ["printf"], isolation="none")
    out = await call(tool, ["printf", "%s", "é" * 25_000])
    assert "the arguments together are longer than 120000 bytes" in out.describe()
    fits = await call(tool, ["printf", "%s", "é" * 10_000])
    assert fits.data.get("exit_code") == 0, fits.describe()


@pytest.mark.skipif(BWRAP.path is None, reason=f"bwrap cannot run: {BWRAP.reason}")
async def test_a_command_line_with_its_environment_too_long_to_pass_says_so(ws: Path) -> None:
    # under bwrap the environment travels in the same exec argument (--setenv); the two
    # together are over 131,072 bytes whatever the sandbox's own settings add (their size
    # depends on the machine: its paths and cgroup files)
    roomy = make(ws, ["printf"], isolation="bwrap", env={"BIG": "v" * 65_000})
    over = await call(roomy, ["printf", "%s", "x" * 70_000])
    assert over.result is not None
    assert "over the 131072 one exec argument may hold" in content_text(over.result.content)
