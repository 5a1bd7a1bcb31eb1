"""Per-command cgroups for the shell sandbox: probe, create, join, kill and remove.

``probe_cgroups`` finds, once per process, where fresh cgroups can be made: a writable
``pids`` controller (v1, or v2 with ``pids`` delegated) and, if possible, ``memory``.
``CommandCgroups`` makes one command's cgroups and sets their limits; the trampoline joins
them by writing its pid to ``procs_files`` before it ``exec``s, so everything the command
forks stays inside. When the command ends, ``kill_all`` and ``remove`` make sure nothing in
them outlives it: ``pids.max`` bounds forks even for root, where ``RLIMIT_NPROC`` does not.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from tether._internal.frozen import frozen

__all__ = ["CgroupSupport", "CommandCgroups", "probe_cgroups"]


@frozen
class CgroupSupport:
    """Where per-command cgroups can be made (the parents), if anywhere."""

    version: Literal["v1", "v2"] | None = None
    """The cgroup version used, or ``None`` when no writable ``pids`` controller exists."""
    pids_parent: str | None = None
    """The directory new ``pids`` cgroups are made in."""
    memory_parent: str | None = None
    """The directory new ``memory`` cgroups are made in (v1; v2 uses ``pids_parent``)."""
    reason: str = ""
    """Why cgroups (or the memory controller) are not used."""


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) to this process's cgroup path."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """Controller (``""`` for v2) to ``(mount point, mount root)``."""
    mounts: dict[str, tuple[str, str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, extra = left.split(), right.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        root, point = fields[3], fields[4]
        if extra[0] == "cgroup2":
            mounts.setdefault("", (point, root))
        elif extra[0] == "cgroup":
            for option in extra[2].split(","):
                mounts.setdefault(option, (point, root))
    return mounts


def _cgroup_dir(controller: str) -> str | None:
    try:
        own, mounts = _own_cgroups(), _cgroup_mounts()
    except (OSError, ValueError):
        return None
    if controller not in own or controller not in mounts:
        return None
    point, root = mounts[controller]
    path = own[controller]
    if root != "/" and path.startswith(root):
        path = path[len(root) :]
    candidate = os.path.join(point, path.lstrip("/"))
    return candidate if os.path.isdir(candidate) else None


def _try_child(parent: str, files: Sequence[tuple[str, str]]) -> str | None:
    """Make a child cgroup, write ``files`` into it, remove it; the error, or ``None``."""
    probe = os.path.join(parent, f"tether-probe-{uuid.uuid4().hex[:12]}")
    try:
        os.mkdir(probe)
    except OSError as exc:
        return f"cannot create a cgroup in {parent}: {exc.strerror}"
    try:
        for name, value in files:
            try:
                Path(probe, name).write_text(value)
            except OSError as exc:
                return f"cannot set {name} in {parent}: {exc.strerror}"
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe)
    return None


@functools.cache
def probe_cgroups() -> CgroupSupport:
    """Find a writable ``pids`` controller (and ``memory`` if possible); cached per process."""
    v1_pids = _cgroup_dir("pids")
    if v1_pids is not None:
        error = _try_child(v1_pids, [("pids.max", "64")])
        if error is None:
            memory = _cgroup_dir("memory")
            mem_error = (
                _try_child(memory, [("memory.limit_in_bytes", str(2**30))])
                if memory
                else "no memory controller"
            )
            return CgroupSupport(
                version="v1",
                pids_parent=v1_pids,
                memory_parent=memory if mem_error is None else None,
                reason=mem_error or "",
            )
        return CgroupSupport(reason=error)
    v2 = _cgroup_dir("")
    if v2 is None:
        return CgroupSupport(reason="no cgroup pids controller is mounted")
    enabled = _read(os.path.join(v2, "cgroup.subtree_control")).split()
    if "pids" not in enabled:
        # only possible where this process's cgroup has no processes of its own (v2 rule)
        with contextlib.suppress(OSError):
            Path(v2, "cgroup.subtree_control").write_text("+pids +memory")
        enabled = _read(os.path.join(v2, "cgroup.subtree_control")).split()
    if "pids" not in enabled:
        return CgroupSupport(reason=f"the pids controller is not delegated to {v2}")
    error = _try_child(v2, [("pids.max", "64")])
    if error is not None:
        return CgroupSupport(reason=error)
    has_memory = "memory" in enabled and _try_child(v2, [("memory.max", str(2**30))]) is None
    return CgroupSupport(
        version="v2",
        pids_parent=v2,
        memory_parent=v2 if has_memory else None,
        reason="" if has_memory else "the memory controller is not writable",
    )


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


class CommandCgroups:
    """The fresh cgroups (one per v1 controller, one in v2) a single command runs in."""

    def __init__(
        self, support: CgroupSupport, *, max_processes: int | None, memory_bytes: int | None
    ) -> None:
        name = f"tether-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.dirs: list[str] = []
        self.version = support.version
        assert support.pids_parent is not None
        try:
            pids = os.path.join(support.pids_parent, name)
            os.mkdir(pids)
            self.dirs.append(pids)
            self.pids_dir = pids
            if max_processes is not None:
                Path(pids, "pids.max").write_text(str(max_processes))
            if support.memory_parent is not None and memory_bytes is not None:
                if support.version == "v1":
                    memory = os.path.join(support.memory_parent, name)
                    os.mkdir(memory)
                    self.dirs.append(memory)
                    Path(memory, "memory.limit_in_bytes").write_text(str(memory_bytes))
                else:
                    Path(pids, "memory.max").write_text(str(memory_bytes))
        except OSError:
            self.remove_now()
            raise

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files the trampoline writes its pid to."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        """Processes still in the command's cgroups."""
        found: set[int] = set()
        for procs in self.procs_files:
            found.update(int(p) for p in _read(procs).split())
        return sorted(found)

    def peak(self) -> int | None:
        """The most processes (and threads) that were ever in the cgroup, if the kernel says."""
        text = _read(os.path.join(self.pids_dir, "pids.peak")).strip()
        return int(text) if text.isdigit() else None

    def kill_all(self) -> None:
        """SIGKILL everything in the cgroups, again until nothing is left to fork."""
        if self.version == "v2":
            with contextlib.suppress(OSError):
                Path(self.pids_dir, "cgroup.kill").write_text("1")
        for _ in range(1000):  # each round kills all seen; pids.max bounds new arrivals
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.001)

    async def remove(self) -> None:
        """Kill what is left in the cgroups and remove them."""
        for d in reversed(self.dirs):
            for _ in range(400):  # dying processes leave the cgroup a moment after SIGKILL
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    self.kill_all()
                    await asyncio.sleep(0.005)
        self.dirs = []

    def remove_now(self) -> None:
        """Remove the cgroups if they are already empty (after a failed setup)."""
        for d in reversed(self.dirs):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        self.dirs = []
