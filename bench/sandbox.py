"""Every attack corpus, run once: how many attacks escaped, and what the defences cost.

Runs the corpora in ``tests/corpora`` (``paths``, ``shell``, ``http``, ``injection``) one
after another, each in its own temporary directory (the http corpus patches socket globals
while it runs, so they never run concurrently). Every case is judged by its observed effect.

Prints one JSON line: cases, attacks, escapes (must be 0), blocked_legitimate (legitimate
cases refused: for ``injection``, the provenance rule's cost), failed (cases not ok), the
same per area, and seconds. The injection area includes the two injections the coarse
provenance rule missed (``former_gaps``: an instruction in a file ``read_file`` returned,
exfiltration through a read-only ``http_get``), counted like every other attack. Exit code 1 if any attack escaped; the
escaped cases are listed on stderr.

    python bench/sandbox.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the corpora live in the test tree, not in the package

from tests.corpora import CaseResult, http, injection, paths, shell  # noqa: E402

Corpus = Callable[[Path], Awaitable[list[CaseResult]]]
CORPORA: dict[str, Corpus] = {
    "paths": paths.run_corpus,
    "shell": shell.run_corpus,
    "http": http.run_corpus,
    "injection": injection.run_corpus,
}


def counts(results: list[CaseResult]) -> dict[str, int]:
    """The totals of one area (or of all)."""
    attacks = [r for r in results if r.attack]
    return {
        "cases": len(results),
        "attacks": len(attacks),
        "escapes": sum(r.escaped for r in attacks),
        "legitimate": len(results) - len(attacks),
        "blocked_legitimate": sum(r.refused for r in results if not r.attack),
        "failed": sum(not r.ok for r in results),
    }


async def run(name: str, corpus: Corpus) -> tuple[list[CaseResult], float]:
    with tempfile.TemporaryDirectory(prefix=f"tether-sandbox-{name}-") as tmp:
        started = time.perf_counter()
        results = await corpus(Path(tmp))
        return results, time.perf_counter() - started


async def measure(areas: list[str]) -> dict[str, Any]:
    everything: list[CaseResult] = []
    per_area: dict[str, dict[str, Any]] = {}
    for name in areas:  # one after another: never two corpora at once
        results, seconds = await run(name, CORPORA[name])
        everything += results
        per_area[name] = {**counts(results), "seconds": round(seconds, 2)}
        for r in results:
            if r.attack and r.escaped:
                print(f"ESCAPED {name}: {r.name}: {r.detail}", file=sys.stderr)
    if "injection" in areas:
        gaps, seconds = await run("injection-gaps", injection.run_gaps)
        everything += gaps
        area = per_area["injection"]
        per_area["injection"] = {
            **counts([r for r in everything if r.area == "injection"]),
            "seconds": round(area["seconds"] + seconds, 2),
            "former_gaps": {
                "cases": len(gaps),
                "escaped": sum(r.escaped for r in gaps),
                "names": [r.name for r in gaps],
            },
        }
        for r in gaps:
            if r.escaped:
                print(f"ESCAPED injection: {r.name}: {r.detail}", file=sys.stderr)
    return {"total": counts(everything), "areas": per_area}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--only", choices=sorted(CORPORA), action="append", help="run only this corpus"
    )
    args = parser.parse_args()
    areas: list[str] = args.only or list(CORPORA)
    started = time.perf_counter()
    measured = asyncio.run(measure(areas))
    seconds = time.perf_counter() - started
    total = measured["total"]
    print(
        json.dumps(
            {
                "bench": "sandbox",
                **total,
                "areas": measured["areas"],
                "seconds": round(seconds, 2),
            }
        )
    )
    sys.exit(1 if total["escapes"] else 0)


if __name__ == "__main__":
    main()
