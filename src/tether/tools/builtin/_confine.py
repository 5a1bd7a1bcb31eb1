"""Path confinement: open files and directories beneath a root directory, and nowhere else.

Paths are never compared as strings. The root is opened once per operation and the path is
walked one component at a time with ``openat`` (``os.open(name, O_NOFOLLOW, dir_fd=parent)``),
so the kernel refuses a symbolic link at every step and there is no check to race: a directory
swapped for a symlink between two calls makes the next ``openat`` fail, it cannot redirect it.
``..`` pops the walk's own stack of opened directories (never the kernel's ``..``) and is
refused at the root. With ``follow_symlinks`` the walk reads each link itself and splices its
target into the remaining components, under the same rules.

Everything here fails closed: anything unexpected is a ``ModelRetry`` saying why.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import unicodedata
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath
from typing import Literal

from tether._internal.frozen import frozen
from tether.errors import ConfigError, ModelRetry

__all__ = [
    "MAX_NAME_BYTES",
    "MAX_PATH_LENGTH",
    "MAX_SYMLINK_HOPS",
    "Entry",
    "Root",
    "fd_path",
    "is_beneath",
    "iter_tree",
    "open_beneath",
    "open_regular_at",
    "parent_beneath",
    "split_path",
]

MAX_PATH_LENGTH = 4096
"""Longest path accepted, in characters (Linux's ``PATH_MAX``)."""
MAX_NAME_BYTES = 255
"""Longest component accepted, in UTF-8 bytes (Linux's ``NAME_MAX``)."""
MAX_SYMLINK_HOPS = 40
"""Symbolic links followed while resolving one path (Linux's own limit)."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted in the root must not hang the tool (fstat refuses it next)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_PROC_FD = Path("/proc/self/fd")
_MAX_MKDIRS = 256  # directories one write may create (also ends a create/remove race)


@frozen
class Root:
    """A directory that paths are confined to, identified by its real path and inode."""

    path: str
    """Its real path (no symlinks), as resolved when configured."""
    dev: int
    """``st_dev`` when configured: a root replaced since then is refused."""
    ino: int
    """``st_ino`` when configured."""

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> Root:
        """The root at ``path``; ``ConfigError`` if it is not an existing directory."""
        real = os.path.realpath(path)
        try:
            fd = os.open(real, _DIR_FLAGS)
        except OSError as exc:
            raise ConfigError(
                f"root {os.fspath(path)!r} is not an accessible directory ({exc.strerror})"
            ) from None
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return cls(path=real, dev=st.st_dev, ino=st.st_ino)

    def open(self) -> int:
        """A new descriptor on the root; refused if the directory was replaced since."""
        try:
            fd = os.open(self.path, _DIR_FLAGS)
        except OSError as exc:
            raise ModelRetry(
                f"the root directory cannot be opened ({exc.strerror}); file access is unavailable"
            ) from None
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (self.dev, self.ino):
            os.close(fd)
            raise ModelRetry(
                "the root directory was replaced since the tools were configured; "
                "file access is refused until they are configured again"
            )
        return fd


def _show(parts: Sequence[str]) -> str:
    return "/".join(parts) or "."


def split_path(path: str) -> tuple[str, ...]:
    """Check a relative path and split it into components (``.`` and empty ones dropped).

    Raises:
        ModelRetry: the path is absolute, too long, or holds a control character.
    """
    if len(path) > MAX_PATH_LENGTH:
        raise ModelRetry(
            f"path is {len(path)} characters long; the limit is {MAX_PATH_LENGTH}: "
            "use a shorter path"
        )
    for ch in path:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise ModelRetry(
                f"path {path[:200]!r} contains the control character U+{ord(ch):04X}, which "
                "is refused in file names; use a plain path such as 'notes/todo.txt'"
            )
    if path.startswith("/"):
        raise ModelRetry(
            f"path {path[:200]!r} is absolute; absolute paths are refused: give a path "
            "relative to the root, such as 'notes/todo.txt'"
        )
    parts = tuple(p for p in path.split("/") if p not in ("", "."))
    for part in parts:
        if len(part.encode()) > MAX_NAME_BYTES:
            raise ModelRetry(
                f"a component of the path is longer than {MAX_NAME_BYTES} bytes: use shorter names"
            )
    return parts


def is_beneath(path: str, root: str) -> bool:
    """Whether absolute ``path`` is ``root`` or inside it, compared component by component."""
    parts, base = PurePosixPath(path).parts, PurePosixPath(root).parts
    return parts[: len(base)] == base


def fd_path(fd: int) -> str | None:
    """The path the kernel reports for an open descriptor (``None`` without ``/proc``)."""
    try:
        return os.readlink(_PROC_FD / str(fd))
    except OSError:
        return None


def _refuse_outside(shown: str) -> ModelRetry:
    return ModelRetry(
        f"path {shown!r} leads outside the root ('..' cannot go above it, and links may "
        "not point out of it); refused: use a path inside the root"
    )


class _Walk:
    """One resolution: a stack of opened directories (the root first) and what is left."""

    def __init__(self, root: Root, parts: Sequence[str], *, follow: bool) -> None:
        self.root = root
        self.follow = follow
        self.shown = _show(parts)
        self.queue = deque(parts)
        self.hops = 0
        self.created = 0
        self.made: list[tuple[int, str]] = []
        """The directories this walk created: each one's parent (a descriptor) and name."""
        self.stack = [root.open()]

    def close(self) -> None:
        while self.stack:
            os.close(self.stack.pop())
        while self.made:
            os.close(self.made.pop()[0])

    def undo(self) -> None:
        """Remove the directories this walk created, newest first (a refused path leaves none).

        Only empty ones go: a directory something else wrote into meanwhile stays.
        """
        while self.made:
            parent, name = self.made.pop()
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent)
            os.close(parent)

    @property
    def fd(self) -> int:
        return self.stack[-1]

    def descend(self, *, create_dirs: bool = False) -> str | None:
        """Open every directory but the last component; return it (``None``: a directory)."""
        while self.queue:
            part = self.queue.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                if len(self.stack) == 1:
                    raise _refuse_outside(self.shown)
                os.close(self.stack.pop())
                continue
            if not self.queue:
                return part
            try:
                self.stack.append(os.open(part, _DIR_FLAGS, dir_fd=self.fd))
            except FileNotFoundError:
                if not create_dirs:
                    raise ModelRetry(
                        f"no such directory {part!r} in {self.shown!r}: check the path "
                        "(list_files shows what exists)"
                    ) from None
                self._mkdir(part)
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise self.os_error(exc) from None
                self.expand(part, expect="directory")
        return None

    def _mkdir(self, part: str) -> None:
        self.created += 1
        if self.created > _MAX_MKDIRS:
            raise ModelRetry(f"cannot create the directories of {self.shown!r}; refused")
        try:
            os.mkdir(part, 0o777, dir_fd=self.fd)
        except FileExistsError:
            pass  # created meanwhile: the retried open checks what it is
        except OSError as exc:
            raise self.os_error(exc) from None
        else:
            self.made.append((os.dup(self.fd), part))
        self.queue.appendleft(part)  # retried; more follows, so it is not the final component

    def expand(self, part: str, *, expect: str) -> None:
        """``part`` could not be opened as a ``expect``: splice in its link target, or refuse."""
        try:
            st = os.stat(part, dir_fd=self.fd, follow_symlinks=False)
        except OSError as exc:
            raise self.os_error(exc) from None
        if not stat.S_ISLNK(st.st_mode):
            raise ModelRetry(f"{self.where(part)} is not a {expect}")
        if not self.follow:
            raise ModelRetry(
                f"{self.where(part)} is a symbolic link; symbolic links are not "
                "followed here because they can point outside the root: use the real path"
            )
        self.hops += 1
        if self.hops > MAX_SYMLINK_HOPS:
            raise ModelRetry(
                f"resolving {self.shown!r} took more than {MAX_SYMLINK_HOPS} symbolic links "
                "(a loop?); refused"
            )
        target = os.readlink(part, dir_fd=self.fd)
        if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in target):
            raise _refuse_outside(self.shown)
        if target.startswith("/"):
            target_parts = PurePosixPath(target).parts
            base = PurePosixPath(self.root.path).parts
            if target_parts[: len(base)] != base:
                raise _refuse_outside(self.shown)
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            rest: Sequence[str] = target_parts[len(base) :]
        else:
            rest = target.split("/")
        self.queue.extendleft(reversed(rest))

    def where(self, part: str) -> str:
        """How to name ``part`` in a message."""
        return repr(part) if part == self.shown else f"{part!r} in {self.shown!r}"

    def os_error(self, exc: OSError) -> ModelRetry:
        return ModelRetry(f"cannot access {self.shown!r}: {exc.strerror}")


