"""The sandboxed file tools: confinement (attack table, TOCTOU race) and normal use."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from tests.corpora import paths as corpus
from tests.corpora.paths import ATTACKS, LEGITIMATE, Layout, PathCase, build_layout
from tether.content import JsonObject, ToolResult, content_text
from tether.errors import ConfigError, ModelRetry
from tether.tools import Tool, ToolAnnotations, ToolContext
from tether.tools.builtin import _confine
from tether.tools.builtin.files import file_tools
from tether.tools.function import tool

CTX = ToolContext(run_id="run", call_id="call", tool="files")


async def call(t: Tool, arguments: JsonObject) -> ToolResult:
    return await t.handler(CTX, t.validator(arguments))


def tools(root: object, **kw: object) -> dict[str, Tool]:
    return {t.name: t for t in file_tools(root, **kw)}  # pyright: ignore[reportArgumentType]


async def text(t: Tool, arguments: JsonObject) -> str:
    result = await call(t, arguments)
    assert not result.is_error
    return content_text(result.content)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return build_layout(tmp_path)


# -- the attack table: refused, and nothing outside read or changed -----------------------------


@pytest.mark.parametrize("case", ATTACKS, ids=[c.name for c in ATTACKS])
async def test_attack_is_refused_without_effect(layout: Layout, case: PathCase) -> None:
    result = await corpus.run_case(layout, case)
    assert result.refused, result.detail
    assert not result.escaped, result.detail
    assert (layout.outside / "victim.txt").read_text() == layout.victim
    assert (layout.outside / layout.secret_name).read_text() == layout.secret + "\n"


@pytest.mark.parametrize("case", LEGITIMATE, ids=[c.name for c in LEGITIMATE])
async def test_legitimate_use_works(layout: Layout, case: PathCase) -> None:
    result = await corpus.run_case(layout, case)
    assert not result.refused, result.detail
    assert not result.escaped, result.detail


async def test_corpus_has_enough_cases_and_all_pass(tmp_path: Path) -> None:
    results = await corpus.run_corpus(tmp_path)
    attacks = [r for r in results if r.attack]
    assert len(attacks) >= 25
    assert len(results) - len(attacks) >= 10
    assert [r.name for r in results if not r.ok] == []


def _naive_tools(root: Path | dict[str, Path], follow_symlinks: bool = False) -> list[Tool]:
    """A deliberately unconfined read/write/list, to show the corpus notices an escape."""
    base = root if isinstance(root, Path) else root["main"]

    def read_file(path: str) -> str:
        """Read."""
        return (base / path).read_text()

    def write_file(path: str, content: str, create_dirs: bool = True) -> str:
        """Write."""
        (base / path).write_text(content)
        return "ok"

    def list_files(path: str = ".", depth: int = 1) -> str:
        """List."""
        return "\n".join(os.listdir(base / path))

    return [tool(f) for f in (read_file, write_file, list_files)]


async def test_corpus_observes_escapes_of_a_naive_tool(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(corpus, "file_tools", _naive_tools)
    by_name = {c.name: c for c in ATTACKS}
    for name in (
        "dotdot to outside",
        "absolute path outside",
        "relative dir symlink out",
        "hard link to outside secret",
        "write dotdot victim",
        "write through dir symlink",
        "list dir symlink out",
    ):
        result = await corpus.run_case(layout, by_name[name])
        assert result.escaped, name
        assert not result.ok, name


# -- TOCTOU: a directory swapped for a symlink while the tools work --------------------------


def _swap_loop(root: Path, stop: threading.Event) -> None:
    race, real, link = root / "race", root / ".race_dir", root / ".race_link"
    while not stop.is_set():
        for src, dst in ((race, real), (link, race), (race, link), (real, race)):
            with contextlib.suppress(OSError):
                os.rename(src, dst)


@pytest.mark.parametrize("follow", [False, True])
def test_toctou_swap_never_opens_outside(layout: Layout, follow: bool) -> None:
    root = _confine.Root.at(layout.root)
    stop = threading.Event()
    swapper = threading.Thread(target=_swap_loop, args=(layout.root, stop), daemon=True)
    swapper.start()
    opened = refused = 0
    deadline = time.monotonic() + 8
    try:
        # run until both outcomes were seen many times (the race really happened)
        while (opened < 20 or refused < 20) and time.monotonic() < deadline:
            try:
                fd = _confine.open_beneath(root, "race/target.txt", follow_symlinks=follow)
            except ModelRetry:
                refused += 1
                continue
            try:
                where = _confine.fd_path(fd)
                assert where is not None
                assert _confine.is_beneath(where, str(layout.root)), where
                assert os.read(fd, 100) == b"DECOY\n"
                opened += 1
            finally:
                os.close(fd)
    finally:
        stop.set()
        swapper.join()
    assert opened >= 20
    assert refused >= 20


@pytest.mark.parametrize("follow", [False, True])
async def test_toctou_swap_through_the_tools(layout: Layout, follow: bool) -> None:
    result = await corpus.run_race(layout, seconds=1.5, follow=follow)
    assert result.ok, result.detail
    assert (layout.outside / "race_target" / "victim.txt").read_text() == layout.victim


# -- normal use ---------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    (r / "sub").mkdir(parents=True)
    (r / "a.txt").write_text("one\ntwo\nthree\nfour\n")
    (r / "sub" / "b.py").write_text("import os\nprint('hi')\n")
    return r


def test_annotations_are_honest(root: Path) -> None:
    t = tools(root)
    assert list(t) == ["read_file", "write_file", "list_files", "search_files"]
    # what the files say was not written by the developer unless they vouch for the root
    assert t["read_file"].annotations == ToolAnnotations(
        read_only=True, idempotent=True, open_world=False, untrusted_output=True
    )
    assert t["write_file"].annotations == ToolAnnotations(
        read_only=False, destructive=True, idempotent=True, open_world=False
    )
    for name in ("list_files", "search_files"):
        assert t[name].annotations.is_read_only
        assert not t[name].annotations.is_open_world
        assert t[name].annotations.is_untrusted_output
    assert all(tool_.definition.builtin for tool_ in t.values())
    trusted = {x.name: x for x in file_tools(root, trusted=True)}
    assert not any(x.annotations.is_untrusted_output for x in trusted.values())


async def test_read_whole_range_and_offset(root: Path) -> None:
    read = tools(root)["read_file"]
    assert await text(read, {"path": "a.txt"}) == "one\ntwo\nthree\nfour\n"
    assert await text(read, {"path": "a.txt", "start_line": 2, "end_line": 3}) == (
        "two\nthree\n\n[lines 2-3]"
    )
    assert (await text(read, {"path": "a.txt", "start_line": 4})).startswith("four\n")
    assert "only 4 lines" in await text(read, {"path": "a.txt", "start_line": 9})
    assert (await text(read, {"path": "a.txt", "offset": 4, "limit": 3})).startswith("two\n[")
    result = await call(read, {"path": "sub/b.py"})
    assert result.structured == {
        "path": "sub/b.py",
        "size": 22,
        "offset": 0,
        "bytes": 22,
        "truncated": False,
    }


async def test_read_argument_mistakes_ask_the_model_to_retry(root: Path) -> None:
    read = tools(root)["read_file"]
    for args in (
        {"path": "a.txt", "start_line": 1, "offset": 2},
        {"path": "a.txt", "start_line": 0},
        {"path": "a.txt", "start_line": 3, "end_line": 2},
        {"path": "a.txt", "offset": -1},
        {"path": "missing.txt"},
        {"path": "sub"},
        {"path": "a.txt/x"},
    ):
        with pytest.raises(ModelRetry):
            await call(read, args)  # pyright: ignore[reportArgumentType]


async def test_read_caps_binary_empty_and_bad_utf8(root: Path) -> None:
    (root / "big.txt").write_text("x" * 100)
    (root / "bin").write_bytes(b"ab\x00cd")
    (root / "empty").write_bytes(b"")
    (root / "latin").write_bytes(b"caf\xe9\n")
    read = tools(root, max_read_bytes=10)["read_file"]
    result = await call(read, {"path": "big.txt"})
    assert (
        content_text(result.content) == "x" * 10 + "\n[bytes 0-10 of 100; read on with offset=10]"
    )
    assert result.structured is not None
    assert (await text(read, {"path": "big.txt", "offset": 95})).startswith("xxxxx\n[bytes 95-100")
    lines = await text(
        tools(root, max_read_bytes=9)["read_file"], {"path": "a.txt", "start_line": 1}
    )
    assert lines.startswith("one\ntwo\n\n[lines 1-2; cut at 9 bytes")
    assert "binary file (5 bytes)" in await text(read, {"path": "bin"})
    assert "is empty" in await text(read, {"path": "empty"})
    assert await text(read, {"path": "latin"}) == "caf\ufffd\n"


async def test_write_creates_replaces_and_is_atomic(root: Path) -> None:
    t = tools(root)
    write = t["write_file"]
    assert "created 'new/deeper/c.txt'" in await text(
        write, {"path": "new/deeper/c.txt", "content": "héllo"}
    )
    assert (root / "new" / "deeper" / "c.txt").read_text() == "héllo"
    os.chmod(root / "a.txt", 0o600)
    old_inode = (root / "a.txt").stat().st_ino
    result = await call(write, {"path": "a.txt", "content": "replaced"})
    assert result.structured == {"path": "a.txt", "bytes": 8, "created": False}
    assert (root / "a.txt").read_text() == "replaced"
    assert (root / "a.txt").stat().st_ino != old_inode  # renamed into place, not rewritten
    assert stat.S_IMODE((root / "a.txt").stat().st_mode) == 0o600
    assert [p.name for p in root.rglob(".tether-*")] == []
    with pytest.raises(ModelRetry, match="no such directory"):
        await call(write, {"path": "nope/x.txt", "content": "x", "create_dirs": False})
    assert not (root / "nope").exists()
    with pytest.raises(ModelRetry, match="is a directory"):
        await call(write, {"path": "sub", "content": "x"})


async def test_a_refused_write_leaves_no_directories_behind(root: Path) -> None:
    write = tools(root)["write_file"]
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    for path in ("a/b/c/../../../../x", "new/a.txt/../../../x", "n1/n2/" + "n/" * 300 + "x"):
        with pytest.raises(ModelRetry):
            await call(write, {"path": path, "content": "x"})
        assert sorted(p.relative_to(root) for p in root.rglob("*")) == before, path
    (root / "kept").mkdir()
    os.symlink("/etc", root / "kept" / "out")  # refused where the walk meets the link
    with pytest.raises(ModelRetry):
        await call(write, {"path": "kept/fresh/../out/x", "content": "x"})
    assert sorted(p.name for p in (root / "kept").iterdir()) == ["out"]


async def test_write_refuses_over_the_cap_and_leaves_the_file(root: Path) -> None:
    write = tools(root, max_write_bytes=5)["write_file"]
    with pytest.raises(ModelRetry, match="limit is 5"):
        await call(write, {"path": "a.txt", "content": "123456"})
    assert (root / "a.txt").read_text() == "one\ntwo\nthree\nfour\n"
    assert "5 bytes" in await text(write, {"path": "a.txt", "content": "12345"})


async def test_write_replaces_a_raced_symlink_instead_of_writing_through(
    tmp_path: Path, root: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("orig")
    dir_fd, name = _confine.parent_beneath(_confine.Root.at(root), "a.txt")
    try:
        # the check is passed; now an attacker swaps the entry for a link to the victim
        (root / "a.txt").unlink()
        (root / "a.txt").symlink_to(victim)
        from tether.tools.builtin.files import _write_atomic  # pyright: ignore[reportPrivateUsage]

        _write_atomic(dir_fd, name, b"new", 0o644)
    finally:
        os.close(dir_fd)
    assert victim.read_text() == "orig"
    assert not (root / "a.txt").is_symlink()
    assert (root / "a.txt").read_text() == "new"


async def test_list_types_sizes_depth_and_cap(root: Path) -> None:
    (root / "link").symlink_to("a.txt")
    t = tools(root)
    assert await text(t["list_files"], {}) == "a.txt  19 B\nlink  (symlink)\nsub/"
    deep = await call(t["list_files"], {"path": ".", "depth": 2})
    assert content_text(deep.content).splitlines()[-1] == "sub/b.py  22 B"
    capped = await text(tools(root, max_list_entries=2)["list_files"], {"depth": 3})
    assert capped.splitlines()[:2] == ["a.txt  19 B", "link  (symlink)"]
    assert "stopped at 2 entries" in capped
    assert await text(t["list_files"], {"path": "sub"}) == "sub/b.py  22 B"
    with pytest.raises(ModelRetry):
        await call(t["list_files"], {"depth": 0})


async def test_search_literal_regex_glob_case_and_cap(root: Path) -> None:
    search = tools(root)["search_files"]
    assert await text(search, {"pattern": "print("}) == "sub/b.py:2: print('hi')"
    assert (
        await text(search, {"pattern": r"^t\w+$", "regex": True}) == "a.txt:2: two\na.txt:3: three"
    )
    assert (
        await text(search, {"pattern": "i", "glob": "*.py"})
        == "sub/b.py:1: import os\nsub/b.py:2: print('hi')"
    )
    assert await text(search, {"pattern": "ONE", "ignore_case": True}) == "a.txt:1: one"
    assert await text(search, {"pattern": "zzz"}) == "no matches"
    with pytest.raises(ModelRetry, match="the glob is longer than"):  # fnmatch: quadratic
        await call(search, {"pattern": "i", "glob": "[a-" * 30_000})
    capped = await call(tools(root, max_search_matches=2)["search_files"], {"pattern": "o"})
    assert content_text(capped.content).count("\n") == 2
    assert capped.structured is not None
    for bad in (
        {"pattern": "(", "regex": True},
        {"pattern": "", "regex": False},
        {"pattern": "x" * 1001},
    ):
        with pytest.raises(ModelRetry):
            await call(search, bad)  # pyright: ignore[reportArgumentType]


async def test_search_skips_binary_and_oversized_files(root: Path) -> None:
    (root / "bin").write_bytes(b"needle\x00")
    (root / "huge.txt").write_text("needle " * 100)
    (root / "ok.txt").write_text("needle\n")
    search = tools(root, max_read_bytes=50)["search_files"]
    assert await text(search, {"pattern": "needle"}) == "ok.txt:1: needle"


async def test_multiple_roots(tmp_path: Path, root: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "d.md").write_text("# doc\n")
    t = tools({"code": root, "docs": docs})
    assert await text(t["read_file"], {"path": "docs/d.md"}) == "# doc\n"
    assert await text(t["read_file"], {"path": "code/a.txt", "end_line": 1}) == "one\n\n[lines 1-1]"
    await call(t["write_file"], {"path": "docs/new.md", "content": "n"})
    assert (docs / "new.md").read_text() == "n"
    assert "docs/d.md:1: # doc" in await text(t["search_files"], {"pattern": "doc"})
    with pytest.raises(ModelRetry, match="start it with one of code, docs"):
        await call(t["read_file"], {"path": "a.txt"})
    with pytest.raises(ModelRetry, match="names a root"):
        await call(t["write_file"], {"path": "docs", "content": "x"})


def test_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not an accessible directory"):
        file_tools(tmp_path / "missing")
    (tmp_path / "f").write_text("")
    with pytest.raises(ConfigError):
        file_tools(tmp_path / "f")
    with pytest.raises(ConfigError, match="at least one root"):
        file_tools({})
    for name in ("", "a/b", "..", ".", "x\n"):
        with pytest.raises(ConfigError, match="plain name"):
            file_tools({name: tmp_path})
    with pytest.raises(ConfigError, match="max_read_bytes"):
        file_tools(tmp_path, max_read_bytes=0)


async def test_a_replaced_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.txt").write_text("old root")
    read = tools(root)["read_file"]
    root.rename(tmp_path / "moved")
    root.mkdir()
    (root / "a.txt").write_text("impostor")
    with pytest.raises(ModelRetry, match="replaced"):
        await call(read, {"path": "a.txt"})


def test_split_path_and_is_beneath() -> None:
    assert _confine.split_path("./a//b/./c/") == ("a", "b", "c")
    assert _confine.split_path("a/../b") == ("a", "..", "b")
    assert _confine.split_path("") == ()
    assert _confine.is_beneath("/data/root/x", "/data/root")
    assert _confine.is_beneath("/data/root", "/data/root")
    assert not _confine.is_beneath("/data/root2/x", "/data/root")
    assert not _confine.is_beneath("/data", "/data/root")
    for bad in ("/abs", "a\x00b", "a\tb", "\x7f", "a\x85b", "\ud800", "a" * 4097, "b" * 256):
        with pytest.raises(ModelRetry):
            _confine.split_path(bad)


async def test_a_catastrophic_regex_cannot_stall_the_search(tmp_path: Path) -> None:
    """``(a+)+$`` backtracks exponentially in Python's ``re``; RE2 answers in linear time."""
    (tmp_path / "a.txt").write_text("a" * 60 + "b\n")
    search = {t.name: t for t in file_tools(tmp_path)}["search_files"]
    started = time.monotonic()
    result = await search.handler(CTX, search.validator({"pattern": "(a+)+$", "regex": True}))
    assert time.monotonic() - started < 30  # with re: 2**60 steps, never ends
    assert not result.is_error
    with pytest.raises(ModelRetry, match="no backreferences"):
        await search.handler(CTX, search.validator({"pattern": r"(a)\1", "regex": True}))


async def test_a_line_longer_than_the_cap_shows_its_start(tmp_path: Path) -> None:
    # a minified JSON file read by lines said "[the file has only 0 lines]" (and a 60 MB one
    # took 20 s: every chunk re-split what was buffered)
    (tmp_path / "min.json").write_bytes(b'{"a":' + b"1," * 1_000_000 + b"2}\n{}\n")
    read = tools(tmp_path, max_read_bytes=1000)["read_file"]
    result = await call(read, {"path": "min.json", "start_line": 1})
    assert not result.is_error
    shown = content_text(result.content)
    assert shown.startswith('{"a":1,1,')
    assert "line 1 is longer than 1000 bytes" in shown
    assert isinstance(result.structured, dict)
    assert result.structured["end_line"] == 1
    assert await text(read, {"path": "min.json", "start_line": 2}) == "{}\n\n[lines 2-2]"
    with pytest.raises(ModelRetry, match="is past the end of the file"):
        await call(read, {"path": "min.json", "offset": 10**20})
