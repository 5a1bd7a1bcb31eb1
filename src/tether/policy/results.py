"""What the policy does to a tool's result: result filters and the result size cap."""

from __future__ import annotations

from dataclasses import replace

import orjson

from tether._internal.textcut import cut_clean
from tether.content import ContentBlock, ResourceBlock, TextBlock, ToolResult, content_text
from tether.policy.rules import ContentFilter

__all__ = ["filter_result", "result_size", "truncate"]


def _text_of(block: ContentBlock) -> str | None:
    """The text a block carries (a text block's, a resource's), or None (images)."""
    if type(block) is TextBlock or isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ResourceBlock):
        return block.text
    return None


def result_size(result: ToolResult, cap: int) -> int:
    """The result's size in bytes: exact when it may be over ``cap``, else an upper bound."""
    chars = 0
    for block in result.content:
        text = _text_of(block)
        if text is not None:
            chars += len(text)
    structured = result.structured
    size = 0 if structured is None else len(orjson.dumps(structured))
    if 4 * chars + size <= cap:  # UTF-8: at most 4 bytes a character; no need to encode
        return 4 * chars + size
    for block in result.content:
        text = _text_of(block)
        if text is not None:
            size += len(text.encode())
    return size


def truncate(result: ToolResult, cap: int, size: int) -> ToolResult:
    """``result`` cut to ``cap`` bytes of text (images kept), with a note saying so."""
    budget = cap
    blocks: list[ContentBlock] = []
    for block in result.content:
        text = _text_of(block)
        if text is None:
            blocks.append(block)  # images and links are not text: kept, not counted
            continue
        if budget <= 0:
            continue
        data = text.encode()
        cut = data[:budget].decode(errors="ignore")
        if len(cut) < len(text):  # a secret it ends inside would lose what marks it
            cut = cut_clean(text, len(cut))
        blocks.append(
            replace(block, text=cut) if isinstance(block, ResourceBlock) else TextBlock(text=cut)
        )
        budget -= len(data)
    note = (
        f"[truncated by the policy: the result was {size} bytes, the limit is {cap}; "
        "ask for a smaller part if you need more]"
    )
    blocks.append(TextBlock(text=note))
    return replace(result, content=tuple(blocks), structured=None)


def filter_result(flt: ContentFilter, result: ToolResult) -> ToolResult | None:
    """``result`` with ``flt``'s matches redacted or withheld, or ``None`` if none match."""
    text = content_text(result.content)
    if result.structured is not None:
        text += "\n" + orjson.dumps(result.structured).decode()
    found = flt.first_match(text)
    if found is None:
        return None
    if flt.result_action == "redact" and flt.regexes and not flt.checks:
        redacted = replace(
            result, content=tuple(_redact(flt, b) for b in result.content), structured=None
        )
        if flt.first_match(content_text(redacted.content)) is None:
            return redacted
        # a match left over (across blocks, or in the marker itself): withhold it all
    reason = flt.reason or f"it contains {found}"
    return ToolResult.error(f"the result was withheld by the policy ({flt.label}): {reason}")


def _redact(flt: ContentFilter, block: ContentBlock) -> ContentBlock:
    if isinstance(block, TextBlock):
        return TextBlock(text=_sub_all(flt, block.text))
    if isinstance(block, ResourceBlock) and block.text is not None:
        return replace(block, text=_sub_all(flt, block.text))
    return block


def _sub_all(flt: ContentFilter, text: str) -> str:
    for regex in flt.regexes:
        text = regex.sub("[FILTERED]", text)
    return text
