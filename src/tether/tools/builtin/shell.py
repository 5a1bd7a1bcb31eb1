"""``run_command``: an allowlisted program run in a sandbox. Off unless you build it.

Nothing registers this tool by default: ``shell_tool(workspace, allow=[...])`` builds it, and
only the binaries named in ``allow`` can run. A call gives ``argv`` (a list, never a shell
string: ``;``, ``|``, ``$(...)``, backticks and redirects reach the program as literal text).
``argv[0]`` is a bare name from the allowlist, resolved once, at configuration, to an absolute
path on ``/usr/local/bin:/usr/bin:/bin``. Per binary, a ``CommandRule`` refuses arguments that
start with ``-`` (option injection such as ``find . -exec`` or ``git --upload-pack``) unless
they are allowed, and can cap or deny arguments. The environment is built from scratch:
``PATH``, ``HOME`` (the workspace), ``LANG``, ``TMPDIR`` and what you pass in ``env``; nothing
of the host's (API keys) is inherited.

What holds in every mode:

- rlimits (CPU, address space, file size, open files; ``RLIMIT_NPROC`` too, which the kernel
  ignores for root and counts across all the user's processes otherwise), set by a trampoline
  process, never a ``preexec_fn``;
- a wall-clock timeout and an output cap (per stream) after which the command is killed;
- when the command ends, for whatever reason, its process group gets ``SIGKILL``, and so does
  everything in its cgroup when there is one (a writable ``pids`` controller: v1, or v2 with
  ``pids`` delegated). The cgroup's ``pids.max`` bounds forks also for root, and ``memory``
  bounds its total memory when that controller is writable. As root with a process limit and
  no usable cgroup, ``shell_tool`` refuses to build (nothing would bound a fork bomb).

With bwrap (``isolation="bwrap"``, or ``"auto"`` when it works here): the whole filesystem is
mounted read-only except the workspace and a private ``/tmp``; new user, pid, network, IPC,
UTS and cgroup namespaces (no network at all, the host's processes are invisible); all
capabilities dropped, also when tether runs as root; a new session (no terminal injection).
Files outside the workspace stay *readable* (read-only is not hidden): keep secrets out of a
world-readable filesystem, or out of the host.

Without bwrap (``isolation="none"``, or ``"auto"`` where namespaces cannot be created): only
the rules above. The command runs as the host's user with its filesystem and network access;
it can write anywhere that user can, read ``/proc/<pid>/environ`` of the host's processes,
and a process that leaves the process group with ``setsid`` escapes the kill unless a
cgroup holds it. Allowlist only programs you would let the model run as that user.

As root: inside bwrap the command is uid 0 with every capability dropped, so it cannot
remount the read-only filesystem or leave its namespaces; ``RLIMIT_NPROC`` does nothing
(the kernel exempts uid 0), so only the cgroup's ``pids.max`` bounds processes, hence the
refusal above. As another user: bwrap needs unprivileged user namespaces (some distributions
restrict them; ``"auto"`` then falls back and says why in each result's ``isolation_note``);
``RLIMIT_NPROC`` works but counts all of that user's processes, so set it above their usual
count; cgroups are used only where one is delegated to the user.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tether._internal.frozen import frozen
from tether._internal.linearregex import LinearPattern, compile_linear
from tether.content import ToolResult
from tether.errors import ConfigError, ModelRetry
from tether.tools.base import Tool, ToolAnnotations, ToolContext
from tether.tools.builtin._confine import Root, fd_path, is_beneath, open_beneath
from tether.tools.builtin._mark import builtin
from tether.tools.builtin._sandbox import (
    SAFE_PATH,
    CgroupSupport,
    Completed,
    ResourceLimits,
    Sandbox,
    probe_bwrap,
    probe_cgroups,
    run_sandboxed,
)

__all__ = ["CommandRule", "ResourceLimits", "shell_tool"]

MAX_STDIN_BYTES = 1_000_000
"""The most ``stdin`` text a call may send."""

_MAX_ARGV = 1000
_MAX_ARG_CHARS = 100_000
_MAX_ARGV_BYTES = 120_000
"""The command line, all its arguments encoded together, at most: it reaches the sandbox as
one argument, which Linux caps at 128 KiB (MAX_ARG_STRLEN)."""


@frozen
class CommandRule:
    """What arguments one allowlisted binary accepts.

    Only arguments starting with ``-`` are treated as options: programs with other option
    syntaxes (``tar cf``, ``dd if=``, ``find``'s ``!``, ``+`` options) need ``deny_args``.
    """

    allow_options: bool | Sequence[str] = False
    """``False``: any argument starting with ``-`` is refused; ``True``: any is allowed; a
    sequence: only those, exactly, or as ``--long=value`` for a listed ``--long``."""
    max_args: int | None = None
    """The most arguments after the binary's name."""
    deny_args: Sequence[str] = ()
    """Regular expressions (RE2: linear time; no backreferences or lookaround); an argument
    any of them matches (a search) is refused."""


@dataclass(frozen=True)
class _Rule:
    name: str
    path: str
    any_option: bool
    options: frozenset[str]
    max_args: int | None
    deny: tuple[LinearPattern, ...]

    def check(self, args: Sequence[str]) -> None:
        if self.max_args is not None and len(args) > self.max_args:
            raise ModelRetry(
                f"{self.name!r} takes at most {self.max_args} arguments, got {len(args)}"
            )
        for arg in args:
            if arg.startswith("-") and not self.any_option and not self._option_ok(arg):
                allowed = ", ".join(sorted(self.options)) or "none"
                raise ModelRetry(
                    f"option {arg!r} is not allowed for {self.name!r} (allowed options: "
                    f"{allowed}); to pass a file name starting with '-', write './{arg}'"
                )
            for pattern in self.deny:
                if pattern.search(arg):
                    raise ModelRetry(
                        f"argument {arg!r} is not allowed for {self.name!r} (it matches the "
                        f"denied pattern {pattern.pattern!r}); use a different argument"
                    )

    def _option_ok(self, arg: str) -> bool:
        if arg in self.options:
            return True
        head, eq, _ = arg.partition("=")
        return bool(eq) and head.startswith("--") and head in self.options


def _compile_rules(
    allow: Mapping[str, CommandRule] | Sequence[str], workspace: str
) -> dict[str, _Rule]:
    if isinstance(allow, str):
        raise ConfigError("allow must be a list of binary names or a mapping, not one string")
    rules = dict(allow) if isinstance(allow, Mapping) else {name: CommandRule() for name in allow}
    if not rules:
        raise ConfigError(
            "shell_tool needs an explicit allowlist: allow=['ls', 'cat', ...] (empty refused)"
        )
    compiled: dict[str, _Rule] = {}
    for name, rule in rules.items():
        if not name or "/" in name or name in (".", "..") or "\0" in name:
            raise ConfigError(f"allowlisted command {name!r} must be a bare name, without '/'")
        found = shutil.which(name, path=SAFE_PATH)
        if found is None:
            raise ConfigError(f"allowlisted command {name!r} is not on {SAFE_PATH}")
        path = os.path.abspath(found)
        if Path(os.path.realpath(path)).is_relative_to(workspace):
            raise ConfigError(f"{name!r} resolves into the workspace, where commands can write")
        compiled[name] = _Rule(
            name=name,
            path=path,
            any_option=rule.allow_options is True,
            options=_options(name, rule.allow_options),
            max_args=_max_args(name, rule.max_args),
            deny=_patterns(name, rule.deny_args),
        )
    return compiled


def _options(name: str, allow_options: bool | Sequence[str]) -> frozenset[str]:
    if isinstance(allow_options, bool):
        return frozenset()
    if isinstance(allow_options, str) or not all(
        o.startswith("-") and o != "-" for o in allow_options
    ):
        raise ConfigError(f"{name!r}: allow_options must be a bool or a list like ['-n', '--all']")
    return frozenset(allow_options)


def _max_args(name: str, value: int | None) -> int | None:
    if value is not None and value < 0:
        raise ConfigError(f"{name!r}: max_args must be >= 0")
    return value


def _patterns(name: str, deny: Sequence[str]) -> tuple[LinearPattern, ...]:
    """The ``deny_args`` patterns, on RE2: the model writes the arguments they search."""
    if isinstance(deny, str):
        raise ConfigError(f"{name!r}: deny_args must be a list of patterns, not one string")
    try:
        return tuple(compile_linear(p) for p in deny)
    except ValueError as exc:
        raise ConfigError(f"{name!r}: invalid deny_args pattern: {exc}") from None


def _environment(workspace: str, env: Mapping[str, str] | None, tmpdir: str) -> dict[str, str]:
    base = {"PATH": SAFE_PATH, "HOME": workspace, "LANG": "C.UTF-8", "TMPDIR": tmpdir}
    for key, value in (env or {}).items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ConfigError(f"env: invalid variable {key!r}")
        if key == "PATH":
            raise ConfigError(f"env: PATH is fixed to {SAFE_PATH} (binaries resolve from it)")
        base[key] = value
    return base


def _choose_isolation(
    isolation: Literal["auto", "bwrap", "none"],
) -> tuple[Literal["bwrap", "none"], str | None, str]:
    """The isolation to use, the bwrap binary, and why bwrap is not used (if not)."""
    if isolation == "none":
        return "none", None, "isolation='none' was requested"
    status = probe_bwrap()
    if status.path is not None:
        return "bwrap", status.path, ""
    if isolation == "bwrap":
        raise ConfigError(f"isolation='bwrap' is unavailable: {status.reason}")
    return "none", None, status.reason


def _check_process_limit(limits: ResourceLimits, cgroups: CgroupSupport) -> None:
    if limits.max_processes is not None and os.geteuid() == 0 and cgroups.version is None:
        raise ConfigError(
            "running as root, RLIMIT_NPROC is ignored by the kernel and no writable cgroup "
            f"pids controller was found ({cgroups.reason}), so max_processes cannot be "
            "enforced and a fork bomb would not be bounded. Run as another user, give tether a "
            "writable pids cgroup, or pass ResourceLimits(max_processes=None) to accept that."
        )


def _check_argv(argv: list[str]) -> None:
    """Refuse a command line that cannot be passed as it is (``ModelRetry`` says why)."""
    if not all(_plain(a) for a in argv):
        raise ModelRetry(
            f"arguments must be valid text without NUL, at most {_MAX_ARG_CHARS} characters"
        )
    if len(json.dumps(argv)) > _MAX_ARGV_BYTES:  # as the sandbox is handed it
        raise ModelRetry(
            f"the arguments together are longer than {_MAX_ARGV_BYTES} bytes: pass large "
            "text through stdin, or write it to a file in the workspace first"
        )


def _plain(arg: str) -> bool:
    if "\0" in arg or len(arg) > _MAX_ARG_CHARS:
        return False
    try:
        arg.encode()
    except UnicodeEncodeError:  # lone surrogates cannot be passed to exec
        return False
    return True


def _open_cwd(root: Root, cwd: str | None) -> tuple[int, str]:
    """The command's directory, opened by the confinement walk, and its path now.

    The walk opens one component at a time beneath the workspace and refuses a link out of
    it, so the descriptor stays on the directory it found there, whatever the name points to
    a moment later; without bwrap the command starts in it by descriptor. The path is what
    the kernel says the descriptor is, checked again here, for bwrap's ``--chdir``.
    """
    if cwd and ("\0" in cwd or os.path.isabs(cwd)):
        raise ModelRetry(f"cwd {cwd!r} must be a path relative to the workspace, e.g. 'src'")
    try:
        fd = open_beneath(root, cwd or "", kind="directory", follow_symlinks=True)
    except ModelRetry as exc:
        raise ModelRetry(f"cwd {cwd!r} cannot be used: {exc.message}") from None
    path = fd_path(fd)
    if path is None:  # no /proc: only the workspace itself has a path known for sure
        st = os.fstat(fd)
        path = root.path if (st.st_dev, st.st_ino) == (root.dev, root.ino) else None
    if path is None or not is_beneath(path, root.path):
        os.close(fd)
        raise ModelRetry(
            f"cwd {cwd!r} leaves the workspace (directly or through a symlink), or where it "
            "leads cannot be told; use a directory inside it"
        )
    return fd, path


def shell_tool(
    workspace: str | Path,
    *,
    allow: Mapping[str, CommandRule] | Sequence[str],
    timeout: float = 30.0,
    max_output_bytes: int = 100_000,
    limits: ResourceLimits = ResourceLimits(),
    isolation: Literal["auto", "bwrap", "none"] = "auto",
    env: Mapping[str, str] | None = None,
) -> Tool:
    """Build ``run_command``, which runs allowlisted programs in ``workspace``.

    Args:
        workspace: The directory commands run in (and, under bwrap, the only writable one).
        allow: The binaries the model may run: names, or names mapped to ``CommandRule``.
        timeout: Wall-clock seconds per command; then it is killed, with its children.
        max_output_bytes: Bytes kept of stdout and of stderr each; past it, the command is
            killed and the output marked truncated.
        limits: Resource limits per command.
        isolation: ``"bwrap"`` requires bwrap, ``"none"`` skips it, ``"auto"`` uses it when it
            works here.
        env: Extra environment variables (nothing is inherited from the host).

    Raises:
        ConfigError: an empty allowlist, an unknown binary, a missing bwrap under
            ``isolation="bwrap"``, or a process limit that cannot be enforced.
    """
    ws = os.path.realpath(workspace)
    if not os.path.isdir(ws):
        raise ConfigError(f"workspace {str(workspace)!r} is not a directory")
    if ws == "/":
        raise ConfigError("the workspace cannot be '/': it is the one writable directory")
    if timeout <= 0 or max_output_bytes <= 0:
        raise ConfigError("timeout and max_output_bytes must be positive")
    rules = _compile_rules(allow, ws)
    root = Root.at(ws)
    level, bwrap, why_not = _choose_isolation(isolation)
    cgroups = probe_cgroups()
    _check_process_limit(limits, cgroups)
    _environment(ws, env, "/tmp")  # validate now, not at the first call
    names = ", ".join(sorted(rules))

    async def handler(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        argv: list[str] = list(arguments["argv"])
        if not argv:
            raise ModelRetry("argv is empty: give the program's name, then its arguments")
        _check_argv(argv)
        name = argv[0]
        if "/" in name:
            raise ModelRetry(
                f"argv[0] must be a bare command name, not a path ({name!r}); allowed: {names}"
            )
        rule = rules.get(name)
        if rule is None:
            raise ModelRetry(f"command {name!r} is not allowed; allowed: {names}")
        rule.check(argv[1:])
        cwd_fd, cwd = _open_cwd(root, arguments.get("cwd"))
        tmp: str | None = None
        try:
            stdin_text: str | None = arguments.get("stdin")
            stdin = stdin_text.encode() if stdin_text is not None else None
            if stdin is not None and len(stdin) > MAX_STDIN_BYTES:
                raise ModelRetry(
                    f"stdin is over {MAX_STDIN_BYTES} bytes; write it to a file instead"
                )
            if level == "none":
                tmp = tempfile.mkdtemp(prefix="tether-shell-")
            sandbox = Sandbox(
                isolation=level,
                bwrap=bwrap,
                limits=limits,
                env=_environment(ws, env, tmp or "/tmp"),
                workspace=ws,
                cgroups=cgroups,
            )
            # Under bwrap the command starts in ``cwd`` by path, so a component swapped for a
            # link between _open_cwd's check and bwrap's chdir still moves it. What holds: the
            # link is followed inside the sandbox, where all but the workspace is read-only
            # and /tmp is private, so the command only starts somewhere it could ``cd`` to by
            # itself, never with more write access than it had.
            done = await run_sandboxed(
                sandbox,
                [rule.path, *argv[1:]],
                cwd=cwd,
                cwd_fd=cwd_fd,
                stdin=stdin,
                timeout=timeout,
                max_output_bytes=max_output_bytes,
            )
        finally:
            os.close(cwd_fd)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        return _result(done, timeout, why_not)

    command = Tool.from_schema(
        name="run_command",
        title="Run a command",
        description=(
            f"Run one program (no shell) in the workspace and return its exit code and output. "
            f"Allowed programs: {names}. argv is a list: the program's name, then each "
            "argument as its own element; ';', '|', '>', '$(...)' and quotes are not "
            "interpreted. A non-zero exit code is a normal result."
        ),
        input_schema=_schema(),
        handler=handler,
        annotations=ToolAnnotations(
            read_only=False, destructive=True, idempotent=False, open_world=level != "bwrap"
        ),
        timeout=timeout + 10.0,  # our own timeout fires first and cleans up
    )
    return builtin(command, untrusted_output=True)  # a command can print any file's text


def _schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "argv": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "maxItems": _MAX_ARGV,
                "description": "The program's name, then its arguments, e.g. ['ls', 'src'].",
            },
            "cwd": {
                "type": "string",
                "description": "Directory to run in, relative to the workspace (default: its root).",
            },
            "stdin": {
                "type": "string",
                "maxLength": MAX_STDIN_BYTES,
                "description": "Text to send to the program's standard input.",
            },
        },
        "required": ["argv"],
        "additionalProperties": False,
    }


