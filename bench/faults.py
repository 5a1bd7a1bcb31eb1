"""Store and run faults against real processes and a real SQLite file: what is lost, what lies.

Every agent runs in a process of its own: the real ``tether`` command (or, for one case, an
agent run from Python), through ``bench.faults.child``, which records each append that
returned (``RUN SEQ HASH KIND TIME``, fsync-ed, or through a pipe where the disk is full).
After each case the bench reopens the store (which applies what a dead writer left in the
``-pending`` directory) and checks it against what the processes saw and said:

- ``lost_events``: events an append returned for that the store does not hold;
- ``false_finished``: runs a process reported ``finished`` whose stored log does not end
  with that ``run_finished``;
- ``tracebacks``: processes that printed a Python traceback;
- ``hung_runs``: runs whose process took longer than ``max_seconds`` + 5 s, or never ended;
- ``refused_records`` / ``leftover_pending_files``: records kept in
  ``<db>-pending/refused.jsonl``, files left in ``<db>-pending`` once everything closed.

All must be 0. The cases (``--quick`` skips the 45-s ones, and runs 6 kills):

1. another process holds the write lock (``BEGIN IMMEDIATE``) for 5 s / 45 s mid-run;
2. ... for 5 s / 45 s from before the run starts: a new run finishes (through the pending
   file); ``--run-id`` (checked in the database) fails cleanly past the busy timeout;
3. read-only file / read-only directory (``chattr +i`` as root, else ``chmod``): ``run``
   fails cleanly, nothing half-started; ``runs``, ``show``, ``export``, ``audit`` work;
4. a regular file where ``<db>-pending`` goes: ``run`` fails cleanly, nothing stored;
5. a full disk (``RLIMIT_FSIZE``, ``SIGXFSZ`` ignored) from the start, and from a tool on;
6. damaged pages: every command fails cleanly, naming the file and how to recover;
7. ``tether resume`` 33 s into a 45-s tool of a live owner: refused, effect exactly once;
8. a tool that swallows cancellation; 9. tools that block the event loop (4 s, 1 h);
10. ``kill -9`` at random moments (``--kills N``), then ``tether resume`` until it ends.

    python bench/faults.py [--quick] [--kills 20] [--seed 1] [--only SUBSTRING]

One JSON line on stdout; one line per case (name, outcome, seconds, detail) on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.faults import agents  # noqa: E402
from bench.faults.agents import EFFECTS, FILL, MAX_SECONDS, STEP_SECONDS, STEPS, TOOL_SECONDS  # noqa: E402
from bench.faults.child import FSIZE  # noqa: E402
from bench.faults.harness import (  # noqa: E402
    HANG_MARGIN,
    Child,
    Harness,
    Ran,
    Stored,
    WriteLock,
    ends_with_finish,
    inspect,
    lost,
    one_error_line,
)

from tether.codec import write_jsonl  # noqa: E402
from tether.events import RunFinished, ToolCallFinished, ToolCallUnknown  # noqa: E402
from tether.outcome import TERMINAL_STATUSES  # noqa: E402
from tether.stores import SqliteStore  # noqa: E402
from tether.testing import ScriptedModel, call, finish  # noqa: E402

MAX_PROBLEMS = 6
"""Problems shown per case (the rest are counted)."""
STEADY_MAX_SECONDS = 150.0
"""``steady``'s ``max_seconds`` unless a case sets it (room for a 30-s busy timeout)."""


@dataclass(slots=True)
class Ctx:
    """What a case gets: the harness, its own folder, the options."""

    h: Harness
    dir: Path
    quick: bool
    kills: int
    seed: int
    problems: list[str]

    def problem(self, text: str) -> None:
        self.problems.append(text)


# -- helpers --------------------------------------------------------------------------------


def run_args(db: Path, agent: str, *extra: str) -> list[str]:
    return [
        "run",
        "go",
        "--agent",
        agents.ref(agent),
        "--db",
        str(db),
        "--no-log",
        "--json",
        *extra,
    ]


def steady_env(
    c: Ctx, steps: int, step: float, max_seconds: float = STEADY_MAX_SECONDS
) -> dict[str, str]:
    return c.h.env(**{STEPS: steps, STEP_SECONDS: step, MAX_SECONDS: max_seconds})


