"""The embedded model's saved system prompts: an agent's first step without its prefill.

An agent's first step makes llama.cpp read its whole system prompt (the instructions and
every tool's contract, ~600 tokens for three tools): most of the first step's time on a
laptop CPU (10-13 s of a 13 s step on 2 cores). A process keeps that state in its prompt
cache; a new process (each ``tether run``) starts without it. Here the state of a system
prompt (llama.cpp's slot: the tokens and their KV cache) is saved to a file the first time
it is computed and restored from it (in milliseconds) by the next process that starts the
same agent on the same model.

What is saved is the system prompt alone, computed by a request of its own (the system
message and an empty user turn, one token long): never a goal, a tool result or an answer,
and only for a request whose instructions are the agent's own
(``ModelRequest.shared_instructions``: no plan or recalled memory in them). A file is named
by the SHA-256 of the model file's identity, the context size, the runtime's version and the
system text, then by the SHA-256 of its own bytes: a changed agent or model never restores a
stale state, and a torn or truncated file is deleted unread (llama.cpp aborts the process
on a truncated state). It is written under a temporary name, synced, then renamed. The
folder must be this user's alone (0700; files 0600), else it is not used; the ``KEEP`` most
recently used files are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import stat
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

__all__ = ["KEEP", "PromptCache", "loopback_post", "loopback_url", "prompt_cache_dir"]

_log = logging.getLogger("tether")

KEEP = 8
"""How many saved system prompts a cache directory keeps (the most recently used)."""

_SUFFIX = ".slot"
_STALE_PART_S = 600.0
"""Seconds after which a ``.part`` file is what a killed save left (a save takes < 1 s)."""

_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Requests to the model's own loopback server: never through a proxy the environment names."""


