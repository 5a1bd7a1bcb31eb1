"""``@tool``: a typed Python function (sync or async) becomes a ``Tool``.

The JSON Schema comes from the signature and the docstring (Google, NumPy or Sphinx style;
each parameter's description becomes its ``description``), and the arguments are validated
by pydantic before the function runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import UnionType
from typing import TYPE_CHECKING, Any, Union, cast, get_args, get_origin, get_type_hints, overload

from tether._internal.daemonthreads import in_daemon_thread
from tether.content import ToolResult
from tether.jsontypes import JsonObject, JsonValue

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError
from tether.errors import ConfigError, ModelRetry
from tether.tools.base import (
    ArgumentsValidator,
    Tool,
    ToolAnnotations,
    ToolContext,
    ToolDefinition,
    ToolHandler,
    to_tool_result,
    validate_tool_name,
)

__all__ = ["format_validation_error", "function_tool", "tool"]

_FORBID: Any = {"extra": "forbid"}  # pydantic's ConfigDict


def format_validation_error(exc: ValidationError, prefix: tuple[str, ...] = ()) -> str:
    """A validation error as one line a model can act on (``prefix``: where the value sat)."""
    parts: list[str] = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in (*prefix, *err["loc"])) or "<arguments>"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _strip_titles(schema: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """Drop pydantic's generated titles: they repeat the names and cost tokens."""
    schema.pop("title", None)
    props = schema.get("properties")
    if isinstance(props, dict):
        for prop in props.values():
            if isinstance(prop, dict):
                prop.pop("title", None)
    return schema


def _model_validator(model: type[BaseModel], renamed: dict[str, str]) -> ArgumentsValidator:
    from pydantic import ValidationError

    validate = model.__pydantic_validator__.validate_python

    def validator(arguments: JsonObject) -> Mapping[str, Any]:
        try:
            values: Mapping[str, Any] = cast("BaseModel", validate(arguments)).__dict__
        except ValidationError as exc:
            raise ModelRetry("invalid arguments: " + format_validation_error(exc)) from None
        if renamed:
            return {renamed.get(k, k): v for k, v in values.items()}
        return values

    return validator


def _is_context(annotation: object) -> bool:
    """A ``ToolContext`` parameter, also when written ``ToolContext | None``."""
    if annotation is ToolContext:
        return True
    return get_origin(annotation) in (Union, UnionType) and ToolContext in get_args(annotation)