def seed(db: Path, runs: int) -> list[str]:
    """``runs`` finished runs of ``steady`` in the store (from this process)."""

    async def go() -> list[str]:
        store = SqliteStore(db)
        ids: list[str] = []
        try:
            for _ in range(runs):
                model = ScriptedModel([call("tick", n=0), finish("done")])
                agent = replace(agents.steady(), store=store, model=model)
                outcome = await agent.run("seed", agent_ref=agents.ref("steady"))
                ids.append(outcome.run_id)
        finally:
            await store.close()
        return ids

    os.environ[STEP_SECONDS] = "0"
    try:
        return asyncio.run(go())
    finally:
        del os.environ[STEP_SECONDS]


def reported(ran: Ran) -> str | None:
    """The status the process reported: its JSON's, else ``finished`` for exit 0."""
    out = ran.json()
    if out is not None and isinstance(out.get("status"), str):
        return str(out["status"])
    return "finished" if ran.code == 0 else None


def run_id_of(ran: Ran) -> str | None:
    out = ran.json()
    if out is not None and isinstance(out.get("run_id"), str):
        return str(out["run_id"])
    return ran.committed[0].run_id if ran.committed else None


def settle(c: Ctx, stored: Stored, rans: list[tuple[Ran, str | None]]) -> None:
    """Charge what each process committed that is not stored, and finished runs not stored."""
    for ran, run_id in rans:
        missing = lost(ran.committed, stored)
        if missing:
            c.h.tally.lost_events += len(missing)
            first = missing[0]
            c.problem(
                f"{ran.name}: {len(missing)} committed events not stored (first: "
                f"{first.run_id} seq {first.seq} {first.kind})"
            )
        rid = run_id or run_id_of(ran)
        if reported(ran) == "finished" and (
            rid is None or not ends_with_finish(stored, rid, ran.committed)
        ):
            c.h.tally.false_finished += 1
            last = stored.logs.get(rid or "", [])
            tail = last[-1].kind if last else "nothing"
            c.problem(
                f"{ran.name}: reported finished, but the stored log of {rid} ends with {tail}"
            )


def check_pending(c: Ctx, stored: Stored) -> None:
    if stored.refused:
        c.h.tally.refused_records += stored.refused
        c.problem(f"{stored.refused} records in refused.jsonl")
    leftover = [f for f in stored.pending_files if f != "refused.jsonl"]
    if leftover:
        c.h.tally.leftover_pending_files += len(leftover)
        c.problem(f"files left in -pending: {leftover}")


def expect_clean_failure(c: Ctx, ran: Ran, *, names: Path | str, says: tuple[str, ...]) -> None:
    problem = one_error_line(ran, names=names, says=says)
    if problem is not None:
        c.problem(problem)


def expect_status(c: Ctx, stored: Stored, ran: Ran, run_id: str | None) -> None:
    """The store's status of the run is the one the process reported (or, for a clean exit 2
    "resume it" failure, the run is still running)."""
    said = reported(ran)
    held = stored.statuses.get(run_id or "")
    if said is not None and held != said:
        c.problem(f"{ran.name}: reported {said}, the store says {held}")
    if said is None and ran.code == 2 and held not in (None, "running"):
        c.problem(f"{ran.name}: failed (exit 2), but the store says {held}, not running")


