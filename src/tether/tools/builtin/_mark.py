"""Marks tether's built-in tools as such: the default policy gates them by their risk."""

from __future__ import annotations

from dataclasses import replace

from tether.tools.base import Tool

__all__ = ["builtin"]


def builtin(tool: Tool, *, untrusted_output: bool | None = None) -> Tool:
    """``tool`` marked built-in (and, when given, with its output declared (un)trusted)."""
    definition = tool.definition
    hints = definition.annotations
    if untrusted_output is not None:
        hints = replace(hints, untrusted_output=untrusted_output)
    return replace(tool, definition=replace(definition, builtin=True, annotations=hints))
