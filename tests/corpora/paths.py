"""Path attacks (and legitimate uses) against the sandboxed file tools.

Each case runs through the real tools built by ``file_tools``. Its verdict is observed: a case
escaped if the secret planted outside the root (or its file name) shows up in the result, or if
anything outside the roots (the secret, the victim, the sibling ``root2``) was created, changed
or removed. ``refused`` means the tool answered with ``ModelRetry`` or an error result; for the
few search/list attacks over a whole tree, whose correct answer is to leave the links out,
``refused`` means the outside content was withheld.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from tests.corpora import CaseResult
from tether.content import ToolResult, content_text
from tether.errors import ModelRetry
from tether.jsontypes import JsonObject
from tether.tools import Tool, ToolContext
from tether.tools.builtin.files import file_tools

__all__ = [
    "ATTACKS",
    "LEGITIMATE",
    "Layout",
    "PathCase",
    "build_layout",
    "run_case",
    "run_corpus",
    "run_race",
]

_CTX = ToolContext(run_id="corpus", call_id="paths", tool="files")

ToolName = Literal["read_file", "write_file", "list_files", "search_files"]


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A workdir with a root, a sibling sharing its prefix, and a secret and victim outside."""

    base: Path
    """The workdir everything lives in."""
    root: Path
    """The root the tools are confined to."""
    docs: Path
    """A second root, for the multi-root cases."""
    outside: Path
    """A directory outside every root, holding the secret and the victim."""
    secret_name: str
    """The secret file's name (unique, so a listing that shows it is caught)."""
    secret: str
    """The secret's content."""
    victim: str
    """The victim's original content."""

    def snapshot(self) -> dict[str, tuple[int, int, int, bytes]]:
        """Everything outside the roots: path -> (inode, mode, mtime, content or link target)."""
        seen: dict[str, tuple[int, int, int, bytes]] = {}
        for dirpath, dirnames, filenames in os.walk(self.base):
            here = Path(dirpath)
            if here in (self.root, self.docs):
                dirnames.clear()
                continue
            for name in (*dirnames, *filenames):
                p = here / name
                if p in (self.root, self.docs):
                    continue
                st = p.lstat()
                if p.is_symlink():
                    data = os.readlink(p).encode()
                elif p.is_file():
                    data = p.read_bytes()
                else:
                    data = b""
                seen[str(p.relative_to(self.base))] = (st.st_ino, st.st_mode, st.st_mtime_ns, data)
        return seen