def loopback_post(url: str, body: dict[str, Any], *, key: str, timeout: float = 5) -> Any:
    """POST ``body`` as JSON to the in-process server's ``url`` with its API ``key``."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    request = urllib.request.Request(url, data=orjson.dumps(body), headers=headers, method="POST")
    with _LOOPBACK.open(request, timeout=timeout) as reply:
        return orjson.loads(reply.read())


def prompt_cache_dir(cache: Path) -> Path | None:
    """Where system prompts are saved.

    ``$TETHER_PROMPT_CACHE`` (``off``: nowhere), else ``cache``'s ``prompts`` folder.
    """
    setting = os.environ.get("TETHER_PROMPT_CACHE", "").strip()
    if setting.lower() in {"off", "0", "false", "no"}:
        return None
    return Path(setting).expanduser() if setting else cache / "prompts"


class PromptCache:
    """One model server's saved system prompts (see the module docstring).

    Args:
        directory: Where the files are (the server's slot folder).
        identity: What makes a state valid: the model file, the context size, the runtime.
        key: The server's API key (its loopback HTTP API answers no one else).
    """

    def __init__(self, directory: Path, identity: str, key: str) -> None:
        self.directory = directory
        self._identity = identity
        self._key = key
        self._held: str | None = None
        """The system text the server's slot starts with now (``None``: unknown)."""

    def prepare(self, server: Any, body: dict[str, Any]) -> None:
        """Start the slot with the state of ``body``'s system prompt: restored, or computed.

        Called before a step, in the model's thread, under its lock. A system prompt not
        saved yet is computed by a request of its own and saved. Nothing here fails a step:
        whatever goes wrong, the step computes its prompt itself.
        """
        messages: list[dict[str, Any]] = body.get("messages") or []
        if not messages or messages[0].get("role") != "system":
            return
        system = str(messages[0].get("content") or "")
        if system == self._held:  # the slot starts with it already (an earlier step)
            return
        self._held = system
        key = hashlib.sha256(f"{self._identity}\n{system}".encode()).hexdigest()
        address = loopback_url(str(server.listening_address))
        try:
            if not self._private():
                return
            if self._restore(address, key):
                return
            self._save(server, address, messages[0], key)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _log.debug("tether: the saved system prompt %s was not used: %s", key, exc)

    def elsewhere(self) -> None:
        """The slot is about to hold another prompt (one this cache does not keep)."""
        self._held = None

    def _private(self) -> bool:
        """Whether the folder is this user's alone (made so if it does not exist).

        A file someone else could write would be a state this process's model reads.
        """
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(self.directory)
        if (
            stat.S_ISDIR(info.st_mode)
            and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return True
        _log.warning(
            "tether: the prompt cache %s is not a folder only you can write to: not used "
            "(chmod 700 it, or set TETHER_PROMPT_CACHE)",
            self.directory,
        )
        return False

    def _restore(self, address: str, key: str) -> bool:
        """Restore the newest intact file saved for ``key``; the others are deleted."""
        found = sorted(self.directory.glob(f"{key}.*{_SUFFIX}"), key=_mtime_or_zero, reverse=True)
        for path in found:
            if not _intact(path):  # torn, truncated or foreign: llama.cpp would abort on it
                path.unlink(missing_ok=True)
                continue
            try:
                reply = loopback_post(
                    f"{address}/slots/0?action=restore",
                    {"filename": path.name},
                    key=self._key,
                    timeout=60,
                )
            except (OSError, ValueError) as exc:  # llama.cpp refused it (400): not its state
                _log.debug("tether: a saved system prompt was refused (%s): %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            if isinstance(reply, dict) and int(reply.get("n_restored", 0)) > 0:  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
                os.utime(path)  # recently used: kept
                _log.debug("tether: restored a saved system prompt (%s)", path.name)
                return True
            path.unlink(missing_ok=True)
        return False

    def _save(self, server: Any, address: str, system: dict[str, Any], key: str) -> None:
        prefix = {  # the system prompt, then an empty user turn: no goal is ever saved
            "messages": [system, {"role": "user", "content": ""}],
            "max_tokens": 1,
            "temperature": 0.0,
        }
        reply = server.handle_chat_completions(prefix)
        if not isinstance(reply, dict) or "choices" not in reply:
            return
        partial = self.directory / f"{key}.{os.getpid()}-{secrets.token_hex(4)}.part"
        try:
            loopback_post(
                f"{address}/slots/0?action=save",
                {"filename": partial.name},
                key=self._key,
                timeout=60,
            )
            os.chmod(partial, 0o600)
            digest = _sha256_of(partial, sync=True)  # durable before it is named: never torn
            os.replace(partial, self.directory / f"{key}.{digest}{_SUFFIX}")
            _fsync_dir(self.directory)
        finally:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        self._prune()

    def _prune(self) -> None:
        """Keep the ``KEEP`` most recently used files; drop what a killed save left."""
        now = time.time()
        for part in self.directory.glob("*.part"):
            with contextlib.suppress(OSError):
                if now - part.stat().st_mtime > _STALE_PART_S:
                    part.unlink()
        files = sorted(self.directory.glob(f"*{_SUFFIX}"), key=_mtime_or_zero, reverse=True)
        for old in files[KEEP:]:
            with contextlib.suppress(OSError):
                old.unlink()


def _intact(path: Path) -> bool:
    """Whether ``path`` is this user's regular file and its bytes hash to its name."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return False
        return _sha256_of(path) == path.name.split(".")[1]
    except (OSError, IndexError):
        return False


def _sha256_of(path: Path, *, sync: bool = False) -> str:
    """The SHA-256 of a file's bytes (``sync``: and the file flushed to the disk)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
        if sync:
            os.fsync(fh.fileno())
    return digest.hexdigest()


def _mtime_or_zero(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def loopback_url(address: str) -> str:
    """The base URL of the in-process server at ``address`` (as ``listening_address`` gives it)."""
    address = address.rstrip("/")
    return address if address.startswith("http") else f"http://{address}"
