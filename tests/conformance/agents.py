"""The agent ``tether mcp serve`` exposes to the conformance suite's server checks."""

from __future__ import annotations

from tether import Agent, tool
from tether.content import ImageBlock, ResourceBlock, TextBlock, ToolResult
from tether.testing import ScriptedModel, call, finish


@tool(read_only=True, open_world=False)
def look(what: str) -> str:
    """Looks at something.

    Args:
        what: What to look at.
    """
    return f"saw {what}"


agent = Agent(
    name="looker",
    instructions="Looks at what the goal names.",
    model=ScriptedModel([call("look", what="the goal"), finish("seen")] * 50),
    tools=[look],
)


# The suite's fixture tools, as the tools of an agent: ``tether mcp serve --tools
# --bare-tool-names`` serves them under their own names, each call a run of its own.
_PIXEL = (  # a 1x1 red PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
_IMAGE = ImageBlock(data=_PIXEL, mime_type="image/png")
_RESOURCE = ResourceBlock(
    uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource."
)


@tool(read_only=True, open_world=False)
def test_simple_text() -> str:
    """Returns a simple text."""
    return "This is a simple text response for testing."


@tool(read_only=True, open_world=False)
def test_image_content() -> ToolResult:
    """Returns an image."""
    return ToolResult(content=(_IMAGE,))


@tool(read_only=True, open_world=False)
def test_embedded_resource() -> ToolResult:
    """Returns an embedded resource."""
    return ToolResult(content=(_RESOURCE,))


@tool(read_only=True, open_world=False)
def test_multiple_content_types() -> ToolResult:
    """Returns text, an image and a resource."""
    return ToolResult(content=(TextBlock(text="Multiple content types test:"), _IMAGE, _RESOURCE))


@tool(read_only=True, open_world=False)
def test_error_handling() -> str:
    """Always fails."""
    raise RuntimeError("This tool intentionally returns an error for testing")


@tool(read_only=True, open_world=False)
def test_tool_with_progress() -> str:
    """Reports progress (each event of its run is one notification)."""
    return "done"


fixtures = Agent(
    name="fixtures",
    instructions="The conformance suite's fixture tools.",
    model=ScriptedModel([finish("unused")] * 50),
    tools=[
        test_simple_text,
        test_image_content,
        test_embedded_resource,
        test_multiple_content_types,
        test_error_handling,
        test_tool_with_progress,
    ],
)
