"""MCP-aligned tools: a definition the model sees, and a handler tether runs."""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, cast

import orjson

from tether._internal.frozen import frozen
from tether.content import (
    ContentBlock,
    ImageBlock,
    JsonObject,
    ResourceBlock,
    TextBlock,
    ToolResult,
)
from tether.errors import ConfigError, ModelRetry
from tether.jsontypes import non_finite

__all__ = [
    "ArgumentsValidator",
    "MemoryAccess",
    "Tool",
    "ToolAnnotations",
    "ToolContext",
    "ToolDefinition",
    "ToolHandler",
    "local_validator",
    "to_tool_result",
    "validate_tool_name",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def validate_tool_name(name: str) -> str:
    """Return ``name`` if every provider accepts it as a tool name, else raise ``ConfigError``."""
    if not _NAME.match(name):
        raise ConfigError(
            f"invalid tool name {name!r}: use 1-64 letters, digits, '_' or '-' "
            "(the set OpenAI, Anthropic and MCP clients all accept)"
        )
    return name


@frozen
class ToolAnnotations:
    """Behaviour hints (MCP). ``None`` means unannotated, which is read as the worst case."""

    read_only: bool | None = None
    """Does not change its environment."""
    destructive: bool | None = None
    """May destroy or overwrite data (meaningful when not read-only)."""
    idempotent: bool | None = None
    """Calling it again with the same arguments has no further effect."""
    open_world: bool | None = None
    """Talks to systems outside the agent's control (the web, third-party APIs)."""
    untrusted_output: bool | None = None
    """Its output carries text written by someone other than the user or the developer (a
    web page, a mail body, a file others wrote, a write whose result echoes such text).
    Unset: untrusted when open-world. It changes what the policy trusts, not the tool's risk."""
    sensitive: tuple[str, ...] | None = None
    """The arguments that say what a call acts on (recipients, accounts, URLs, paths,
    amounts), by parameter name: the policy's data-flow rule checks where their values came
    from. Unset: chosen by name and JSON Schema format (see ``tether.policy.dataflow``)."""

    @property
    def is_read_only(self) -> bool:
        """Read-only only when declared so."""
        return self.read_only is True

    @property
    def is_destructive(self) -> bool:
        """Destructive unless read-only or declared non-destructive."""
        return not self.is_read_only and self.destructive is not False

    @property
    def is_idempotent(self) -> bool:
        """Safe to repeat: read-only, or declared idempotent."""
        return self.is_read_only or self.idempotent is True

    @property
    def is_open_world(self) -> bool:
        """Open-world unless declared closed."""
        return self.open_world is not False

    @property
    def is_untrusted_output(self) -> bool:
        """Output to treat as untrusted: as declared, else when open-world."""
        if self.untrusted_output is not None:
            return self.untrusted_output
        return self.is_open_world

    def tightened(self, other: ToolAnnotations) -> ToolAnnotations:
        """The stricter of two sets of hints (outside hints may tighten, never loosen)."""

        def safe(a: bool | None, b: bool | None) -> bool | None:  # True = the safe claim
            return None if a is None or b is None else a and b

        def unsafe(a: bool | None, b: bool | None) -> bool | None:  # True = the unsafe claim
            return None if a is None or b is None else a or b

        return ToolAnnotations(
            read_only=safe(self.read_only, other.read_only),
            destructive=unsafe(self.destructive, other.destructive),
            idempotent=safe(self.idempotent, other.idempotent),
            open_world=unsafe(self.open_world, other.open_world),
            untrusted_output=unsafe(self.untrusted_output, other.untrusted_output),
            sensitive=_union(self.sensitive, other.sensitive),
        )


def _union(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Both lists of sensitive arguments (unset where either leaves it to the defaults)."""
    if a is None or b is None:
        return None
    return tuple(dict.fromkeys((*a, *b)))


@frozen
class ToolDefinition:
    """What a model is told about a tool."""

    name: str
    """Unique name (letters, digits, ``_``, ``-``; at most 64)."""
    description: str
    """What the tool does and when to use it."""
    input_schema: JsonObject
    """JSON Schema of the arguments (an object schema)."""
    title: str | None = None
    """Human-readable name."""
    output_schema: JsonObject | None = None
    """JSON Schema of the structured result, if the tool declares one."""
    annotations: ToolAnnotations = ToolAnnotations()
    """Behaviour hints."""
    origin: str | None = None
    """Where the definition came from when not from this program's code (e.g. ``mcp:NAME``);
    the policy then trusts its annotations only to make the tool look riskier."""
    builtin: bool = False
    """One of tether's built-in tools (``tether.tools.builtin``): the default policy gates
    them by their risk, while the developer's own tools run."""


class MemoryAccess(Protocol):
    """The run's long-term memory as one call may use it (``ToolContext.memory``).

    What goes in passes the run's redaction and the memory's write policy, and what comes
    out is recorded: each is a ``memory_written`` or ``memory_recalled`` of this call.
    """

    async def remember(self, text: str, *, kind: str, importance: float) -> ToolResult:
        """Store ``text``; the result says what was done (``remembered``, the record's ``id``)."""
        ...

    async def recall(self, query: str, *, limit: int) -> ToolResult:
        """What memory holds about ``query``, fenced as information (untrusted output)."""
        ...


@frozen
class ToolContext:
    """What a tool may know about the call it serves (declare a parameter of this type)."""

    run_id: str
    """The run making the call."""
    call_id: str
    """The call's id."""
    tool: str
    """The tool's name."""
    memory: MemoryAccess | None = None
    """The run's long-term memory, when the agent has one (``Remember``)."""

    @property
    def idempotency_key(self) -> str:
        """Stable across retries and resumes of the same call: pass it to the world."""
        return f"{self.run_id}:{self.call_id}"


ArgumentsValidator = Callable[[JsonObject], Mapping[str, Any]]
"""Validates raw arguments and returns the values to call with; raises ``ModelRetry``."""

ToolHandler = Callable[[ToolContext, Mapping[str, Any]], Awaitable[ToolResult]]
"""Runs a validated call."""


def local_validator(schema: JsonObject) -> Any:
    """A JSON Schema (2020-12) validator that never looks outside ``schema``.

    A ``$ref`` may only point inside the schema (``#...``): one naming a URL or a file would
    make validation fetch it, from a schema an outside server (an MCP tool) or a file wrote.
    It must also point at something the schema holds: a ``#/$defs/Missing`` is found here,
    not when the first value is checked against it.

    Raises:
        ConfigError: the schema is invalid, refers outside itself, or to nothing in it.
    """
    from jsonschema import Draft202012Validator, SchemaError
    from referencing import Registry

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ConfigError(f"not a valid JSON Schema: {exc.message}") from None
    outside = sorted(_outside_refs(schema))
    if outside:
        raise ConfigError(
            f"the schema refers outside itself ({', '.join(outside[:3])}): only '#...' "
            "references are followed"
        )
    dangling = sorted(_dangling_refs(schema))
    if dangling:
        raise ConfigError(
            f"the schema refers to what it does not hold ({', '.join(dangling[:3])}): "
            "define each target (in '$defs', say) or drop the reference"
        )
    return Draft202012Validator(schema, registry=Registry())


def _outside_refs(value: object) -> set[str]:
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in cast(dict[str, object], item).items():
                if key in ("$ref", "$dynamicRef") and isinstance(inner, str):
                    if not inner.startswith("#"):
                        found.add(inner)
                else:
                    stack.append(inner)
        elif isinstance(item, list):
            stack.extend(cast(list[object], item))
    return found


def _dangling_refs(schema: JsonObject) -> set[str]:
    """The schema's ``$ref``s and ``$dynamicRef``s that resolve to nothing inside it.

    ``referencing`` (what jsonschema resolves with) walks the subschemas, so a ``$ref`` in
    data (a ``const``, a ``default``) is not taken for one, and a nested ``$id`` moves the
    base a reference resolves against, as it does when a value is checked.
    """
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    root: Resource[Any] = DRAFT202012.create_resource(schema)
    found: set[str] = set()
    stack = [(root, Registry[Any]().resolver_with_root(root))]
    while stack:
        resource, resolver = stack.pop()
        contents: object = resource.contents
        if isinstance(contents, dict):
            for key in ("$ref", "$dynamicRef"):
                ref = cast(dict[str, object], contents).get(key)
                if not isinstance(ref, str):
                    continue
                try:
                    resolver.lookup(ref)
                except Exception:  # Unresolvable, or a pointer through a boolean schema
                    found.add(ref)
        stack.extend((sub, resolver.in_subresource(sub)) for sub in resource.subresources())
    return found


def _schema_validator(schema: JsonObject) -> ArgumentsValidator:
    validator: Any = local_validator(schema)

    def validate(arguments: JsonObject) -> Mapping[str, Any]:
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [
                f"{'.'.join(str(p) for p in err.absolute_path) or '<arguments>'}: {err.message}"
                for err in errors
            ]
            raise ModelRetry("invalid arguments: " + "; ".join(lines))
        return arguments

    return validate


@frozen
class Tool:
    """A tool: its definition, how arguments are validated, and how it runs."""

    definition: ToolDefinition
    """What the model sees."""
    handler: ToolHandler
    """Runs a validated call."""
    validator: ArgumentsValidator
    """Checks the model's arguments before the call."""
    timeout: float | None = None
    """Seconds a call may take; ``None`` uses the run's ``Limits.tool_timeout``."""
    takes_context: bool = True
    """Whether the handler reads its ``ToolContext`` (the loop skips building one if not)."""
    uses_idempotency_key: bool = False
    """The tool passes ``ctx.idempotency_key`` to the world, which deduplicates by it: a call
    whose outcome was lost in a crash is then safe to run again."""
    runs_as: Literal["coroutine", "inline", "thread"] = "coroutine"
    """How the handler runs: ``coroutine``, async code that may do anything (each call gets a
    task of its own, so one that ignores cancellation past its timeout can be abandoned);
    ``inline``, a sync function called on the event loop (it cannot be interrupted, but it
    cannot ignore a cancellation either); ``thread``, a sync function in a worker thread
    (which cannot be stopped once started: past its timeout it is left to finish)."""
    retries: int | None = None
    """Correctable failures in a row of this tool's calls (invalid arguments or output,
    ``ModelRetry``) before the run stops; ``None`` uses ``Limits.max_retries``. Counted per
    tool: another tool's success does not reset it."""

    def __post_init__(self) -> None:
        timeout = self.timeout
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)  # pyright: ignore[reportUnnecessaryIsInstance] - user input
            or not 0 < timeout < math.inf
        ):
            raise ConfigError(
                f"tool {self.definition.name!r}: timeout takes a positive, finite number of "
                f"seconds (or None for Limits.tool_timeout), not {timeout!r}"
            )
        retries = self.retries
        if retries is not None and (
            not isinstance(retries, int) or isinstance(retries, bool) or retries < 0  # pyright: ignore[reportUnnecessaryIsInstance] - user input
        ):
            raise ConfigError(
                f"tool {self.definition.name!r}: retries takes a whole number 0 or more (or "
                f"None for Limits.max_retries), not {retries!r}"
            )

    @property
    def safe_to_retry(self) -> bool:
        """Whether running a call again cannot repeat its effect."""
        return self.uses_idempotency_key or self.annotations.is_idempotent

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.definition.name

    @property
    def annotations(self) -> ToolAnnotations:
        """The tool's behaviour hints."""
        return self.definition.annotations

    @classmethod
    def from_schema(
        cls,
        *,
        name: str,
        description: str,
        input_schema: JsonObject,
        handler: Callable[[ToolContext, Mapping[str, Any]], Awaitable[object]],
        title: str | None = None,
        output_schema: JsonObject | None = None,
        annotations: ToolAnnotations = ToolAnnotations(),
        timeout: float | None = None,
        uses_idempotency_key: bool = False,
        origin: str | None = None,
        retries: int | None = None,
    ) -> Tool:
        """A tool from a raw JSON Schema (how MCP and config-declared tools arrive).

        Arguments are validated against the schema (JSON Schema 2020-12) before the call.
        ``origin`` names where an outside definition came from (``mcp:NAME``): its
        annotations can then only tighten the policy.
        """
        if input_schema.get("type", "object") != "object":
            raise ConfigError(f"tool {name!r}: input_schema must describe an object")
        try:
            validator = _schema_validator(input_schema)
        except Exception as exc:  # jsonschema.SchemaError and friends
            raise ConfigError(f"tool {name!r}: invalid input_schema: {exc}") from None

        async def run(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
            return to_tool_result(await handler(ctx, arguments))

        definition = ToolDefinition(
            name=validate_tool_name(name),
            description=description,
            input_schema=input_schema,
            title=title,
            output_schema=output_schema,
            annotations=annotations,
            origin=origin,
        )
        return cls(
            definition=definition,
            handler=run,
            validator=validator,
            timeout=timeout,
            uses_idempotency_key=uses_idempotency_key,
            retries=retries,
        )


_SCALARS = (int, float, bool)


def _unrepresentable(found: str) -> ToolResult:
    return ToolResult.error(
        f"the tool's result holds {found}, a number JSON cannot carry (it would reach you as "
        "null), so the result was withheld. The tool must return a string or None for such "
        "a value"
    )


def to_tool_result(value: object) -> ToolResult:
    """Turn whatever a tool returned into a ``ToolResult``.

    ``str`` becomes text; content blocks stay blocks; models, dataclasses, dicts, lists and
    scalars become structured content with their JSON as text. A value holding NaN or an
    infinity becomes an error result saying so: JSON has no such numbers, and sending them
    as ``null`` would hide a failure from the model and the log.
    """
    kind = type(value)
    if kind is int:
        number = cast(int, value)
        # beyond 64 bits JSON tools (orjson among them) lose or refuse it: the text keeps it
        structured = number if -(2**63) <= number < 2**64 else None
        return ToolResult(content=(TextBlock(text=str(number)),), structured=structured)
    if kind is str:
        return ToolResult(content=(TextBlock(text=cast(str, value)),))
    if isinstance(value, ToolResult):
        found = None if value.structured is None else non_finite(value.structured)
        return value if found is None else _unrepresentable(found)
    if kind in _SCALARS:
        found = non_finite(value)
        if found is not None:
            return _unrepresentable(found)
        return ToolResult(
            content=(TextBlock(text=orjson.dumps(value).decode()),), structured=cast(float, value)
        )
    if isinstance(value, TextBlock | ImageBlock | ResourceBlock):
        return ToolResult(content=(value,))
    if (
        isinstance(value, Sequence)
        and value
        and all(
            isinstance(v, TextBlock | ImageBlock | ResourceBlock)
            for v in cast(Sequence[object], value)
        )
    ):
        return ToolResult(content=tuple(cast(Sequence[ContentBlock], value)))
    from pydantic import BaseModel
    from pydantic_core import to_jsonable_python

    if isinstance(value, BaseModel):
        data = value.model_dump(mode="json")
    else:
        data = to_jsonable_python(value)
    text = orjson.dumps(data)
    # orjson writes NaN and infinities as null: only then can there be one to find
    found = non_finite(data) if b"null" in text else None
    if found is not None:
        return _unrepresentable(found)
    return ToolResult(content=(TextBlock(text=text.decode()),), structured=data)