def _result(done: Completed, timeout: float, why_not: str) -> ToolResult:
    structured: dict[str, Any] = {
        "exit_code": done.exit_code,
        "stdout": done.stdout.decode("utf-8", "replace"),
        "stderr": done.stderr.decode("utf-8", "replace"),
        "stdout_truncated": done.stdout_truncated,
        "stderr_truncated": done.stderr_truncated,
        "timed_out": done.timed_out,
        "duration": round(done.duration, 3),
        "isolation": done.isolation,
        "cgroup": done.cgroup,
    }
    if why_not:
        structured["isolation_note"] = why_not
    if done.setup_error is not None:
        return _error(
            f"the command did not run: sandbox setup failed: {done.setup_error}", structured
        )
    if done.timed_out:
        return _error(
            f"the command did not finish within {timeout:g}s and was killed (with its child "
            "processes); partial output is included. Use a narrower command or smaller input.",
            structured,
        )
    lines = [f"exit code: {done.exit_code}"]
    for label, text, cut in (
        ("stdout", structured["stdout"], done.stdout_truncated),
        ("stderr", structured["stderr"], done.stderr_truncated),
    ):
        if text or cut:
            lines.append(f"--- {label}{' (truncated; the command was killed)' if cut else ''} ---")
            lines.append(text)
    return ToolResult.text("\n".join(lines), structured=structured)


def _error(message: str, structured: dict[str, Any]) -> ToolResult:
    parts = [message]
    for label in ("stdout", "stderr"):
        if structured[label]:
            parts += [f"--- {label} ---", structured[label]]
    return ToolResult(
        content=ToolResult.text("\n".join(parts)).content, structured=structured, is_error=True
    )
