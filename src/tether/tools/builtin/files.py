"""File tools confined to one or more root directories: read, write, list and search.

Every path goes through ``_confine``: it is walked from the root with ``openat`` and
``O_NOFOLLOW`` one component at a time, so absolute paths, ``..`` above the root, symlinks
(unless ``follow_symlinks``, and then only within the root), hard-linked files, control
characters and over-long paths are refused, and a directory swapped for a symlink mid-call
cannot redirect it.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import inspect
import os
import re
import secrets
import stat
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import ParamSpec

from tether._internal.linearregex import compile_linear
from tether.content import ToolResult
from tether.errors import ConfigError, ModelRetry
from tether.jsontypes import JsonObject, JsonValue
from tether.tools.base import Tool
from tether.tools.builtin._confine import (
    Root,
    iter_tree,
    open_beneath,
    open_regular_at,
    parent_beneath,
    split_path,
)
from tether.tools.builtin._mark import builtin
from tether.tools.function import tool

__all__ = ["file_tools"]

_BINARY_PROBE = 8192
_MAX_PATTERN = 1000
_MAX_DEPTH = 20
_MAX_SEARCH_ENTRIES = 100_000  # entries one search may visit, so a huge tree cannot stall it
_MAX_LINE_SHOWN = 300
_CHUNK = 1 << 16


@dataclass(frozen=True, kw_only=True)
class _Roots:
    """The configured roots: one unnamed, or several named by a path's first component."""

    roots: Mapping[str, Root]
    """Roots by name (``""`` for the single unnamed root)."""
    follow: bool
    """Whether symlinks are followed (within the root)."""
    trusted: frozenset[str] = frozenset()
    """Names of the roots whose files the user or the developer wrote (``file_tools``)."""

    @property
    def named(self) -> bool:
        return "" not in self.roots

    def locate(self, path: str) -> tuple[Root, tuple[str, ...], str]:
        """The root a path lies in, the components within it, and the path to show."""
        parts = split_path(path)
        shown = "/".join(parts) or "."
        if not self.named:
            return self.roots[""], parts, shown
        if not parts or parts[0] not in self.roots:
            first = parts[0] if parts else ""
            names = ", ".join(sorted(self.roots))
            raise ModelRetry(
                f"path {shown!r} does not start with a root name ({first!r} is not one): "
                f"start it with one of {names}, e.g. '{min(self.roots)}/file.txt'"
            )
        return self.roots[parts[0]], parts[1:], shown


