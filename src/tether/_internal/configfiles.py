"""Reading the files users write (TOML), and the ``module:attribute`` references in them."""

from __future__ import annotations

import importlib
import os
import stat
import sys
from pathlib import Path
from typing import Any, cast

from tether.errors import ConfigError

__all__ = ["MAX_CONFIG_BYTES", "import_ref", "read_regular", "read_toml"]


def _check_not_shadowed(module_name: str, folder: Path, ref: str, what: str) -> None:
    """Refuse a module beside the file that one of its name imported elsewhere shadows.

    Another agent file's ``tools.py``, or a standard module, would be used in its place.
    """
    top = module_name.split(".")[0]
    here = folder / f"{top}.py"
    if not here.is_file() and not (folder / top / "__init__.py").is_file():
        return
    loaded = sys.modules.get(top)
    if loaded is None:
        return
    source = getattr(loaded, "__file__", None)
    if source is None or Path(source).resolve().parent not in (folder, folder / top):
        raise ConfigError(
            f"cannot import {what} {ref!r}: the module {top!r} beside it is shadowed by the "
            f"{top!r} already imported from {source or 'the standard library'}; rename the file"
        )


MAX_CONFIG_BYTES = 4 << 20
"""The largest configuration file read (4 MiB): agent and policy files, instructions."""


def read_regular(path: Path, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    A FIFO named there waited forever for a writer, and ``/dev/zero`` or a huge file was
    read until memory ran out. Opened without blocking, then checked by what it is.

    Raises:
        OSError: it cannot be opened or read.
        ValueError: it is not a regular file, or is larger than ``limit``; says which.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        mode = os.fstat(file.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(
                "it is a directory" if stat.S_ISDIR(mode) else "it is not a regular file"
            )
        data = file.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"it is larger than {limit >> 20} MiB")
    return data


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The TOML file at ``path`` (``what`` it is, for errors: "policy file", "agent file").

    Raises:
        ConfigError: it is missing, unreadable or not TOML; the message names the file.
    """
    import tomllib  # only a file needs it: not loaded by ``import tether``

    file = Path(path)
    try:
        return tomllib.loads(read_regular(file).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no {what} at {file}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{file} nests arrays or tables too deeply to read") from None
    except (OSError, ValueError) as exc:  # a directory, a FIFO, too large, no permission
        raise ConfigError(f"cannot read the {what} {file}: {exc}") from None


def import_ref(ref: object, what: str, *, beside: str | Path | None = None) -> object:
    """What ``package.module:attribute`` names (``what`` it should be, for errors).

    The module is looked for in ``beside`` first (an agent file's folder; the current
    directory for a command's ``--agent``, as ``python -m`` would), then on the Python path.

    Raises:
        ConfigError: ``ref`` is not such a reference, or it cannot be imported.
    """
    module_name, _, attribute = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not module_name or not attribute:
        raise ConfigError(f"{what} reference {ref!r} must look like 'package.module:attribute'")
    folder = None if beside is None else str(Path(beside).resolve())
    if folder is not None:
        _check_not_shadowed(module_name, Path(folder), str(ref), what)
    added = folder is not None and folder not in sys.path
    if added:
        sys.path.insert(0, cast(str, folder))
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except Exception as exc:  # ImportError, AttributeError, or the module's own error
        where = "" if folder is None else f" (looked in {folder} and on the Python path)"
        raise ConfigError(
            f"cannot import {what} {ref!r}{where}: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if added:
            sys.path.remove(cast(str, folder))