def build_layout(workdir: Path) -> Layout:
    """Plant the tree every case runs against (see the module docstring)."""
    token = secrets.token_hex(6)
    base = (workdir / f"paths-{token}").resolve()
    root, docs, outside, sibling = base / "root", base / "docs", base / "outside", base / "root2"
    race_target = outside / "race_target"
    for d in (root / "sub" / "deep", docs, race_target, sibling, root / ".race_dir"):
        d.mkdir(parents=True)
    secret_name = f"secret-{token}.txt"
    layout = Layout(
        base=base,
        root=root,
        docs=docs,
        outside=outside,
        secret_name=secret_name,
        secret=f"TOP-SECRET-{token}",
        victim=f"VICTIM-{token}",
    )
    (outside / secret_name).write_text(layout.secret + "\n")
    (outside / "victim.txt").write_text(layout.victim)
    (sibling / secret_name).write_text(layout.secret + "\n")
    (root / "notes.txt").write_text("alpha\nbeta\ngamma\ndelta\n")
    (root / "sub" / "inner.txt").write_text("inner text\n")
    (root / "sub" / "deep" / "code.py").write_text("def f():\n    return 42\n")
    (root / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    (race_target / "target.txt").write_text(layout.secret + "\n")
    (race_target / "victim.txt").write_text(layout.victim)
    (root / ".race_dir" / "target.txt").write_text("DECOY\n")
    (docs / "a.txt").write_text("docs a\n")
    links = {
        "link_out": "../outside",
        "abs_out": str(outside),
        "link_secret": f"../outside/{secret_name}",
        "abs_secret": str(outside / secret_name),
        "sibling": "../root2",
        "abs_sibling": str(sibling / secret_name),
        "chain1": "chain2",
        "chain2": "chain3",
        "chain3": f"../outside/{secret_name}",
        "loop_a": "loop_b",
        "loop_b": "loop_a",
        "self": "self",
        "sub/up": "..",
        "sub/upup": "../..",
        "link_in": "notes.txt",
        "abs_in": str(root / "notes.txt"),
        "dangling_out": "../outside/created-by-attack.txt",
        "proc_root": "/proc/self/root",
        ".race_link": str(race_target),
    }
    for name, target in links.items():
        (root / name).symlink_to(target)
    os.link(outside / secret_name, root / "hard_secret")
    os.link(outside / "victim.txt", root / "hard_victim")
    os.mkfifo(root / "fifo")
    (root / ".race_dir").rename(root / "race")
    return layout


@dataclass(frozen=True, kw_only=True)
class PathCase:
    """One call of one tool; string arguments may use ``{OUT}``, ``{W}`` and ``{S}``."""

    name: str
    """The case, in a few words."""
    tool: ToolName
    """The tool called."""
    args: dict[str, object]
    """Its arguments (placeholders: outside dir, workdir, secret file name)."""
    attack: bool = True
    """Whether it must be refused."""
    follow: bool = False
    """Build the tools with ``follow_symlinks=True``."""
    multi: bool = False
    """Build the tools with two named roots, ``main`` and ``docs``."""
    withheld_is_refusal: bool = False
    """A whole-tree search or listing: leaving the outside content out is the refusal."""
    expect: str = ""
    """For a legitimate case: text the result must contain."""


def _c(name: str, tool: ToolName, **kw: object) -> PathCase:
    args = {k: v for k, v in kw.items() if k not in ("follow", "multi", "withheld", "expect")}
    return PathCase(
        name=name,
        tool=tool,
        args=args,
        follow=bool(kw.get("follow", False)),
        multi=bool(kw.get("multi", False)),
        withheld_is_refusal=bool(kw.get("withheld", False)),
        expect=str(kw.get("expect", "")),
        attack=not kw.get("expect"),
    )


ATTACKS: list[PathCase] = [
    _c("dotdot to outside", "read_file", path="../outside/{S}"),
    _c("dotdot after a subdir", "read_file", path="sub/../../outside/{S}"),
    _c("dotdot deep", "read_file", path="sub/deep/../../../outside/{S}"),
    _c("dotdot to prefix sibling", "read_file", path="../root2/{S}"),
    _c("absolute path outside", "read_file", path="{OUT}/{S}"),
    _c("absolute /etc/passwd", "read_file", path="/etc/passwd"),
    _c("double-slash absolute", "read_file", path="//etc/passwd"),
    _c("relative dir symlink out", "read_file", path="link_out/{S}"),
    _c("relative dir symlink out, following", "read_file", path="link_out/{S}", follow=True),
    _c("absolute dir symlink out, following", "read_file", path="abs_out/{S}", follow=True),
    _c("file symlink out", "read_file", path="link_secret"),
    _c("file symlink out, following", "read_file", path="link_secret", follow=True),
    _c("absolute file symlink out, following", "read_file", path="abs_secret", follow=True),
    _c("symlink to prefix sibling, following", "read_file", path="sibling/{S}", follow=True),
    _c("absolute symlink to prefix sibling", "read_file", path="abs_sibling", follow=True),
    _c("symlink chain out, following", "read_file", path="chain1", follow=True),
    _c("symlink loop, following", "read_file", path="loop_a", follow=True),
    _c("self-referencing symlink", "read_file", path="self", follow=True),
    _c("symlink '../..' out, following", "read_file", path="sub/upup/outside/{S}", follow=True),
    _c("in-root '..' link then '..'", "read_file", path="sub/up/../outside/{S}", follow=True),
    _c("/proc/self/root magic link", "read_file", path="proc_root/etc/passwd", follow=True),
    _c("hard link to outside secret", "read_file", path="hard_secret"),
    _c("hard link to outside, following", "read_file", path="hard_secret", follow=True),
    _c("NUL byte", "read_file", path="notes.txt\x00../../outside/{S}"),
    _c("newline in path", "read_file", path="notes.txt\n../outside/{S}"),
    _c("escape character in path", "read_file", path="\x1b[2Jnotes.txt"),
    _c("over-long path", "read_file", path="sub/" * 1200 + "notes.txt"),
    _c("over-long component", "read_file", path="a" * 300),
    _c("FIFO in root", "read_file", path="fifo"),
    _c("write dotdot victim", "write_file", path="../outside/victim.txt", content="PWNED"),
    _c("write absolute victim", "write_file", path="{OUT}/victim.txt", content="PWNED"),
    _c("write through dir symlink", "write_file", path="link_out/victim.txt", content="PWNED"),
    _c(
        "write through dir symlink, following",
        "write_file",
        path="link_out/victim.txt",
        content="PWNED",
        follow=True,
    ),
    _c("write new file via dir symlink", "write_file", path="link_out/new.txt", content="x"),
    _c(
        "write dangling symlink out, following",
        "write_file",
        path="dangling_out",
        content="PWNED",
        follow=True,
    ),
    _c("write dangling symlink out", "write_file", path="dangling_out", content="PWNED"),
    _c("write hard link to victim", "write_file", path="hard_victim", content="PWNED"),
    _c(
        "write mkdir through dotdot",
        "write_file",
        path="new/../../outside/made/x.txt",
        content="x",
        create_dirs=True,
    ),
    _c("list dotdot", "list_files", path=".."),
    _c("list dir symlink out", "list_files", path="link_out"),
    _c("list dir symlink out, following", "list_files", path="link_out", follow=True),
    _c("list absolute", "list_files", path="{OUT}"),
    _c("list whole tree", "list_files", path=".", depth=6, withheld=True),
    _c("search dotdot", "search_files", pattern="SECRET", path=".."),
    _c("search through dir symlink", "search_files", pattern="SECRET", path="link_out"),
    _c("search whole tree", "search_files", pattern="TOP-SECRET", withheld=True),
    _c(
        "search whole tree, following", "search_files", pattern="SECRET", withheld=True, follow=True
    ),
    _c("multi-root: dotdot across roots", "read_file", path="docs/../main/notes.txt", multi=True),
    _c("multi-root: dotdot out", "read_file", path="docs/../../outside/{S}", multi=True),
    _c("multi-root: unknown root", "read_file", path="outside/{S}", multi=True),
    _c("multi-root: absolute", "read_file", path="{OUT}/{S}", multi=True),
]

LEGITIMATE: list[PathCase] = [
    _c("read a file", "read_file", path="notes.txt", expect="gamma"),
    _c("read a line range", "read_file", path="notes.txt", start_line=2, end_line=3, expect="beta"),
    _c("read by offset", "read_file", path="notes.txt", offset=6, limit=4, expect="beta"),
    _c("read through safe dotdot", "read_file", path="sub/../notes.txt", expect="alpha"),
    _c("read nested", "read_file", path="./sub//inner.txt", expect="inner text"),
    _c("write a new file", "write_file", path="out/new.txt", content="fresh", expect="created"),
    _c("overwrite a file", "write_file", path="sub/inner.txt", content="new\n", expect="replaced"),
    _c("list the root", "list_files", path=".", depth=2, expect="sub/inner.txt"),
    _c("search literal", "search_files", pattern="return 42", expect="code.py:2"),
    _c(
        "search regex + glob",
        "search_files",
        pattern=r"ret\w+",
        regex=True,
        glob="*.py",
        expect="42",
    ),
    _c("follow in-root link", "read_file", path="link_in", follow=True, expect="alpha"),
    _c("follow absolute in-root link", "read_file", path="abs_in", follow=True, expect="delta"),
    _c("follow '..' link inside", "read_file", path="sub/up/notes.txt", follow=True, expect="beta"),
    _c("multi-root read", "read_file", path="docs/a.txt", multi=True, expect="docs a"),
    _c("multi-root list roots", "list_files", path=".", multi=True, expect="main/notes.txt"),
]


def _fill(value: object, layout: Layout) -> object:
    if not isinstance(value, str):
        return value
    return (
        value.replace("{OUT}", str(layout.outside))
        .replace("{W}", str(layout.base))
        .replace("{S}", layout.secret_name)
    )


def _tools(layout: Layout, *, follow: bool, multi: bool) -> dict[str, Tool]:
    root: Path | dict[str, Path] = (
        {"main": layout.root, "docs": layout.docs} if multi else layout.root
    )
    return {t.name: t for t in file_tools(root, follow_symlinks=follow)}


async def _call(t: Tool, args: JsonObject) -> tuple[bool, str]:
    """(refused, everything the model would see)."""
    try:
        result: ToolResult = await t.handler(_CTX, t.validator(args))
    except ModelRetry as exc:
        return True, exc.message
    return result.is_error, content_text(result.content) + "\n" + repr(result.structured)


def _leaked(layout: Layout, seen: str, args: JsonObject | None = None) -> bool:
    """Outside content in a result, or the secret's name where the caller did not give it."""
    named = args is not None and any(layout.secret_name in str(v) for v in args.values())
    return (
        layout.secret in seen or layout.victim in seen or (not named and layout.secret_name in seen)
    )


async def run_case(layout: Layout, case: PathCase) -> CaseResult:
    """Run one case and observe its effect."""
    tools = _tools(layout, follow=case.follow, multi=case.multi)
    args = cast(JsonObject, {k: _fill(v, layout) for k, v in case.args.items()})
    before = layout.snapshot()
    try:
        refused, seen = await asyncio.wait_for(_call(tools[case.tool], args), timeout=10)
    except TimeoutError:
        refused, seen = False, "timed out (a FIFO or a loop hung the tool)"
    changed = layout.snapshot() != before
    leaked = _leaked(layout, seen, args)
    if case.withheld_is_refusal:
        refused = refused or not leaked
    if not case.attack and case.expect not in seen:
        refused = True  # it did not do what was asked: count it against the sandbox
    detail = f"refused={refused} leaked={leaked} outside_changed={changed}: {seen[:300]!r}"
    return CaseResult(
        area="paths",
        name=case.name,
        attack=case.attack,
        refused=refused,
        escaped=leaked or changed,
        detail=detail,
    )


def _swapper(layout: Layout, stop: threading.Event) -> Callable[[], None]:
    """Swap ``root/race`` between a real directory and a symlink to outside, fast."""
    race, real, link = layout.root / "race", layout.root / ".race_dir", layout.root / ".race_link"

    def run() -> None:
        while not stop.is_set():
            for src, dst in ((race, real), (link, race), (race, link), (real, race)):
                with contextlib.suppress(OSError):
                    os.rename(src, dst)

    return run


async def run_race(layout: Layout, *, seconds: float, follow: bool) -> CaseResult:
    """TOCTOU: read and write through ``race/`` while another thread swaps it for a symlink."""
    tools = _tools(layout, follow=follow, multi=False)
    read, write = tools["read_file"], tools["write_file"]
    before = layout.snapshot()
    stop = threading.Event()
    thread = threading.Thread(target=_swapper(layout, stop), daemon=True)
    thread.start()
    leaked, calls, inside = False, 0, 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            _, seen = await _call(read, {"path": "race/target.txt"})
            leaked = leaked or _leaked(layout, seen)
            inside += "DECOY" in seen
            await _call(
                write, {"path": "race/victim.txt", "content": "PWNED", "create_dirs": False}
            )
            calls += 2
    finally:
        stop.set()
        thread.join()
    changed = layout.snapshot() != before
    return CaseResult(
        area="paths",
        name=f"TOCTOU dir/symlink swap{', following' if follow else ''}",
        attack=True,
        refused=not leaked,
        escaped=leaked or changed,
        detail=f"{calls} calls, {inside} read the inside decoy; leaked={leaked} changed={changed}",
    )


async def run_corpus(workdir: Path) -> list[CaseResult]:
    """Every attack and legitimate case, each against a fresh view of the same planted tree."""
    layout = build_layout(workdir)
    results = [await run_case(layout, case) for case in ATTACKS]
    results += [await run_race(layout, seconds=0.5, follow=f) for f in (False, True)]
    results += [await run_case(layout, case) for case in LEGITIMATE]
    return results
