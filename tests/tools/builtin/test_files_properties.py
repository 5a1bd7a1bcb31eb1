"""Properties of path confinement over random trees of files, directories and symlinks.

Whatever the tree and the path, a descriptor ``_confine`` hands out points under the root (as
the kernel reports it in ``/proc/self/fd``), and matches what the kernel itself would resolve;
the tools never return outside content and never change anything outside.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.content import content_text
from tether.errors import ModelRetry
from tether.tools import Tool, ToolContext
from tether.tools.builtin import _confine, files
from tether.tools.builtin.files import file_tools

CTX = ToolContext(run_id="run", call_id="call", tool="files")
NAMES = ["a", "b", "c", "l0", "l1", "l2", "l3"]
OUTSIDE = "OUTSIDE-CONTENT"


@dataclass(frozen=True)
class Link:
    at: str
    name: str
    base: str  # "rel", "root", "out", "sibling" or "slash"
    target: str


components = st.sampled_from([*NAMES, "..", ".", ""])
rel_paths = st.lists(components, min_size=1, max_size=6).map("/".join)
dirs = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3).map("/".join)
links = st.builds(
    Link,
    at=st.one_of(st.just(""), dirs),
    name=st.sampled_from(["l0", "l1", "l2", "l3"]),
    base=st.sampled_from(["rel", "rel", "rel", "root", "out", "sibling", "slash"]),
    target=rel_paths,
)


@dataclass
class Tree:
    base: Path
    root: Path
    outside: Path


def build(dir_list: list[str], files: list[str], link_list: list[Link], hard: bool) -> Tree:
    base = Path(tempfile.mkdtemp()).resolve()
    root, outside, sibling = base / "root", base / "out", base / "root2"
    for d in (root, outside, sibling):
        d.mkdir()
    for d in (outside, sibling):
        for n in NAMES:
            (d / n).write_text(OUTSIDE)
    for d in dir_list:
        (root / d).mkdir(parents=True, exist_ok=True)
    for f in files:
        p = root / f
        if p.parent.is_dir() and not p.exists() and not p.is_symlink():
            p.write_text(f"INSIDE {f}")
    for link in link_list:
        where = root / link.at if link.at else root
        p = where / link.name
        if not where.is_dir() or where.is_symlink() or p.exists() or p.is_symlink():
            continue
        prefix = {
            "rel": "",
            "root": f"{root}/",
            "out": f"{outside}/",
            "sibling": f"{sibling}/",
            "slash": "/",
        }[link.base]
        p.symlink_to(prefix + link.target or ".")
    if hard:
        os.link(outside / "a", root / "hard")
    return Tree(base=base, root=root, outside=outside)


def outside_state(tree: Tree) -> dict[str, bytes]:
    return {
        str(p): p.read_bytes()
        for d in (tree.outside, tree.base / "root2")
        for p in sorted(d.iterdir())
    } | {"entries": "\n".join(sorted(os.listdir(tree.base))).encode()}


def expected_without_links(root: Path, path: str) -> bool:
    """Whether a relative path with no symlink on its way, never above the root, names a plain
    file (the kernel's own walk, step by step, must then agree)."""
    if path.startswith("/"):
        return False
    stack: list[str] = []
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for i, part in enumerate(parts):
        if part == "..":
            if not stack:
                return False
            stack.pop()
            continue
        stack.append(part)
        here = root.joinpath(*stack)
        if here.is_symlink() or (i < len(parts) - 1 and not here.is_dir()):
            return False
    try:
        info = os.lstat(root.joinpath(*stack))
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink == 1


def check_fd(fd: int, tree: Tree, path: str) -> None:
    where = _confine.fd_path(fd)
    assert where is not None
    assert _confine.is_beneath(where, str(tree.root)), (path, where)
    # the walk resolves as the kernel would, whenever it allows the path at all
    assert where == os.path.realpath(tree.root / path), (path, where)


async def call(t: Tool, arguments: dict[str, object]) -> str:
    try:
        result = await t.handler(CTX, t.validator(arguments))  # pyright: ignore[reportArgumentType]
    except ModelRetry as exc:
        return exc.message
    return content_text(result.content) + repr(result.structured)


async def use_the_tools(tree: Tree, probe: list[str]) -> list[str]:
    """Everything the tools answered to reads, writes, listings and searches of ``probe``."""
    seen: list[str] = []
    for follow in (False, True):
        read, write, list_, search = file_tools(tree.root, follow_symlinks=follow)
        for path in probe:
            seen.append(await call(read, {"path": path}))
            seen.append(await call(write, {"path": path, "content": "WRITTEN"}))
            seen.append(await call(list_, {"path": path, "depth": 4}))
        seen.append(await call(search, {"pattern": "OUTSIDE"}))
    return seen


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    dir_list=st.lists(dirs, max_size=4),
    files=st.lists(st.tuples(dirs, st.sampled_from(NAMES)).map("/".join), max_size=5),
    link_list=st.lists(links, max_size=6),
    hard=st.booleans(),
    probe=st.lists(rel_paths, min_size=1, max_size=4),
)
def test_opened_descriptors_stay_under_the_root(
    dir_list: list[str], files: list[str], link_list: list[Link], hard: bool, probe: list[str]
) -> None:
    tree = build(dir_list, files, link_list, hard)
    try:
        root = _confine.Root.at(tree.root)
        before = outside_state(tree)
        for path in probe:
            for follow in (False, True):
                for kind in ("file", "directory"):
                    try:
                        fd = _confine.open_beneath(root, path, kind=kind, follow_symlinks=follow)
                    except ModelRetry:
                        if kind == "file" and not follow:
                            assert not expected_without_links(tree.root, path), path
                        continue
                    try:
                        check_fd(fd, tree, path)
                        if kind == "file":
                            assert os.read(fd, 100).startswith(b"INSIDE"), path
                    finally:
                        os.close(fd)
                try:
                    dir_fd, name = _confine.parent_beneath(root, path, follow_symlinks=follow)
                except ModelRetry:
                    continue
                try:
                    where = _confine.fd_path(dir_fd)
                    assert where is not None
                    assert _confine.is_beneath(where, str(tree.root)), (path, where)
                    assert name not in ("", ".", "..")
                    assert "/" not in name
                finally:
                    os.close(dir_fd)
        for answer in asyncio.run(use_the_tools(tree, probe)):
            assert OUTSIDE not in answer
        assert outside_state(tree) == before
    finally:
        shutil.rmtree(tree.base)


def _reference_lines(data: bytes) -> list[bytes]:
    return re.findall(rb"[^\n]*\n|[^\n]+\Z", data)


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(
        st.sampled_from([b"a", b"\n", b"\r\n", b"bc", b"\n\n", b"xyz\r"]), max_size=60
    ).map(b"".join),
    chunk=st.integers(1, 9),
    keep=st.integers(1, 15),
)
def test_lines_are_the_files_lines_each_cut_to_keep(data: bytes, chunk: int, keep: int) -> None:
    # read in chunks of any size, in linear time (the old reader re-split what it buffered)
    fd, path = tempfile.mkstemp()
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        with patch.object(files, "_CHUNK", chunk):
            got = list(files._Reader(fd).lines(keep))  # pyright: ignore[reportPrivateUsage]
        assert got == [line[:keep] for line in _reference_lines(data)]
    finally:
        os.close(fd)
        os.unlink(path)
