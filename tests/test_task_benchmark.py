"""``bench/tasks.py``'s checkers can fail and can pass: each task is checkable and doable."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "tasks.py"


def test_every_task_fails_untouched_and_passes_when_its_calls_are_made() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--self-check"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    assert measured == {"tasks": measured["tasks"], "problems": []}
    assert measured["tasks"] >= 30
