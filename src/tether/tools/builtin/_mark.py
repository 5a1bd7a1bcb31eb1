"""Marks tether's built-in tools as such: the default policy gates them by their risk."""

from __future__ import annotations

from dataclasses import replace

from tether.tools.base import Tool, ToolAnnotations

__all__ = ["builtin"]


def builtin(tool: Tool, *, untrusted_output: bool | None = None) -> Tool:
    """``tool`` marked built-in (and, when given, with its output declared (un)trusted)."""
    definition = tool.definition
    hints = definition.annotations
    if untrusted_output is not None:
        hints = ToolAnnotations(
            read_only=hints.read_only,
            destructive=hints.destructive,
            idempotent=hints.idempotent,
            open_world=hints.open_world,
            untrusted_output=untrusted_output,
            sensitive=hints.sensitive,
        )
    return replace(tool, definition=replace(definition, builtin=True, annotations=hints))
