"""The embedded model's saved system prompts: an agent's first step without its prefill.

An agent's first step makes llama.cpp read its whole system prompt (the instructions and
every tool's contract, ~600 tokens for three tools): most of the first step's time on a
laptop CPU (10-13 s of a 13 s step on 2 cores). A process keeps that state in its prompt
cache; a new process (each ``tether run``) starts without it. Here the state of a system
prompt (llama.cpp's slot: the tokens and their KV cache) is saved to a file the first time
it is computed and restored from it (in milliseconds) by the next process that starts the
same agent on the same model.

What is saved is the system prompt alone, computed by a request of its own (the system
message and an empty user turn, one token long): never a goal, a tool result or an answer.
The file is keyed by the SHA-256 of the model file's identity, the context size, the
runtime's version and the system text, so a changed agent or model never restores a
stale state; a file that cannot be restored is deleted and the step computes its prompt as
it would without it. Files are private to the user (0600), the ``KEEP`` most recently used
are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import urllib.request
from pathlib import Path
from typing import Any

import orjson

__all__ = ["KEEP", "PromptCache", "loopback_post", "prompt_cache_dir"]

_log = logging.getLogger("tether")

KEEP = 8
"""How many saved system prompts a cache directory keeps (the most recently used)."""

_SUFFIX = ".slot"

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
        saved yet is computed by a request of its own and saved. Nothing here fails a step: whatever goes wrong, the step computes its prompt itself.
        """
        messages: list[dict[str, Any]] = body.get("messages") or []
        if not messages or messages[0].get("role") != "system":
            return
        system = str(messages[0].get("content") or "")
        if system == self._held:  # the slot starts with it already (an earlier step)
            return
        self._held = system
        name = hashlib.sha256(f"{self._identity}\n{system}".encode()).hexdigest() + _SUFFIX
        address = _base(str(server.listening_address))
        path = self.directory / name
        try:
            if path.is_file():
                if self._restore(address, name):
                    os.utime(path)  # recently used: kept
                    return
                path.unlink(missing_ok=True)
            self._save(server, address, messages[0], name)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            _log.debug("tether: the saved system prompt %s was not used: %s", path, exc)

    def _restore(self, address: str, name: str) -> bool:
        try:
            reply = loopback_post(
                f"{address}/slots/0?action=restore", {"filename": name}, key=self._key, timeout=60
            )
        except (OSError, ValueError) as exc:  # llama.cpp refused the file (400): not its state
            _log.debug("tether: a saved system prompt could not be restored (%s): %s", name, exc)
            return False
        restored = isinstance(reply, dict) and int(reply.get("n_restored", 0)) > 0  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        if restored:
            _log.debug("tether: restored a saved system prompt (%s)", name)
        return restored

    def _save(self, server: Any, address: str, system: dict[str, Any], name: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        prefix = {  # the system prompt, then an empty user turn: no goal is ever saved
            "messages": [system, {"role": "user", "content": ""}],
            "max_tokens": 1,
            "temperature": 0.0,
        }
        reply = server.handle_chat_completions(prefix)
        if not isinstance(reply, dict) or "choices" not in reply:
            return
        partial = f"{name}.{os.getpid()}-{secrets.token_hex(4)}.part"
        try:
            loopback_post(
                f"{address}/slots/0?action=save", {"filename": partial}, key=self._key, timeout=60
            )
            os.chmod(self.directory / partial, 0o600)
            os.replace(self.directory / partial, self.directory / name)
        finally:
            with contextlib.suppress(OSError):
                (self.directory / partial).unlink(missing_ok=True)
        self._prune()

    def _prune(self) -> None:
        """Keep the ``KEEP`` most recently used files."""
        files = sorted(
            (p for p in self.directory.glob(f"*{_SUFFIX}") if p.is_file()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        for old in files[KEEP:]:
            with contextlib.suppress(OSError):
                old.unlink()


def _base(address: str) -> str:
    address = address.rstrip("/")
    return address if address.startswith("http") else f"http://{address}"
