"""The ``tether`` command on a full disk, in a process of its own (the limit is per process).

``python -m tests.cli.full_disk now ARGS...`` runs ``tether ARGS...`` with no file allowed to
grow past one byte (``RLIMIT_FSIZE``): the disk is full before the command starts.
``python -m tests.cli.full_disk in-tool ARGS...`` runs it with the disk filling up while the
``fill_disk`` tool of ``AGENT`` or ``GATED`` runs: the run has started, and its next commit
fails. A write past the limit fails with ``EFBIG``, as one past a full disk fails with
``ENOSPC``; both are the store's "disk full".
"""

from __future__ import annotations

import os
import resource
import signal
import sys

from tether import Agent, RulePolicy, allow, require_approval, tool
from tether.testing import ScriptedModel, call, finish

FILL = "TETHER_TEST_FILL_DISK"
"""Set (to ``in-tool``) in the command's process only: ``fill_disk`` then fills the disk."""


def _fill() -> None:
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))


@tool(read_only=True, idempotent=True, open_world=False)
def fill_disk() -> str:
    """Looks at the disk (and, in the command's process, fills it up)."""
    if os.environ.get(FILL) == "in-tool":
        _fill()
    return "the disk is full now"


SCRIPT = [call("fill_disk"), finish("done")]

AGENT = Agent(
    name="filler",
    model=ScriptedModel(SCRIPT),
    tools=[fill_disk],
    policy=RulePolicy(None, allow(["fill_disk"], reason="the test's own tool")),
)
"""Runs ``fill_disk`` at once."""

GATED = Agent(
    name="gated-filler",
    model=ScriptedModel(SCRIPT),
    tools=[fill_disk],
    policy=RulePolicy(None, require_approval("fill_disk", reason="a human decides")),
)
"""Waits for a human's approval before it runs ``fill_disk``."""


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    if mode == "now":
        _fill()
    else:
        os.environ[FILL] = mode
    from tether.cli.app import main as tether

    sys.argv = ["tether", *args]
    tether()


if __name__ == "__main__":
    main()
