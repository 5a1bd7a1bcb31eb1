"""Tool output is untrusted data: how it enters a model's context, clearly delimited.

Every adapter renders a tool's result through ``fence``: the output sits inside a
``<tool_output>`` block, and anything in it that could close the block (or open a new one)
is neutralised, so text returned by a web page or a file cannot pose as tether or the user.
The agent's instructions tell the model that such blocks are data, never instructions.
tether's own synthetic results (a denial, a skipped call) are not fenced: they are its words.
"""

from __future__ import annotations

import html
import re

from tether.content import content_text
from tether.messages import ToolResultMessage

__all__ = ["fence", "fence_text"]

_TAG = re.compile(r"<(\s*/?\s*tool_output)", re.IGNORECASE)


def fence_text(tool: str, text: str, *, is_error: bool = False) -> str:
    """``text`` returned by ``tool``, as a delimited block of data."""
    body = _TAG.sub(r"&lt;\1", text)
    status = ' status="error"' if is_error else ""
    return f'<tool_output tool="{html.escape(tool)}"{status}>\n{body}\n</tool_output>'


def fence(message: ToolResultMessage) -> str:
    """A tool result as the model reads it: fenced data, or tether's own words as they are."""
    text = content_text(message.content)
    if message.synthetic:
        return text
    return fence_text(message.name, text, is_error=message.is_error)
