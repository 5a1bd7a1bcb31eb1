"""Processes, locks, read-only media and the store, for ``bench/faults.py``.

``Harness`` spawns every agent process (``bench.faults.child``) in a session of its own,
drains its output, notes when it ended, and keeps the totals the bench reports: events a
process committed that the store lost, runs reported ``finished`` whose log is not stored,
tracebacks, runs that overran ``max_seconds`` + 5 s. It also holds what must be undone
whatever happens (live processes, the write-lock holder, immutable flags).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench.faults.child import COMMITTED

from tether.events import Event, RunFinished
from tether.stores import RunNotFound, RunQuery, SqliteStore

ROOT = Path(__file__).resolve().parents[2]
TRACEBACK = "Traceback (most recent call last)"
HANG_MARGIN = 5.0
"""A run must have ended ``max_seconds`` + this many seconds after its process started."""
_BOX = " \t│╭╮╰╯─"
"""What rich draws a traceback's frame with."""
ALLOWED_LINES = ("tether: ", "approve ")
"""What a failing command may print on stderr besides its ``error:`` line (the store's log
lines, approve's list of the decisions it is about to record)."""

_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()  # hold it until told to let go (or until the parent dies)
db.execute("ROLLBACK")
"""


@dataclass(frozen=True, slots=True)
class Committed:
    """One event an append returned for, as the process recorded it."""

    run_id: str
    seq: int
    hash: str
    kind: str
    at: float


@dataclass(slots=True)
class Ran:
    """A finished (or killed) process."""

    name: str
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    committed: list[Committed]
    started_at: float = 0.0
    """When the process started (Unix time, as ``Committed.at``)."""
    timed_out: bool = False

    def json(self) -> dict[str, Any] | None:
        """What ``--json`` (or ``child agent``) printed, if it printed a JSON object."""
        text = self.stdout.strip()
        start = text.find("{")
        if start < 0:
            return None
        try:
            value = json.loads(text[start:])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]

    def finished_after(self) -> str:
        """How long after its start the process committed a ``run_finished`` (if it did)."""
        ends = [c.at for c in self.committed if c.kind == "run_finished"]
        return f"run_finished committed at {ends[-1] - self.started_at:.1f}s" if ends else ""

    def brief(self) -> str:
        """Name, exit code, time and the last lines of stderr (rich's box drawing left out)."""
        lines = [t for t in (line.strip(_BOX) for line in self.stderr.splitlines()) if t]
        tail = " | ".join(lines[-3:])[-400:]
        return f"{self.name}: exit {self.code} in {self.seconds:.1f}s; stderr: {tail!r}"


@dataclass(slots=True)
class Tally:
    """The bench's totals (each must be 0)."""

    lost_events: int = 0
    false_finished: int = 0
    tracebacks: int = 0
    hung_runs: int = 0
    refused_records: int = 0
    leftover_pending_files: int = 0
    invocations: int = 0
    notes: list[str] = field(default_factory=list[str])

    def counts(self) -> tuple[int, ...]:
        return (
            self.lost_events,
            self.false_finished,
            self.tracebacks,
            self.hung_runs,
            self.refused_records,
            self.leftover_pending_files,
        )


Channel = Literal["file", "pipe", "none"]


class Child:
    """One process of the bench's, watched from threads (output drained, exit time noted)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        bound: float | None,
        channel: Channel,
        committed_file: Path | None,
    ) -> None:
        self.name = name
        self.bound = bound
        self.committed_file = committed_file
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._pipe: list[bytes] = []
        self.ended_at: float | None = None
        pass_fds: tuple[int, ...] = ()
        read_end = write_end = -1
        if channel == "pipe":
            read_end, write_end = os.pipe()
            env = {**env, COMMITTED: f"fd:{write_end}"}
            pass_fds = (write_end,)
        elif channel == "file" and committed_file is not None:
            env = {**env, COMMITTED: str(committed_file)}
        self.started = time.monotonic()
        self.started_at = time.time()
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: killed whole, never by name
            pass_fds=pass_fds,
        )
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self._threads = [
            _drain(self.proc.stdout.fileno(), self._out),
            _drain(self.proc.stderr.fileno(), self._err),
            threading.Thread(target=self._reap, daemon=True),
        ]
        if channel == "pipe":
            os.close(write_end)
            self._threads.append(_drain(read_end, self._pipe, close=True))
        for thread in self._threads:
            thread.start()

    def _reap(self) -> None:
        self.proc.wait()
        self.ended_at = time.monotonic()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the process's group (its own session: only what this bench started)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def wait_for(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the process to end; whether it did."""
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def wait(self, timeout: float) -> Ran:
        timed_out = not self.wait_for(timeout)
        if timed_out:
            self.kill()
            self.proc.wait()
        for thread in self._threads:
            thread.join(30)
        ended = self.ended_at if self.ended_at is not None else time.monotonic()
        return Ran(
            name=self.name,
            code=self.proc.returncode,
            stdout=b"".join(self._out).decode(errors="replace"),
            stderr=b"".join(self._err).decode(errors="replace"),
            seconds=ended - self.started,
            committed=self._committed(),
            started_at=self.started_at,
            timed_out=timed_out,
        )

    def _committed(self) -> list[Committed]:
        raw = b"".join(self._pipe)
        if self.committed_file is not None and self.committed_file.exists():
            raw += self.committed_file.read_bytes()
        return parse_committed(raw.decode())


def _drain(fd: int, into: list[bytes], *, close: bool = False) -> threading.Thread:
    def run() -> None:
        try:
            while chunk := os.read(fd, 65536):
                into.append(chunk)
        finally:
            if close:
                os.close(fd)

    return threading.Thread(target=run, daemon=True)


def parse_committed(text: str) -> list[Committed]:
    found: list[Committed] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 5:  # a line cut short by a kill is no commit the process saw
            run_id, seq, digest, kind, at = parts
            found.append(Committed(run_id, int(seq), digest, kind, float(at)))
    return found


class WriteLock:
    """Another process holding ``BEGIN IMMEDIATE`` on a SQLite file until ``release``."""

    def __init__(self, harness: Harness, db: Path) -> None:
        self.db = db
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        harness.holders.append(self.proc)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line != b"locked\n":
            raise RuntimeError(f"the lock holder did not get the lock: {line!r}")
        self.taken_at = time.time()
        self.released_at: float | None = None

    def release(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
            self.proc.wait(60)
        self.released_at = time.time()


class Harness:
    """Spawns the bench's processes, keeps its totals, and undoes everything in ``close``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.tally = Tally()
        self.children: list[Child] = []
        self.holders: list[subprocess.Popen[bytes]] = []
        self.immutable: list[Path] = []
        self.chmodded: dict[Path, int] = {}
        self._count = 0

    def env(self, **knobs: object) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("BENCH_FAULTS_", "TETHER_")) and k != "FORCE_COLOR"
        }
        return {
            **base,
            "PYTHONPATH": path,
            "COLUMNS": "200",
            **{k: str(v) for k, v in knobs.items()},
        }

    def spawn(
        self,
        name: str,
        args: list[str],
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        bound: float | None = None,
        channel: Channel = "file",
        python: bool = False,
    ) -> Child:
        """Start ``tether ARGS`` (or, with ``python``, ``child agent ARGS``) in ``cwd``.

        ``bound``: seconds the process may take (``max_seconds`` + 5) before it counts as
        hung.
        """
        self._count += 1
        committed = self.workdir / f"committed-{self._count}.txt" if channel == "file" else None
        argv = [sys.executable, "-m", "bench.faults.child", "agent" if python else "tether", *args]
        child = Child(
            name,
            argv,
            env=env if env is not None else self.env(),
            cwd=cwd,
            bound=bound,
            channel=channel,
            committed_file=committed,
        )
        self.children.append(child)
        return child

    def finish(self, child: Child, timeout: float | None = None) -> Ran:
        """Wait for ``child`` (killing it past ``timeout``), and count what it did wrong."""
        limit = timeout if timeout is not None else (child.bound or 120) + 60
        ran = child.wait(limit)
        self.tally.invocations += 1
        if TRACEBACK in ran.stderr:
            self.tally.tracebacks += 1
            self.tally.notes.append(f"traceback: {ran.brief()}")
        if ran.timed_out or (child.bound is not None and ran.seconds > child.bound):
            self.tally.hung_runs += 1
            self.tally.notes.append(f"hung (bound {child.bound}s): {ran.brief()}")
        return ran

    def tether(
        self,
        name: str,
        args: list[str],
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        bound: float | None = None,
        channel: Channel = "file",
    ) -> Ran:
        return self.finish(self.spawn(name, args, cwd=cwd, env=env, bound=bound, channel=channel))

    # -- faults that must be undone ---------------------------------------------------------

    @contextmanager
    def read_only(self, *paths: Path) -> Iterator[None]:
        """Make ``paths`` unwritable: immutable for root (whom modes do not stop), else chmod."""
        root = os.geteuid() == 0
        try:
            for p in paths:
                if root:
                    self.immutable.append(p)
                    subprocess.run(["chattr", "+i", str(p)], check=True)
                else:
                    self.chmodded[p] = p.stat().st_mode
                    p.chmod(0o555 if p.is_dir() else 0o444)
            yield
        finally:
            self._writable(paths)

    def _writable(self, paths: tuple[Path, ...] | list[Path]) -> None:
        for p in reversed(list(paths)):
            if p in self.immutable:
                subprocess.run(["chattr", "-i", str(p)], check=False)
                self.immutable.remove(p)
            if p in self.chmodded:
                p.chmod(self.chmodded.pop(p))

    def close(self) -> None:
        """Kill what still runs, release locks, make everything writable again."""
        for child in self.children:
            if child.alive:
                child.kill()
                child.proc.wait()
        for holder in self.holders:
            if holder.poll() is None:
                holder.kill()
                holder.wait()
        self._writable([*self.immutable, *self.chmodded])


# -- the store, read by the bench after the processes are gone --------------------------------


@dataclass(slots=True)
class Stored:
    """What the store holds once reopened (which applies any dead writer's pending file)."""

    logs: dict[str, list[Event]]
    statuses: dict[str, str]
    pending_files: list[str]
    refused: int


def inspect(db: Path, run_ids: list[str] | None = None) -> Stored:
    """Open the store, read ``run_ids`` (default: every run), close it; then look at -pending."""

    async def read() -> Stored:
        store = SqliteStore(db)
        try:
            infos = await store.runs(RunQuery(limit=100_000))
            statuses = {i.run_id: str(i.status) for i in infos}
            logs: dict[str, list[Event]] = {}
            for run_id in statuses if run_ids is None else run_ids:
                with contextlib.suppress(RunNotFound):
                    logs[run_id] = await store.read(run_id)
        finally:
            await store.close()
        pending = db.with_name(db.name + "-pending")
        files = sorted(p.name for p in pending.iterdir()) if pending.is_dir() else []
        refused = pending / "refused.jsonl"
        count = len(refused.read_text().splitlines()) if refused.exists() else 0
        return Stored(logs, statuses, files, count)

    return asyncio.run(read())


def lost(committed: list[Committed], stored: Stored) -> list[Committed]:
    """The commits a process saw return that the store does not hold (same seq, same hash)."""
    hashes = {r: {e.seq: e.hash for e in log} for r, log in stored.logs.items()}
    return [c for c in committed if hashes.get(c.run_id, {}).get(c.seq) != c.hash]


def ends_with_finish(stored: Stored, run_id: str, committed: list[Committed]) -> bool:
    """Whether the stored log ends with ``run_finished`` ``finished`` (the process's own one).

    A process that committed a ``run_finished`` of this run must find that very event last.
    """
    log = stored.logs.get(run_id, [])
    if not log or not isinstance(log[-1], RunFinished) or log[-1].status != "finished":
        return False
    own = [c for c in committed if c.run_id == run_id and c.kind == "run_finished"]
    return not own or own[-1].hash == log[-1].hash


def one_error_line(ran: Ran, *, names: Path | str, says: tuple[str, ...] = ()) -> str | None:
    """``None`` if ``ran`` failed cleanly: exit 2, one ``error:`` line naming ``names`` and
    saying each of ``says``, nothing else on stderr but log lines; else what was wrong."""
    errors = ran.error_lines()
    others = [
        line
        for line in ran.stderr.splitlines()
        if line.strip() and line not in errors and not line.startswith(ALLOWED_LINES)
    ]
    problems: list[str] = []
    if ran.code != 2:
        problems.append(f"exit {ran.code}, not 2")
    if TRACEBACK in ran.stderr:
        problems.append("a traceback")
    if len(errors) != 1:
        problems.append(f"{len(errors)} error lines")
    if others:
        problems.append(f"other stderr lines {others[:3]!r}")
    line = errors[0] if errors else ""
    if errors and str(names) not in line:
        problems.append(f"the error line does not name {names}")
    problems.extend(f"the error line does not say {s!r}" for s in says if errors and s not in line)
    if not problems:
        return None
    return "; ".join(problems) + f" [{ran.brief()}]"