def _verify(fd: int, root: Root, shown: str) -> None:
    """Defence in depth: the kernel's own path for ``fd`` must lie under the root."""
    where = fd_path(fd)
    if where is not None and not is_beneath(where, root.path):
        os.close(fd)
        raise _refuse_outside(shown)


def open_regular_at(dir_fd: int, name: str, shown: str) -> int:
    """Open ``name`` in ``dir_fd`` for reading if it is a regular file with a single link.

    Raises:
        ModelRetry: it is a symlink, not a regular file, or has several hard links.
    """
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ModelRetry(f"{shown!r} is a directory: use list_files to see what it holds")
        if not stat.S_ISREG(st.st_mode):
            raise ModelRetry(f"{shown!r} is not a regular file (a device, FIFO or socket)")
        if st.st_nlink > 1:
            raise ModelRetry(
                f"{shown!r} has {st.st_nlink} hard links; a file with several links may be a "
                "link to a file outside the root, so it is refused"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(
    root: Root,
    path: str | Sequence[str],
    *,
    kind: Literal["file", "directory"] = "file",
    follow_symlinks: bool = False,
) -> int:
    """Open ``path`` beneath ``root``: a regular single-link file, or a directory.

    Returns a descriptor the caller must close.

    Raises:
        ModelRetry: the path is malformed, missing, of the wrong kind, or would leave the root.
    """
    parts = split_path(path) if isinstance(path, str) else tuple(path)
    walk = _Walk(root, parts, follow=follow_symlinks)
    try:
        fd = _open_walk(walk, kind)
    except OSError as exc:  # the tree changed under the walk: refuse rather than guess
        raise walk.os_error(exc) from None
    finally:
        walk.close()
    _verify(fd, root, walk.shown)
    return fd


def _open_walk(walk: _Walk, kind: Literal["file", "directory"]) -> int:
    while True:
        name = walk.descend()
        if name is None:
            if kind == "file":
                raise ModelRetry(f"{walk.shown!r} is a directory, not a file")
            return os.dup(walk.fd)
        try:
            if kind == "directory":
                return os.open(name, _DIR_FLAGS, dir_fd=walk.fd)
            return open_regular_at(walk.fd, name, walk.shown)
        except FileNotFoundError:
            raise ModelRetry(
                f"no such {kind} {walk.shown!r}: check the path (list_files shows what exists)"
            ) from None
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            walk.expand(name, expect=kind)


def parent_beneath(
    root: Root,
    path: str | Sequence[str],
    *,
    follow_symlinks: bool = False,
    create_dirs: bool = False,
) -> tuple[int, str]:
    """The directory that holds ``path``'s final entry, opened beneath ``root``, and its name.

    With ``follow_symlinks`` a final symlink is resolved (within the root) to the entry it
    names; without, the final entry is returned as it is, link or not. The caller closes the
    descriptor and must not write through the entry (replace it with ``os.rename``).

    Raises:
        ModelRetry: the path is malformed, names a directory, or would leave the root.
    """
    parts = split_path(path) if isinstance(path, str) else tuple(path)
    walk = _Walk(root, parts, follow=follow_symlinks)
    found = False
    try:
        while True:
            name = walk.descend(create_dirs=create_dirs)
            if name is None:
                raise ModelRetry(f"{walk.shown!r} names a directory; give a file name")
            if not follow_symlinks:
                break
            try:
                st = os.stat(name, dir_fd=walk.fd, follow_symlinks=False)
            except FileNotFoundError:
                break
            if not stat.S_ISLNK(st.st_mode):
                break
            walk.expand(name, expect="file")
        fd = os.dup(walk.fd)
        found = True
    except OSError as exc:  # the tree changed under the walk: refuse rather than guess
        raise walk.os_error(exc) from None
    finally:
        if not found:  # refused: the directories made on the way go too
            walk.undo()
        walk.close()
    _verify(fd, root, walk.shown)
    return fd, name


@frozen
class Entry:
    """One entry met by ``iter_tree``; ``dir_fd`` is valid only until the next one."""

    path: str
    """Path relative to the directory walked."""
    name: str
    """The entry's own name."""
    kind: Literal["file", "directory", "symlink", "other"]
    """What it is (never followed)."""
    size: int
    """``st_size`` (for a symlink, its target's length)."""
    nlink: int
    """``st_nlink``."""
    dir_fd: int
    """The open directory holding it."""
    depth: int
    """1 for the walked directory's own entries."""


def _kind(mode: int) -> Literal["file", "directory", "symlink", "other"]:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    return "file" if stat.S_ISREG(mode) else "other"


def iter_tree(dir_fd: int, *, max_depth: int, prefix: str = "") -> Iterator[Entry]:
    """Entries under an open directory, sorted, depth first, never following a symlink."""
    with os.scandir(dir_fd) as it:
        names = sorted(e.name for e in it)
    for name in names:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue  # removed meanwhile
        kind = _kind(st.st_mode)
        rel = f"{prefix}{name}"
        yield Entry(
            path=rel,
            name=name,
            kind=kind,
            size=st.st_size,
            nlink=st.st_nlink,
            dir_fd=dir_fd,
            depth=rel.count("/") + 1,
        )
        if kind != "directory" or max_depth <= 1:
            continue
        try:
            sub = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            continue  # swapped for a symlink or removed meanwhile: not entered
        try:
            yield from iter_tree(sub, max_depth=max_depth - 1, prefix=f"{rel}/")
        finally:
            os.close(sub)
