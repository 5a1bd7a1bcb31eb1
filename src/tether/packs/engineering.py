"""The engineering pack: an agent that reads, edits and checks code in a working directory.

``tether run --agent pack:engineering/coder "make the tests pass"`` works on the current
directory: its files (``read_file``, ``write_file``, ``list_files``, ``search_files``,
confined to it) and a shell sandboxed to it (``run_command``, allowlisted programs only).
The default policy denies its writes and commands (destructive tools) until a policy of
yours allows them or asks for approval (`--policy`); an agent file can take
the same tool sets with its own options (``[[tools]] pack = "engineering/shell"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.agent import Agent
from tether.packs import Pack
from tether.tools.base import Tool

__all__ = ["COMMANDS", "coder", "files", "pack", "shell"]

COMMANDS = ("ls", "cat", "head", "tail", "wc", "grep", "diff", "python3")
"""The programs ``run_command`` may run unless told otherwise."""

_INSTRUCTIONS = """\
You are a careful software engineer working in one directory. Read before you change:
list and search the files, read the ones that matter, then make the smallest change that
does the task. After a change, check it (run the tests or the program) when you can. Say
what you changed and how you checked it; if you could not check it, say so."""


def files(root: str = ".", **options: Any) -> list[Tool]:
    """The file tools, confined to ``root`` (the current directory by default)."""
    from tether.tools.builtin import file_tools

    return file_tools(Path(root).resolve(), **options)


def shell(workspace: str = ".", allow: Sequence[str] = COMMANDS, **options: Any) -> list[Tool]:
    """``run_command`` in ``workspace``, for the ``allow``ed programs only."""
    from tether.tools.builtin import shell_tool

    return [shell_tool(Path(workspace).resolve(), allow=list(allow), **options)]


def coder() -> Agent[str]:
    """The engineering agent, on the current directory."""
    return Agent(name="coder", instructions=_INSTRUCTIONS, tools=[*files(), *shell()])


pack = Pack(
    name="engineering",
    description="Read, edit and check code in a directory (files and a sandboxed shell).",
    agents={"coder": coder},
    tools={"files": files, "shell": shell},
)
