"""MCP-aligned tool results: content blocks, structured content and an error flag."""

from __future__ import annotations

from typing import Literal, TypeAlias

from tether._internal.frozen import frozen
from tether.jsontypes import JsonObject, JsonValue

__all__ = [
    "ContentBlock",
    "ImageBlock",
    "JsonObject",
    "JsonValue",
    "ResourceBlock",
    "TextBlock",
    "ToolResult",
    "content_text",
]


@frozen(slots=False)
class TextBlock:
    """Plain text."""

    kind: Literal["text"] = "text"
    """Discriminator."""
    text: str
    """The text."""


@frozen(slots=False)
class ImageBlock:
    """An image, base64-encoded."""

    kind: Literal["image"] = "image"
    """Discriminator."""
    data: str
    """Base64 of the image bytes."""
    mime_type: str
    """For example ``image/png``."""


@frozen(slots=False)
class ResourceBlock:
    """A resource named by URI, with its text when it has one."""

    kind: Literal["resource"] = "resource"
    """Discriminator."""
    uri: str
    """Where the resource lives."""
    mime_type: str | None = None
    """Its media type, if known."""
    text: str | None = None
    """Its text content, if it is text and was read."""


ContentBlock: TypeAlias = TextBlock | ImageBlock | ResourceBlock
"""One block of a tool result."""


@frozen
class ToolResult:
    """What a tool returned: content blocks, optional structured content, and an error flag."""

    content: tuple[ContentBlock, ...] = ()
    """Content for the model, in order."""
    structured: JsonValue = None
    """Machine-readable result (MCP ``structuredContent``), if any."""
    is_error: bool = False
    """Whether the call failed; the content then explains why."""
    untrusted: bool | None = None
    """This result's trust, per call: ``True``: outside text is in it (tainting, whatever the
    tool declared); ``False``: none is (believed only of a tool defined in this program, and
    not where the developer's ``Trust`` says otherwise); ``None``: the tool's declared
    ``untrusted_output`` stands."""

    @classmethod
    def text(
        cls, text: str, *, structured: JsonValue = None, untrusted: bool | None = None
    ) -> ToolResult:
        """A successful result holding one text block (``untrusted``: see the field)."""
        return cls(content=(TextBlock(text=text),), structured=structured, untrusted=untrusted)

    @classmethod
    def error(cls, message: str) -> ToolResult:
        """A failed result holding the message the model will see."""
        return cls(content=(TextBlock(text=message),), is_error=True)


def content_text(blocks: tuple[ContentBlock, ...]) -> str:
    """Render content blocks as text for models that only take text."""
    parts: list[str] = []
    for block in blocks:
        match block:
            case TextBlock(text=text):
                parts.append(text)
            case ImageBlock(mime_type=mime):
                parts.append(f"[image {mime}]")
            case ResourceBlock(uri=uri, text=text):
                parts.append(text if text is not None else f"[resource {uri}]")
    return "\n".join(parts)
