"""The prompt cache's own rules that need no model (its real runs: tests/realmodel)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from tether.models.promptcache import PromptCache


class Unreachable:
    """A server that fails whatever it is asked (and counts what it was asked)."""

    listening_address = "127.0.0.1:9"

    def __init__(self) -> None:
        self.asked = 0

    def handle_chat_completions(self, body: dict[str, Any]) -> Any:
        self.asked += 1
        raise ConnectionError("the server is gone")


BODY = {"messages": [{"role": "system", "content": "You add."}, {"role": "user", "content": "x"}]}


def test_a_folder_others_can_write_to_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "prompts"
    folder.mkdir()
    os.chmod(folder, 0o777)
    server = Unreachable()
    PromptCache(folder, "model", "key").prepare(server, BODY)
    assert "not a folder only you can write to" in caplog.text
    assert list(folder.iterdir()) == []
    assert server.asked == 0


def test_a_file_whose_bytes_do_not_match_its_name_is_deleted_unread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A torn or foreign state is never handed to llama.cpp (it aborts the process on a
    truncated one); the cache then computes the prompt (here: a server that cannot)."""
    caplog.set_level(logging.DEBUG, logger="tether")
    folder = tmp_path / "prompts"
    folder.mkdir(mode=0o700)
    key = hashlib.sha256(b"model\nYou add.").hexdigest()
    torn = folder / f"{key}.{hashlib.sha256(b'whole').hexdigest()}.slot"
    torn.write_bytes(b"who")
    server = Unreachable()
    PromptCache(folder, "model", "key").prepare(server, BODY)
    assert not torn.exists()
    assert server.asked == 1  # computed instead (it failed here: the step goes on)
    assert "was not used" in caplog.text


def test_a_body_without_a_system_prompt_is_left_alone(tmp_path: Path) -> None:
    PromptCache(tmp_path / "p", "model", "key").prepare(
        Unreachable(), {"messages": [{"role": "user", "content": "x"}]}
    )
    assert not (tmp_path / "p").exists()


def test_after_another_prompt_the_agents_own_is_restored_again(tmp_path: Path) -> None:
    """Between two steps of one agent, a step the cache does not keep (a plan, a plain
    answer) fills the slot: the next step starts it again from the file."""
    cache, server = PromptCache(tmp_path / "p", "model", "key"), Unreachable()
    cache.prepare(server, BODY)
    cache.prepare(server, BODY)  # the slot starts with it: nothing to do
    assert server.asked == 1
    cache.elsewhere()
    cache.prepare(server, BODY)
    assert server.asked == 2