def _vouched(roots: _Roots, func: Callable[_P, ToolResult]) -> Callable[_P, ToolResult]:
    """``func``, whose results say they are trusted when its ``path`` lies in a trusted root.

    ``path`` ``"."`` (every root) is trusted only if every root is.
    """
    if not roots.trusted:
        return func
    signature = inspect.signature(func)

    @functools.wraps(func)
    def vouched(*args: _P.args, **kwargs: _P.kwargs) -> ToolResult:
        result = func(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        parts = split_path(str(bound.arguments["path"]))
        names = set(roots.roots) if not parts else {parts[0]}
        return replace(result, untrusted=False) if names <= roots.trusted else result

    return vouched


def _roots(root: str | Path | Mapping[str, str | Path], follow: bool) -> _Roots:
    if isinstance(root, str | Path):
        return _Roots(roots={"": Root.at(root)}, follow=follow)
    if not root:
        raise ConfigError("file_tools: give at least one root directory")
    for name in root:
        if not name or "/" in name or name in (".", "..") or not name.isprintable():
            raise ConfigError(
                f"file_tools: root name {name!r} must be a plain name (no '/', not '.' or '..')"
            )
    return _Roots(roots={name: Root.at(path) for name, path in root.items()}, follow=follow)


_P = ParamSpec("_P")


def _os_errors(func: Callable[_P, ToolResult]) -> Callable[_P, ToolResult]:
    """An ``OSError`` (the tree changed mid-call, a permission) becomes a ``ModelRetry``."""

    @functools.wraps(func)
    def guarded(*args: _P.args, **kwargs: _P.kwargs) -> ToolResult:
        try:
            return func(*args, **kwargs)
        except OSError as exc:
            raise ModelRetry(f"{func.__name__} failed: {exc.strerror or exc}") from None

    return guarded


def _is_binary(data: bytes) -> bool:
    return b"\0" in data[:_BINARY_PROBE]


# -- read --------------------------------------------------------------------------------------


def _read_lines(f: _Reader, start: int, end: int | None, cap: int) -> tuple[bytes, int, bool]:
    """Lines ``start``..``end`` (1-based, inclusive), at most ``cap`` bytes: data, last, cut.

    A first line longer than ``cap`` gives its first ``cap`` bytes (cut), not nothing.
    """
    out = bytearray()
    number = 0
    for line in f.lines(cap + 1):
        number += 1
        if number < start:
            continue
        if end is not None and number > end:
            return bytes(out), number - 1, False
        if len(out) + len(line) > cap:
            if not out:
                return line[:cap], number, True
            return bytes(out), number - 1, True
        out += line
    return bytes(out), number, False


def _lines_note(first: int, last: int, cut: bool, data: bytes, cap: int) -> str:
    """What a read of lines ``first``..``last`` says after them."""
    if last < first:
        return f"[the file has only {last} lines]"
    if cut and not data.endswith(b"\n"):  # one line longer than the cap
        return (
            f"[line {last} is longer than {cap} bytes: its start is shown; read the rest "
            "with offset and limit]"
        )
    if cut:
        return f"[lines {first}-{last}; cut at {cap} bytes: read on from start_line={last + 1}]"
    return f"[lines {first}-{last}]"


class _Reader:
    """Reads an open descriptor in chunks (no Python file object: it would own the fd)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, n: int) -> bytes:
        parts: list[bytes] = []
        while n > 0:
            chunk = os.read(self.fd, min(n, _CHUNK))
            if not chunk:
                break
            parts.append(chunk)
            n -= len(chunk)
        return b"".join(parts)

    def lines(self, keep: int) -> Iterator[bytes]:
        """The file's lines, each cut to its first ``keep`` bytes (the rest is read past).

        In time and memory linear in the file (a 60 MB line was quadratic, and held whole).
        """
        carry = b""  # the start of a line the chunks so far did not end (at most ``keep``)
        while chunk := os.read(self.fd, _CHUNK):
            pieces = chunk.split(b"\n")
            if carry:
                pieces[0] = carry + pieces[0][: max(0, keep - len(carry))]
            carry = pieces.pop()[:keep]
            for piece in pieces:
                yield piece + b"\n" if len(piece) < keep else piece[:keep]
        if carry:
            yield carry


def _make_read(roots: _Roots, max_bytes: int) -> Tool:
    def read_file(
        path: str,
        start_line: int | None = None,
        end_line: int | None = None,
        offset: int | None = None,
        limit: int | None = None,
    ) -> ToolResult:
        """Read a text file (UTF-8). Give a line range, or a byte offset and limit, for a part.

        Args:
            path: The file, relative to the root (with several roots: 'rootname/path').
            start_line: First line to return (1-based).
            end_line: Last line to return (inclusive).
            offset: Byte offset to start at (instead of lines).
            limit: Bytes to return from the offset.
        """
        if (start_line is not None or end_line is not None) and (
            offset is not None or limit is not None
        ):
            raise ModelRetry("give either start_line/end_line or offset/limit, not both")
        first = 1 if start_line is None else start_line
        if first < 1 or (end_line is not None and end_line < first):
            raise ModelRetry("lines are numbered from 1, and end_line must be >= start_line")
        if (offset is not None and offset < 0) or (limit is not None and limit < 1):
            raise ModelRetry("offset must be >= 0 and limit >= 1")
        root, parts, shown = roots.locate(path)
        fd = open_beneath(root, parts, follow_symlinks=roots.follow)
        try:
            size = os.fstat(fd).st_size
            reader = _Reader(fd)
            meta: dict[str, JsonValue] = {"path": shown, "size": size}
            if start_line is not None or end_line is not None:
                data, last, cut = _read_lines(reader, first, end_line, max_bytes)
                meta |= {"start_line": first, "end_line": last, "truncated": cut}
                note = _lines_note(first, last, cut, data, max_bytes)
            else:
                start = offset or 0
                if start > size:  # past the end (10**20 overflowed the seek)
                    raise ModelRetry(f"offset {start} is past the end of the file ({size} bytes)")
                want = min(limit or max_bytes, max_bytes)
                os.lseek(fd, start, os.SEEK_SET)
                data = reader.read(want)
                end = start + len(data)
                cut = end < size and (limit is None or limit > max_bytes)
                meta |= {"offset": start, "bytes": len(data), "truncated": cut}
                note = ""
                if cut:
                    note = f"[bytes {start}-{end} of {size}; read on with offset={end}]"
                elif offset is not None or limit is not None:
                    note = f"[bytes {start}-{end} of {size}]"
        finally:
            os.close(fd)
        if _is_binary(data):
            meta["binary"] = True
            return ToolResult.text(
                f"{shown!r} is a binary file ({size} bytes); it is not shown as text",
                structured=meta,
            )
        if size == 0:
            return ToolResult.text(f"{shown!r} is empty", structured=meta)
        text = data.decode("utf-8", errors="replace")
        return ToolResult.text(f"{text}\n{note}" if note else text, structured=meta)

    return tool(name="read_file", read_only=True, idempotent=True, open_world=False)(
        _vouched(roots, _os_errors(read_file))
    )


# -- write -------------------------------------------------------------------------------------


def _check_destination(dir_fd: int, name: str, shown: str) -> tuple[bool, int]:
    """Whether the entry exists, and the mode to give the new file; refuses odd entries."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False, 0o644
    if stat.S_ISLNK(st.st_mode):
        raise ModelRetry(
            f"{shown!r} is a symbolic link; writing through symbolic links is refused "
            "because they can point outside the root: write to the real path"
        )
    if stat.S_ISDIR(st.st_mode):
        raise ModelRetry(f"{shown!r} is a directory; give a file name")
    if not stat.S_ISREG(st.st_mode):
        raise ModelRetry(f"{shown!r} is not a regular file (a device, FIFO or socket); refused")
    if st.st_nlink > 1:
        raise ModelRetry(
            f"{shown!r} has {st.st_nlink} hard links; a file with several links may be a "
            "link to a file outside the root, so writing it is refused"
        )
    return True, stat.S_IMODE(st.st_mode)


def _write_atomic(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write a temporary file beside ``name`` and rename it over (never writing through)."""
    temp = f".tether-{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, mode, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def _make_write(roots: _Roots, max_bytes: int) -> Tool:
    def write_file(path: str, content: str, create_dirs: bool = True) -> ToolResult:
        """Write a text file (UTF-8), replacing it if it exists.

        Args:
            path: The file, relative to the root (with several roots: 'rootname/path').
            content: The whole new content of the file.
            create_dirs: Create missing parent directories (inside the root).
        """
        data = content.encode("utf-8", errors="replace")
        if len(data) > max_bytes:
            raise ModelRetry(
                f"content is {len(data)} bytes; the limit is {max_bytes}: write less, or "
                "split it over several files"
            )
        root, parts, shown = roots.locate(path)
        if not parts:
            raise ModelRetry(f"{shown!r} names a root directory; give a file name")
        dir_fd, name = parent_beneath(
            root, parts, follow_symlinks=roots.follow, create_dirs=create_dirs
        )
        try:
            existed, mode = _check_destination(dir_fd, name, shown)
            try:
                _write_atomic(dir_fd, name, data, mode)
            except OSError as exc:
                raise ModelRetry(f"cannot write {shown!r}: {exc.strerror}") from None
        finally:
            os.close(dir_fd)
        verb = "replaced" if existed else "created"
        return ToolResult.text(
            f"{verb} {shown!r} ({len(data)} bytes)",
            structured={"path": shown, "bytes": len(data), "created": not existed},
        )

    return tool(
        name="write_file", read_only=False, destructive=True, idempotent=True, open_world=False
    )(_os_errors(write_file))


# -- list --------------------------------------------------------------------------------------


def _open_dir(roots: _Roots, path: str) -> Iterator[tuple[str, int]]:
    """Open the directories a listing or search covers: (prefix to show, descriptor)."""
    parts = split_path(path)
    if roots.named and not parts:
        for name in sorted(roots.roots):
            yield f"{name}/", open_beneath(roots.roots[name], (), kind="directory")
        return
    root, rest, shown = roots.locate(path)
    fd = open_beneath(root, rest, kind="directory", follow_symlinks=roots.follow)
    yield ("" if shown == "." else f"{shown}/"), fd


def _describe(kind: str, size: int, nlink: int) -> tuple[str, JsonValue]:
    if kind == "directory":
        return "/", None
    if kind == "file" and nlink > 1:
        return "  (file with several hard links; refused)", None
    if kind == "file":
        return f"  {size} B", size
    return f"  ({kind})", None


def _make_list(roots: _Roots, max_entries: int) -> Tool:
    def list_files(path: str = ".", depth: int = 1) -> ToolResult:
        """List a directory: names, types and sizes (directories end in '/').

        Args:
            path: The directory, relative to the root ('.' for the root itself).
            depth: How many levels to descend (1: only its own entries).
        """
        if not 1 <= depth <= _MAX_DEPTH:
            raise ModelRetry(f"depth must be between 1 and {_MAX_DEPTH}")
        lines: list[str] = []
        entries: list[JsonValue] = []
        more = False
        for prefix, fd in _open_dir(roots, path):
            try:
                for e in iter_tree(fd, max_depth=depth):
                    if len(entries) >= max_entries:
                        more = True
                        break
                    suffix, size = _describe(e.kind, e.size, e.nlink)
                    lines.append(f"{prefix}{e.path}{suffix}")
                    entries.append({"path": f"{prefix}{e.path}", "type": e.kind, "size": size})
            finally:
                os.close(fd)
            if more:
                break
        if more:
            lines.append(
                f"[stopped at {max_entries} entries: list a subdirectory or use a smaller depth]"
            )
        text = "\n".join(lines) if lines else "(empty directory)"
        return ToolResult.text(text, structured={"entries": entries, "truncated": more})

    return tool(name="list_files", read_only=True, idempotent=True, open_world=False)(
        _vouched(roots, _os_errors(list_files))
    )


# -- search ------------------------------------------------------------------------------------


Matcher = Callable[[str], object]
"""Finds a match in a line (truthy) or not."""


def _matcher(pattern: str, regex: bool, ignore_case: bool) -> Matcher:
    """The pattern as a search function.

    A regular expression from the model runs on RE2: in linear time, so no pattern can
    stall the search (Python's ``re`` backtracks: ``(a+)+$`` takes exponential time and no
    timeout stops it).
    """
    if not pattern:
        raise ModelRetry("give a non-empty pattern")
    if len(pattern) > _MAX_PATTERN:
        raise ModelRetry(f"the pattern is longer than {_MAX_PATTERN} characters; shorten it")
    if regex:
        try:
            return compile_linear(pattern, ignore_case=ignore_case).search
        except ValueError as exc:
            raise ModelRetry(f"invalid regular expression: {exc}") from None
    # a literal text: no backtracking to fear
    return re.compile(re.escape(pattern), re.IGNORECASE if ignore_case else 0).search


def _grep(fd: int, matcher: Matcher, max_bytes: int) -> Iterator[tuple[int, str]]:
    """Matching lines of a text file (binary and oversized files yield nothing)."""
    st = os.fstat(fd)
    if st.st_size > max_bytes:
        return
    data = _Reader(fd).read(max_bytes)
    if _is_binary(data):
        return
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if matcher(line):
            yield number, line


def _make_search(roots: _Roots, max_matches: int, max_bytes: int) -> Tool:
    def search_files(
        pattern: str,
        path: str = ".",
        regex: bool = False,
        glob: str | None = None,
        ignore_case: bool = False,
    ) -> ToolResult:
        """Find lines containing a text (or matching a regular expression) in files.

        Args:
            pattern: The text to find, or a Python regular expression if regex is true.
            path: The directory to search, relative to the root ('.' for all of it).
            regex: Treat the pattern as a regular expression.
            glob: Only search files whose name matches, e.g. '*.py'.
            ignore_case: Match regardless of case.
        """
        matcher = _matcher(pattern, regex, ignore_case)
        if glob is not None and len(glob) > _MAX_PATTERN:  # fnmatch's translation is quadratic
            raise ModelRetry(f"the glob is longer than {_MAX_PATTERN} characters; shorten it")
        lines: list[str] = []
        matches: list[JsonValue] = []
        skipped = 0
        visited = 0
        more = False
        for prefix, fd in _open_dir(roots, path):
            try:
                for e in iter_tree(fd, max_depth=_MAX_DEPTH):
                    visited += 1
                    if more or visited > _MAX_SEARCH_ENTRIES:
                        more = True
                        break
                    if e.kind != "file" or (glob and not fnmatch.fnmatchcase(e.name, glob)):
                        continue
                    shown = f"{prefix}{e.path}"
                    try:
                        file_fd = open_regular_at(e.dir_fd, e.name, shown)
                    except (ModelRetry, OSError):
                        skipped += 1  # hard-linked, or swapped for a link meanwhile
                        continue
                    try:
                        for number, line in _grep(file_fd, matcher, max_bytes):
                            if len(matches) >= max_matches:
                                more = True
                                break
                            text = line[:_MAX_LINE_SHOWN]
                            lines.append(f"{shown}:{number}: {text}")
                            matches.append({"path": shown, "line": number, "text": text})
                    finally:
                        os.close(file_fd)
            finally:
                os.close(fd)
        if more:
            lines.append(f"[stopped at {len(matches)} matches: narrow the path, glob or pattern]")
        if skipped:
            lines.append(f"[{skipped} hard-linked files were not searched]")
        text = "\n".join(lines) if matches else "no matches\n" + "\n".join(lines)
        return ToolResult.text(
            text.rstrip("\n"), structured={"matches": matches, "truncated": more}
        )

    return tool(name="search_files", read_only=True, idempotent=True, open_world=False)(
        _vouched(roots, _os_errors(search_files))
    )


def file_tools(
    root: str | Path | Mapping[str, str | Path],
    *,
    max_read_bytes: int = 1_000_000,
    max_write_bytes: int = 10_000_000,
    max_list_entries: int = 1000,
    max_search_matches: int = 200,
    follow_symlinks: bool = False,
    trusted: bool | Collection[str] = False,
) -> list[Tool]:
    """``read_file``, ``write_file``, ``list_files`` and ``search_files``, confined to a root.

    Args:
        root: The directory the tools may touch, or several by name (a path's first
            component then names its root: ``docs/a.txt``).
        max_read_bytes: Most bytes one read returns (and largest file searched).
        max_write_bytes: Largest content one write accepts.
        max_list_entries: Most entries one listing returns.
        max_search_matches: Most matching lines one search returns.
        follow_symlinks: Follow symbolic links that stay within the root (by default
            every symbolic link is refused).
        trusted: The files under the roots were written by the user or the developer, so
            what ``read_file``, ``list_files`` and ``search_files`` return is trusted. By
            default it is untrusted output (a file someone else wrote can carry
            instructions), which the policy's data-flow rule tracks. With several roots,
            the names of the trusted ones: a result from those says so (per call), the
            others' stay untrusted (``downloads`` beside ``notes``).

    Raises:
        ConfigError: a root is not an existing directory, or a limit is not positive.
    """
    limits: JsonObject = {
        "max_read_bytes": max_read_bytes,
        "max_write_bytes": max_write_bytes,
        "max_list_entries": max_list_entries,
        "max_search_matches": max_search_matches,
    }
    for name, value in limits.items():
        if type(value) is not int or value < 1:
            raise ConfigError(f"file_tools: {name} must be a positive integer, not {value!r}")
    roots = _roots(root, follow_symlinks)
    if not isinstance(trusted, bool):
        names = frozenset(trusted)
        if not roots.named:
            raise ConfigError(
                "file_tools: with one root, trusted is True or False; to trust some files "
                "and not others, name the roots (root={'notes': ..., 'downloads': ...}) and "
                "list the trusted ones (trusted=['notes'])"
            )
        if unknown := names - set(roots.roots):
            raise ConfigError(
                f"file_tools: trusted names {sorted(unknown)} that are not roots; the roots "
                f"are {sorted(roots.roots)}"
            )
        roots = replace(roots, trusted=names)
    untrusted = trusted is not True
    return [
        builtin(_make_read(roots, max_read_bytes), untrusted_output=untrusted),
        builtin(_make_write(roots, max_write_bytes)),
        builtin(_make_list(roots, max_list_entries), untrusted_output=untrusted),
        builtin(
            _make_search(roots, max_search_matches, max_read_bytes), untrusted_output=untrusted
        ),
    ]