def wait_committed(child: Child, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    path = child.committed_file
    while time.monotonic() < deadline and child.alive:
        if path is not None and path.exists() and len(path.read_bytes().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise RuntimeError(f"{child.name} committed fewer than {count} events in {timeout}s")


def audit(c: Ctx, db: Path, run_id: str) -> None:
    ran = c.h.tether(f"audit {run_id}", ["audit", run_id, "--db", str(db)], cwd=c.dir)
    if ran.code != 0 or "chain verified" not in ran.stdout + ran.stderr:
        c.problem(f"audit failed: {ran.brief()}")


def kinds(stored: Stored, run_id: str | None) -> list[str]:
    return [e.kind for e in stored.logs.get(run_id or "", [])]


# -- 1, 2: another process holds the write lock ---------------------------------------------


def lock_mid_run(c: Ctx, seconds: float) -> str:
    db = c.dir / "store" / "t.db"
    seed(db, 2)
    step = 1.0
    steps = math.ceil((seconds + 4) / step)  # the run outlasts the lock
    max_seconds = seconds + 60
    child = c.h.spawn(
        "run",
        run_args(db, "steady"),
        cwd=c.dir,
        env=steady_env(c, steps, step, max_seconds),
        bound=max_seconds + HANG_MARGIN,
    )
    wait_committed(child, 4, 30)
    lock = WriteLock(c.h, db)
    time.sleep(seconds)
    lock.release()
    ran = c.h.finish(child)
    run_id = run_id_of(ran)
    stored = inspect(db)
    assert lock.released_at is not None
    during = sum(1 for x in ran.committed if lock.taken_at <= x.at <= lock.released_at)
    times = [x.at for x in ran.committed]
    stall = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
    if ran.code not in (0, 1):
        expect_clean_failure(c, ran, names=db, says=("locked",))
    expect_status(c, stored, ran, run_id)
    settle(c, stored, [(ran, run_id)])
    check_pending(c, stored)
    return (
        f"run {reported(ran) or f'exit {ran.code}'} in {ran.seconds:.1f}s; "
        f"{len(ran.committed)} events committed, {during} while locked, longest wait between "
        f"two commits {stall:.1f}s; "
        f"store: {stored.statuses.get(run_id or '')}"
    )


def lock_at_start(c: Ctx, seconds: float) -> str:
    db = c.dir / "store" / "t.db"
    seed(db, 2)
    env = steady_env(c, 3, 0.2)
    bound = STEADY_MAX_SECONDS + HANG_MARGIN
    lock = WriteLock(c.h, db)
    new = c.h.spawn("new run", run_args(db, "steady"), cwd=c.dir, env=env, bound=bound)
    fixed_id = f"fixed-{seconds:.0f}"
    # past the busy timeout: the default 30 s for the 45-s lock; 1 s for the 5-s one
    timeout = [] if seconds > 30 else ["--busy-timeout", "1"]
    fixed = c.h.spawn(
        "run --run-id",
        run_args(db, "steady", "--run-id", fixed_id, *timeout),
        cwd=c.dir,
        env=env,
        bound=bound,
    )
    waiter = None
    if seconds < 30:  # the default busy timeout outlasts this lock: it waits, then runs
        waiter = c.h.spawn(
            "run --run-id (waits)",
            run_args(db, "steady", "--run-id", "waits"),
            cwd=c.dir,
            env=env,
            bound=bound,
        )
    time.sleep(max(0.0, lock.taken_at + seconds - time.time()))
    lock.release()
    rans = [(c.h.finish(new), None), (c.h.finish(fixed), fixed_id)]
    if waiter is not None:
        rans.append((c.h.finish(waiter), "waits"))
    stored = inspect(db)
    new_ran = rans[0][0]
    if reported(new_ran) != "finished":
        c.problem(f"the new run did not finish: {new_ran.brief()}")
    expect_clean_failure(c, rans[1][0], names=db, says=("locked by another process",))
    if fixed_id in stored.statuses:
        c.problem(
            f"--run-id {fixed_id} failed, yet the store holds it ({stored.statuses[fixed_id]})"
        )
    if waiter is not None and reported(rans[2][0]) != "finished":
        c.problem(f"--run-id with the default busy timeout did not finish: {rans[2][0].brief()}")
    for ran, run_id in rans:
        expect_status(c, stored, ran, run_id or run_id_of(ran))
    settle(c, stored, rans)
    check_pending(c, stored)
    return "; ".join(
        f"{r.name}: {reported(r) or f'exit {r.code}'} in {r.seconds:.1f}s {r.finished_after()}"
        for r, _ in rans
    )


# -- 3, 4: read-only store, blocked pending path ----------------------------------------------


def read_only(c: Ctx, what: str) -> str:
    db = c.dir / "store" / "t.db"
    rid = seed(db, 2)[-1]
    before = set(inspect(db).statuses)
    target = db if what == "file" else db.parent
    reads = {
        "runs": (["runs"], rid),
        "show": (["show", rid], "run finished"),
        "export": (["export", rid], rid),
        "audit": (["audit", rid], "chain verified"),
    }
    with c.h.read_only(target):
        run = c.h.tether(
            "run",
            run_args(db, "steady"),
            cwd=c.dir,
            env=steady_env(c, 2, 0.1),
            bound=STEADY_MAX_SECONDS + HANG_MARGIN,
        )
        expect_clean_failure(c, run, names=db, says=("read-only",))
        for name, (args, expect) in reads.items():
            ran = c.h.tether(name, [*args, "--db", str(db)], cwd=c.dir)
            if ran.code != 0 or expect not in ran.stdout + ran.stderr:
                c.problem(f"{name} on a read-only {what} did not work: {ran.brief()}")
    return refused_run(c, db, before, run)


def refused_run(c: Ctx, db: Path, before: set[str], run: Ran) -> str:
    """After a ``tether run`` its store refused: no run stored half-way, nothing left pending."""
    after = inspect(db)
    started = set(after.statuses) - before
    if started:
        c.problem(f"runs stored half-way: {sorted(started)}")
    settle(c, after, [(run, None)])
    check_pending(c, after)
    return f"run: exit {run.code}: {(run.error_lines() or [''])[0]}"


def pending_blocked(c: Ctx) -> str:
    db = c.dir / "store" / "t.db"
    seed(db, 2)
    before = set(inspect(db).statuses)
    pending = db.with_name(db.name + "-pending")
    if pending.is_dir():
        shutil.rmtree(pending)  # empty once its store closed (inspect checked it)
    pending.write_text("a file where the pending directory goes\n")
    run = c.h.tether(
        "run",
        run_args(db, "steady"),
        cwd=c.dir,
        env=steady_env(c, 2, 0.1),
        bound=STEADY_MAX_SECONDS + HANG_MARGIN,
    )
    expect_clean_failure(c, run, names=pending, says=())
    pending.unlink()
    return refused_run(c, db, before, run)


# -- 5: a full disk ---------------------------------------------------------------------------


def disk_full_at_start(c: Ctx) -> str:
    db = c.dir / "store" / "t.db"
    seed(db, 2)
    before = set(inspect(db).statuses)
    env = {**steady_env(c, 2, 0.1), FSIZE: "1"}
    run = c.h.tether(
        "run (1-byte file limit)",
        run_args(db, "steady"),
        cwd=c.dir,
        env=env,
        bound=STEADY_MAX_SECONDS + HANG_MARGIN,
        channel="pipe",
    )
    expect_clean_failure(c, run, names=db, says=("full",))
    after = inspect(db)
    started = sorted(set(after.statuses) - before)
    for run_id in started:
        if after.statuses[run_id] == "finished" and reported(run) != "finished":
            c.problem(f"run {run_id} is stored finished, yet its process failed")
    settle(c, after, [(run, None)])
    check_pending(c, after)
    return (
        f"exit {run.code}; {len(run.committed)} events committed; new runs stored: {len(started)}"
    )


def disk_full_mid_run(c: Ctx) -> str:
    db = c.dir / "store" / "t.db"
    seed(db, 2)
    env = {**c.h.env(), FILL: "1"}
    run = c.h.tether(
        "run (disk fills mid-run)",
        run_args(db, "filler"),
        cwd=c.dir,
        env=env,
        bound=60 + HANG_MARGIN,
        channel="pipe",
    )
    expect_clean_failure(c, run, names=db, says=("full", "resume"))
    run_id = run_id_of(run)
    if run_id is None:
        c.problem("the run committed nothing before the disk filled")
        return f"exit {run.code}"
    stored = inspect(db)
    expect_status(c, stored, run, run_id)
    settle(c, stored, [(run, run_id)])
    check_pending(c, stored)
    again = c.h.tether(
        "resume (disk free again)",
        ["resume", run_id, "--agent", agents.ref("filler"), "--db", str(db)],
        cwd=c.dir,
        bound=60 + HANG_MARGIN,
    )
    if again.code != 0:
        c.problem(f"resume after the disk was freed did not finish: {again.brief()}")
    stored = inspect(db)
    settle(c, stored, [(again, run_id)])
    check_pending(c, stored)
    audit(c, db, run_id)
    return (
        f"run: exit {run.code} after {len(run.committed)} commits "
        f"({run.committed[-1].kind} last); resume: exit {again.code}"
    )


# -- 6: damaged pages -------------------------------------------------------------------------


def seed_for_commands(db: Path, folder: Path) -> dict[str, str]:
    """30 finished runs, one killed mid-tool, one waiting for approval; an unstored log."""
    finished = seed(db, 30)[-1]

    async def go() -> dict[str, str]:
        store = SqliteStore(db)
        try:
            os.environ[STEP_SECONDS] = "0"
            crashed = await agents.steady().run("crash", agent_ref=agents.ref("steady"))
            cut = next(i for i, e in enumerate(crashed.events) if isinstance(e, ToolCallFinished))
            await store.append(crashed.run_id, crashed.events[:cut])  # killed mid-tool
            waiting = await replace(agents.gated(), store=store).run(
                "wait", agent_ref=agents.ref("gated")
            )
            other = await agents.steady().run("elsewhere")
            write_jsonl(folder / "new.jsonl", other.events)
        finally:
            del os.environ[STEP_SECONDS]
            await store.close()
        return {"finished": finished, "crashed": crashed.run_id, "waiting": waiting.run_id}

    return asyncio.run(go())


def corrupt_pages(path: Path) -> None:
    """Overwrite the middle of a database file with garbage, past its header page."""
    size = path.stat().st_size
    with path.open("r+b") as fh:
        fh.seek(4096)
        fh.write(b"\xde\xad\xbe\xef" * ((size - 4096) // 8))


def corrupt(c: Ctx) -> str:
    db = c.dir / "store" / "t.db"
    runs = seed_for_commands(db, c.dir)
    size = db.stat().st_size
    if size <= 3 * 4096:
        c.problem(f"the store is too small ({size} bytes) to damage past its first page")
    corrupt_pages(db)
    f, crashed, waiting = runs["finished"], runs["crashed"], runs["waiting"]
    commands = {
        "runs": ["runs"],
        "runs --stale": ["runs", "--stale"],
        "show": ["show", f],
        "export": ["export", f],
        "audit": ["audit", f],
        "import": ["import", str(c.dir / "new.jsonl")],
        "prune": ["prune", "--keep-last", "0"],
        "run": run_args(db, "steady"),
        "resume": ["resume", crashed, "--agent", agents.ref("steady")],
        "approve": ["approve", waiting, "--all", "--agent", agents.ref("gated")],
        "abandon": ["abandon", crashed, "--reason", "its worker was killed"],
    }
    failed = 0
    for name, args in commands.items():
        if "--db" not in args:
            args = [*args, "--db", str(db)]
        ran = c.h.tether(name, args, cwd=c.dir, bound=STEADY_MAX_SECONDS + HANG_MARGIN)
        problem = one_error_line(ran, names=db, says=("damaged", ".recover"))
        if problem is not None:
            failed += 1
            c.problem(f"{name}: {problem}")
    return (
        f"{len(commands) - failed}/{len(commands)} commands failed cleanly ({size} bytes damaged)"
    )


# -- 7: resume while the owner is alive in a long tool ----------------------------------------


def resume_during_tool(c: Ctx, seconds: float) -> str:
    db = c.dir / "t.db"
    effects = c.dir / "effects.txt"
    at = seconds - 12 if seconds > 20 else seconds - 2  # 33 s in: past a 30-s lease
    env = c.h.env(**{TOOL_SECONDS: seconds, EFFECTS: effects})
    run_id = f"slow-{seconds:.0f}"
    bound = seconds + 60 + HANG_MARGIN
    owner = c.h.spawn(
        "owner", run_args(db, "slow", "--run-id", run_id), cwd=c.dir, env=env, bound=bound
    )
    deadline = time.monotonic() + 30
    while not effects.exists() and owner.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    if not effects.exists():
        owner.kill()
        raise RuntimeError(f"the tool never started: {c.h.finish(owner).brief()}")
    in_tool = time.monotonic()
    time.sleep(at)
    other = c.h.tether(
        "resume",
        ["resume", run_id, "--agent", agents.ref("slow"), "--db", str(db)],
        cwd=c.dir,
        env=env,
        bound=bound,
    )
    refused_at = time.monotonic() - in_tool
    expect_clean_failure(c, other, names=run_id, says=("owned by", "alive"))
    ran = c.h.finish(owner)
    if reported(ran) != "finished":
        c.problem(f"the owner did not finish: {ran.brief()}")
    count = len(effects.read_text().splitlines())
    if count != 1:
        c.problem(f"the tool's effect happened {count} times")
    stored = inspect(db)
    expect_status(c, stored, ran, run_id)
    settle(c, stored, [(ran, run_id), (other, run_id)])
    check_pending(c, stored)
    audit(c, db, run_id)
    return (
        f"resume at {refused_at:.1f}s into the tool: exit {other.code}; owner "
        f"{reported(ran) or ran.code} in {ran.seconds:.1f}s; effects {count}"
    )


# -- 8, 9: tools that will not stop ------------------------------------------------------------


def swallower(c: Ctx) -> str:
    db = c.dir / "t.db"
    ran = c.h.tether("run", run_args(db, "swallower"), cwd=c.dir, bound=3 + HANG_MARGIN)
    run_id = run_id_of(ran)
    stored = inspect(db)
    log = kinds(stored, run_id)
    if "tool_call_unknown" not in log:
        c.problem(f"no tool_call_unknown in the log: {log}")
    if not log or log[-1] != "run_finished":
        c.problem(f"the run did not end: {ran.brief()}")
    expect_status(c, stored, ran, run_id)
    settle(c, stored, [(ran, run_id)])
    check_pending(c, stored)
    return f"{reported(ran) or f'exit {ran.code}'} in {ran.seconds:.1f}s (bound 8 s)"


def loop_blocked(c: Ctx) -> str:
    db = c.dir / "t.db"
    child = c.h.spawn(
        "agent blocker", ["blocker", str(db)], cwd=c.dir, bound=10 + HANG_MARGIN, python=True
    )
    ran = c.h.finish(child)
    out = ran.json() or {}
    run_id = out.get("run_id")
    stored = inspect(db)
    if (out.get("status"), out.get("error")) != ("failed", "LoopBlocked"):
        c.problem(f"expected failed (LoopBlocked): {out} {ran.brief()}")
    last = stored.logs.get(str(run_id), [])
    if not last or not isinstance(last[-1], RunFinished) or last[-1].status != "failed":
        c.problem(f"the stored log does not end failed: {kinds(stored, str(run_id))[-3:]}")
    expect_status(c, stored, ran, str(run_id))
    settle(c, stored, [(ran, str(run_id))])
    check_pending(c, stored)
    return f"{out.get('status')} ({out.get('error')}) in {ran.seconds:.1f}s (bound 15 s)"


def loop_hogged(c: Ctx) -> str:
    db = c.dir / "t.db"
    ran = c.h.tether("run", run_args(db, "hog"), cwd=c.dir, bound=2 + HANG_MARGIN)
    if ran.code != 2 or "blocked the event loop" not in ran.stderr or "resume" not in ran.stderr:
        c.problem(f"expected exit 2 saying the loop was blocked, and to resume: {ran.brief()}")
    run_id = run_id_of(ran)
    if run_id is None:
        c.problem("the run committed nothing")
        return f"exit {ran.code}"
    stored = inspect(db)
    settle(c, stored, [(ran, run_id)])
    again = c.h.tether(
        "resume",
        ["resume", run_id, "--agent", agents.ref("hog"), "--db", str(db)],
        cwd=c.dir,
        bound=2 + HANG_MARGIN,
    )
    if again.code != 0:
        c.problem(f"resume did not finish the run: {again.brief()}")
    stored = inspect(db)
    if "tool_call_unknown" not in kinds(stored, run_id):
        c.problem("the hogging call is not recorded as unknown")
    settle(c, stored, [(again, run_id)])
    check_pending(c, stored)
    audit(c, db, run_id)
    return f"run: exit {ran.code} in {ran.seconds:.1f}s (bound 7 s); resume: exit {again.code} in {again.seconds:.1f}s"


# -- 10: kill -9 at random moments -------------------------------------------------------------


@dataclass(slots=True)
class Killed:
    killed: int = 0
    before_commit: int = 0
    resumes: int = 0


def kill_and_resume(
    c: Ctx, db: Path, env: dict[str, str], run_id: str, delay: float, k: Killed
) -> list[Ran]:
    first = c.h.spawn(
        f"run {run_id}",
        run_args(db, "crashy", "--run-id", run_id),
        cwd=c.dir,
        env=env,
        bound=60 + HANG_MARGIN,
    )
    if not first.wait_for(delay):
        first.kill()
        k.killed += 1
    rans = [c.h.finish(first)]
    for _ in range(4):
        if rans[-1].code in (0, 1):
            break
        if not any(r.committed for r in rans):  # maybe killed before its first commit
            k.before_commit += 1
            args = run_args(db, "crashy", "--run-id", run_id)  # a supervisor's re-issue
        else:
            args = ["resume", run_id, "--agent", agents.ref("crashy"), "--db", str(db)]
        k.resumes += 1
        rans.append(
            c.h.tether(f"{args[0]} {run_id}", args, cwd=c.dir, env=env, bound=60 + HANG_MARGIN)
        )
    audit(c, db, run_id)
    return rans


def check_effects(c: Ctx, stored: Stored, effects: Path, run_ids: list[str]) -> tuple[int, int]:
    lines = effects.read_text().splitlines() if effects.exists() else []
    counts = Counter(line for line in lines if line.startswith("effect "))
    twice = sum(n - 1 for n in counts.values() if n > 1)
    if twice:
        c.problem(
            f"{twice} effects ran more than once: {[e for e, n in counts.items() if n > 1][:3]}"
        )
    keys = {line.split()[1] for line in lines if line.startswith("keyed ")}
    unknown = 0
    for run_id in run_ids:
        log = stored.logs.get(run_id, [])
        unknown += sum(1 for e in log if isinstance(e, ToolCallUnknown))
        done = [
            e.call_id
            for e in log
            if isinstance(e, ToolCallFinished) and e.tool == "keyed" and not e.is_error
        ]
        missing = [d for d in done if f"{run_id}:{d}" not in keys]
        if missing:
            c.problem(f"{run_id}: keyed calls done in the log but never made: {missing}")
        if (
            not log
            or not isinstance(log[-1], RunFinished)
            or log[-1].status not in TERMINAL_STATUSES
        ):
            c.problem(f"{run_id} did not end: {[e.kind for e in log][-3:]}")
    return twice, unknown


def kills(c: Ctx) -> str:
    db = c.dir / "t.db"
    effects = c.dir / "effects.txt"
    env = c.h.env(**{EFFECTS: effects})
    rng = random.Random(c.seed)
    k = Killed()
    everything: list[tuple[Ran, str | None]] = []
    run_ids: list[str] = []
    for index in range(c.kills):
        run_id = f"kill-{c.seed}-{index}"
        run_ids.append(run_id)
        # from the process's start: imports (~0.35 s), the run (~0.9 s), closing the store
        delay = rng.uniform(0.2, 1.35)
        everything.extend((r, run_id) for r in kill_and_resume(c, db, env, run_id, delay, k))
    stored = inspect(db)
    twice, unknown = check_effects(c, stored, effects, run_ids)
    settle(c, stored, everything)
    check_pending(c, stored)
    return (
        f"{c.kills} runs, {k.killed} killed ({k.before_commit} before their first commit), "
        f"{k.resumes} resumes; effects twice: {twice}; unknown outcomes: {unknown}"
    )


# -- the bench -------------------------------------------------------------------------------


Case = tuple[str, Callable[[Ctx], str]]


def cases(quick: bool) -> list[Case]:
    found: list[Case] = [
        ("write lock held 5s mid-run", lambda c: lock_mid_run(c, 5)),
        ("write lock held 45s mid-run", lambda c: lock_mid_run(c, 45)),
        ("write lock held 5s at start", lambda c: lock_at_start(c, 5)),
        ("write lock held 45s at start", lambda c: lock_at_start(c, 45)),
        ("read-only file", lambda c: read_only(c, "file")),
        ("read-only directory", lambda c: read_only(c, "directory")),
        ("pending path blocked", pending_blocked),
        ("disk full at start", disk_full_at_start),
        ("disk full mid-run", disk_full_mid_run),
        ("corrupt pages", corrupt),
        ("resume during a 45s tool", lambda c: resume_during_tool(c, 45)),
        ("resume during a 5s tool", lambda c: resume_during_tool(c, 5)),
        ("tool swallows cancellation", swallower),
        ("tool blocks the loop 4s", loop_blocked),
        ("tool blocks the loop 1h (CLI)", loop_hogged),
        ("kill -9 at random points", kills),
    ]
    if quick:
        return [(n, f) for n, f in found if "45s" not in n]
    return [(n, f) for n, f in found if n != "resume during a 5s tool"]


def run_case(
    h: Harness, name: str, fn: Callable[[Ctx], str], index: int, options: argparse.Namespace
) -> dict[str, object]:
    folder = h.workdir / f"case-{index}"
    folder.mkdir()
    c = Ctx(
        h=h, dir=folder, quick=options.quick, kills=options.kills, seed=options.seed, problems=[]
    )
    before = h.tally.counts()
    notes = len(h.tally.notes)
    started = time.monotonic()
    detail = ""
    try:
        detail = fn(c)
    except Exception as exc:  # the case could not run: a finding, reported with the rest
        c.problem(f"the case crashed: {exc!r}: {traceback.format_exc(limit=3)[-600:]}")
    finally:
        h.close()  # whatever the case left: processes, locks, immutable flags
    seconds = time.monotonic() - started
    c.problems.extend(h.tally.notes[notes:])
    ok = not c.problems and h.tally.counts() == before
    shown = c.problems[:MAX_PROBLEMS] + (
        [f"... and {len(c.problems) - MAX_PROBLEMS} more"] if len(c.problems) > MAX_PROBLEMS else []
    )
    text = detail + ("" if ok else " | PROBLEMS: " + " || ".join(p[:600] for p in shown))
    print(f"{name}: {'ok' if ok else 'FAILED'} {seconds:.1f}s {text}", file=sys.stderr, flush=True)
    return {"name": name, "ok": ok, "detail": text, "seconds": round(seconds, 1)}


def preflight(workdir: Path) -> str | None:
    """``None`` if a plain ``tether run`` of ``steady`` finishes here (no fault), else why not."""
    folder = workdir / "preflight"
    folder.mkdir()
    h = Harness(folder)
    try:
        ran = h.tether(
            "preflight run", run_args(folder / "t.db", "steady"), cwd=folder, env=h.env(), bound=60
        )
    finally:
        h.close()
    if reported(ran) == "finished" and ran.committed:
        return None
    return f"a plain run without any fault does not finish: {ran.brief()}"


def main() -> None:
    parser = argparse.ArgumentParser(description="Store and run faults against real processes.")
    parser.add_argument("--quick", action="store_true", help="skip the 45-s cases; 6 kills")
    parser.add_argument("--kills", type=int, default=None, help="kill -9 runs (default 20)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="run only the cases whose name has this")
    options = parser.parse_args()
    if options.kills is None:
        options.kills = 6 if options.quick else 20
    load_start = os.getloadavg()
    started = time.monotonic()
    chosen = [(n, f) for n, f in cases(options.quick) if options.only in n]
    results: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="tether-faults-", ignore_cleanup_errors=True) as tmp:
        broken = preflight(Path(tmp))
        if broken is not None:  # not a fault's finding: the runtime under test does not run
            print(json.dumps({"bench": "faults", "error": broken}))
            raise SystemExit(1)
        h = Harness(Path(tmp))
        try:
            for index, (name, fn) in enumerate(chosen):
                results.append(run_case(h, name, fn, index, options))
        finally:
            h.close()
    t = h.tally
    print(
        json.dumps(
            {
                "bench": "faults",
                "quick": options.quick,
                "cases": len(results),
                "failed_cases": sum(1 for r in results if not r["ok"]),
                "lost_events": t.lost_events,
                "false_finished": t.false_finished,
                "tracebacks": t.tracebacks,
                "hung_runs": t.hung_runs,
                "refused_records": t.refused_records,
                "leftover_pending_files": t.leftover_pending_files,
                "invocations": t.invocations,
                "kills": options.kills,
                "seed": options.seed,
                "seconds": round(time.monotonic() - started, 1),
                "load_start": [round(x, 2) for x in load_start],
                "load_end": [round(x, 2) for x in os.getloadavg()],
                "case_results": results,
            }
        )
    )


if __name__ == "__main__":
    main()