def function_tool(
    func: Callable[..., object],
    *,
    name: str | None = None,
    description: str | None = None,
    title: str | None = None,
    annotations: ToolAnnotations = ToolAnnotations(),
    timeout: float | None = None,
    blocking: bool = True,
    idempotency_key: bool = False,
    retries: int | None = None,
) -> Tool:
    """Build a ``Tool`` from a typed function. See ``tool`` for the parameters."""
    import docstring_parser
    from pydantic import BaseModel, Field, create_model

    tool_name = validate_tool_name(name or func.__name__)
    doc = docstring_parser.parse(inspect.getdoc(func) or "")
    param_docs = {p.arg_name: p.description or "" for p in doc.params}
    try:
        hints = get_type_hints(func, include_extras=True)
    except NameError as exc:
        raise ConfigError(f"tool {tool_name!r}: cannot resolve a type annotation ({exc})") from None

    fields: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    context_param: str | None = None
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ConfigError(
                f"tool {tool_name!r}: *args and **kwargs cannot be described to a model"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigError(f"tool {tool_name!r}: positional-only parameters are not supported")
        annotation = hints.get(param.name, inspect.Parameter.empty)
        if _is_context(annotation):
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            raise ConfigError(
                f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        info = Field(default, description=param_docs.get(param.name) or None)
        field_name = param.name
        if param.name.startswith("_") or hasattr(BaseModel, param.name):
            # "json", "schema", "_x": pydantic reserves these; validate under another name
            field_name = f"arg_{len(fields)}_{param.name.lstrip('_')}"
            renamed[field_name] = param.name
            info = Field(default, alias=param.name, description=param_docs.get(param.name) or None)
        fields[field_name] = (annotation, info)

    model: type[BaseModel] = create_model(f"{tool_name}_arguments", __config__=_FORBID, **fields)
    schema = _strip_titles(cast(dict[str, JsonValue], model.model_json_schema(by_alias=True)))
    text = description or "\n\n".join(
        part for part in (doc.short_description, doc.long_description) if part
    )
    if not text:
        raise ConfigError(f"tool {tool_name!r}: give it a docstring or a description")

    known = [renamed.get(k, k) for k in fields]
    unknown = [n for n in annotations.sensitive or () if n.split(".")[0] not in known]
    if unknown:
        raise ConfigError(
            f"tool {tool_name!r}: sensitive names {', '.join(map(repr, unknown))}, which are "
            f"not parameters of the function (it has: {', '.join(known) or 'none'})"
        )
    ctx_name = context_param
    handler = _handler(
        func, ctx_name, is_async=inspect.iscoroutinefunction(func), blocking=blocking
    )

    definition = ToolDefinition(
        name=tool_name, description=text, input_schema=schema, title=title, annotations=annotations
    )
    is_async = inspect.iscoroutinefunction(func)
    return Tool(
        definition=definition,
        handler=handler,
        validator=_model_validator(model, renamed),
        takes_context=ctx_name is not None,
        uses_idempotency_key=idempotency_key,
        timeout=timeout,
        retries=retries,
        runs_as="coroutine" if is_async else "thread" if blocking else "inline",
    )


def _handler(
    func: Callable[..., object], ctx_name: str | None, *, is_async: bool, blocking: bool
) -> ToolHandler:
    """The handler for ``func``, specialised once so that a call takes no decisions."""
    if ctx_name is not None:
        inner = _handler(func, None, is_async=is_async, blocking=blocking)

        async def with_context(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
            return await inner(ctx, {**arguments, ctx_name: ctx})

        return with_context
    if is_async:
        coroutine = cast(Callable[..., Awaitable[object]], func)

        async def run_async(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
            return to_tool_result(await coroutine(**arguments))

        return run_async
    if blocking:

        def call(arguments: Mapping[str, Any]) -> object:
            try:
                return func(**arguments)
            except StopIteration as exc:  # a future cannot carry it: it would never resolve
                raise RuntimeError(f"raised StopIteration{f': {exc}' if str(exc) else ''}") from exc

        async def run_in_thread(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
            return to_tool_result(await in_daemon_thread(call, arguments))

        return run_in_thread

    async def run_inline(ctx: ToolContext, arguments: Mapping[str, Any]) -> ToolResult:
        return to_tool_result(func(**arguments))

    return run_inline


@overload
def tool(func: Callable[..., object], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    title: str | None = None,
    read_only: bool | None = None,
    destructive: bool | None = None,
    idempotent: bool | None = None,
    open_world: bool | None = None,
    untrusted_output: bool | None = None,
    sensitive: Sequence[str] | None = None,
    timeout: float | None = None,
    blocking: bool = True,
    idempotency_key: bool = False,
    retries: int | None = None,
) -> Callable[[Callable[..., object]], Tool]: ...


def tool(
    func: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    title: str | None = None,
    read_only: bool | None = None,
    destructive: bool | None = None,
    idempotent: bool | None = None,
    open_world: bool | None = None,
    untrusted_output: bool | None = None,
    sensitive: Sequence[str] | None = None,
    timeout: float | None = None,
    blocking: bool = True,
    idempotency_key: bool = False,
    retries: int | None = None,
) -> Tool | Callable[[Callable[..., object]], Tool]:
    """Turn a typed function into a tool, bare (``@tool``) or configured (``@tool(...)``).

    Args:
        func: The function; sync or async. A parameter typed ``ToolContext`` receives the
            call's context and is hidden from the model.
        name: The tool's name; the function's name by default.
        description: What it does; the docstring by default.
        title: A human-readable name.
        read_only: It changes nothing.
        destructive: It may destroy or overwrite data.
        idempotent: Repeating a call has no further effect.
        open_world: It talks to systems outside the agent's control.
        untrusted_output: What it returns holds text written by others (mail bodies, web
            pages, names in shared lists); unset: untrusted when open-world. The policy's
            data-flow rule holds side effects whose targets come only from such output.
        sensitive: The parameters that say what a call acts on (recipients, accounts,
            URLs, paths, amounts); unset: chosen by name (see ``tether.policy.dataflow``).
        timeout: Seconds a call may take (default: the run's ``Limits.tool_timeout``).
        blocking: For sync functions: run in a worker thread (default) so a slow call does
            not stall the event loop; ``False`` runs it inline (for fast, pure functions).
        idempotency_key: The function takes a ``ToolContext`` and sends its
            ``idempotency_key`` to the world, which deduplicates by it; after a crash a call
            whose outcome is unknown is then run again (with the same key) instead of being
            reported as unknown.
        retries: Correctable failures in a row of this tool's calls before the run stops
            (default: the run's ``Limits.max_retries``), counted per tool.
    """
    if isinstance(sensitive, str):
        raise ConfigError(f"tool: sensitive takes parameter names, e.g. ({sensitive!r},)")
    hints = ToolAnnotations(
        read_only=read_only,
        destructive=destructive,
        idempotent=idempotent,
        open_world=open_world,
        untrusted_output=untrusted_output,
        sensitive=None if sensitive is None else tuple(sensitive),
    )

    def build(f: Callable[..., object]) -> Tool:
        return function_tool(
            f,
            name=name,
            description=description,
            title=title,
            annotations=hints,
            timeout=timeout,
            blocking=blocking,
            idempotency_key=idempotency_key,
            retries=retries,
        )

    return build if func is None else build(func)
