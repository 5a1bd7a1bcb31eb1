"""The agent's output type, as the arguments of ``finish_task`` (and of ``ask_user``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, cast

import orjson
from typing_extensions import TypeVar

from tether.jsontypes import JsonObject, JsonValue, non_finite

if TYPE_CHECKING:
    from pydantic import TypeAdapter
from tether.errors import ConfigError, ModelRetry
from tether.messages import ASK_USER, FINISH_TASK
from tether.tools.base import ToolAnnotations, ToolDefinition, local_validator
from tether.tools.function import format_validation_error

__all__ = ["ASK_USER", "FINISH_TASK", "OutputSpec", "ask_user_definition", "cited_labels"]

OutputT = TypeVar("OutputT", default=str)


_ANSWER_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "The final answer for the user."}},
    "required": ["answer"],
    "additionalProperties": False,
}


_CITED_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "description": "The final answer for the user."},
        "citations": {
            "type": "array",
            "items": {"type": "string", "pattern": "^K[0-9]{1,4}$"},
            "maxItems": 20,
            "description": "The labels of the knowledge passages the answer comes from, "
            "like K1 (an empty list when it comes from none)",
        },
    },
    "required": ["answer", "citations"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class OutputSpec(Generic[OutputT]):
    """How ``finish_task`` arguments become the typed output, and back."""

    output_type: type[OutputT]
    """The agent's output type (``str`` for plain text)."""
    adapter: TypeAdapter[Any]
    """Validates and dumps the output."""
    schema: JsonObject
    """``finish_task``'s argument schema."""
    wrapped: str | None
    """The single argument holding the output, when the type is not an object."""
    cites: bool = False
    """Text whose ``finish_task`` also takes ``citations`` (an agent with knowledge): the
    labels it names are appended to the answer as ``[K1] [K2]``, unless the text has them."""
    checker: Callable[[JsonObject], object] | None = None
    """For an output declared as a JSON Schema: checks ``finish_task``'s arguments against it
    (raising ``ModelRetry``); the output is then the JSON value itself."""

    def citing(self) -> OutputSpec[OutputT]:
        """This text output with a ``citations`` argument (``Agent(knowledge=...)``)."""
        if not self.is_text:
            return self
        return OutputSpec(self.output_type, self.adapter, _CITED_SCHEMA, "answer", cites=True)

    @classmethod
    def for_type(cls, output_type: type[OutputT]) -> OutputSpec[OutputT]:
        """Build the spec for an output type (text, a pydantic model, a dataclass, ...)."""
        from pydantic import TypeAdapter

        adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        if output_type is str:
            return cls(output_type, adapter, _ANSWER_SCHEMA, "answer")
        schema = cast(JsonObject, adapter.json_schema())
        if schema.get("type") == "object":
            schema.pop("title", None)
            return cls(output_type, adapter, schema, None)
        return cls(output_type, adapter, _wrapped(schema), "result")

    @classmethod
    def for_schema(cls, schema: JsonObject) -> OutputSpec[Any]:
        """Build the spec for an output declared as a JSON Schema (the output is its JSON).

        Raises:
            ConfigError: the schema is not a valid JSON Schema (draft 2020-12).
        """
        from pydantic import TypeAdapter

        try:
            local_validator(schema)
        except ConfigError as exc:
            raise ConfigError(f"the output schema: {exc}") from None
        adapter: TypeAdapter[Any] = TypeAdapter(Any)
        if schema.get("type") == "object":
            return OutputSpec(cast(Any, dict), adapter, schema, None, checker=_checker(schema))
        wrapped = _wrapped(schema)
        return OutputSpec(cast(Any, object), adapter, wrapped, "result", checker=_checker(wrapped))

    @property
    def is_text(self) -> bool:
        """Whether the output is plain text (a bare text reply may then finish the run)."""
        return self.output_type is str

    def definition(self) -> ToolDefinition:
        """The ``finish_task`` tool as the model sees it."""
        return ToolDefinition(
            name=FINISH_TASK,
            description=(
                "Call this exactly once, when the task is complete, with the final result. "
                "Its arguments are the answer; nothing after it runs."
            ),
            input_schema=self.schema,
            annotations=ToolAnnotations(read_only=True, open_world=False),
        )

    def validate(self, arguments: JsonObject) -> OutputT:
        """The typed output from ``finish_task``'s arguments.

        Raises:
            ModelRetry: the arguments do not fit the output type; the message says why.
        """
        from pydantic import ValidationError

        found = non_finite(arguments)
        if found is not None:  # the log would hold null where the outcome held the number
            raise ModelRetry(
                f"invalid output: {found} is a number JSON cannot carry; give a finite number"
            )
        if self.cites:
            return cast(OutputT, _cited(arguments))
        if self.checker is not None:
            self.checker(arguments)
            value = arguments if self.wrapped is None else arguments[self.wrapped]
            return cast(OutputT, value)
        try:
            if self.wrapped is not None:
                extra = set(arguments) - {self.wrapped}
                if self.wrapped not in arguments or extra:
                    raise ModelRetry(
                        f"invalid output: finish_task takes exactly one argument {self.wrapped!r}"
                    )
                return cast(OutputT, self.adapter.validate_python(arguments[self.wrapped]))
            return cast(OutputT, self.adapter.validate_python(arguments))
        except ValidationError as exc:
            where = () if self.wrapped is None else (self.wrapped,)
            raise ModelRetry("invalid output: " + format_validation_error(exc, where)) from None

    def dump(self, output: OutputT) -> JsonValue:
        """The output as JSON data (stored in ``run_finished``)."""
        return cast(JsonValue, self.adapter.dump_python(output, mode="json"))

    def load(self, data: JsonValue) -> OutputT:
        """The typed output from stored JSON data."""
        return cast(OutputT, self.adapter.validate_python(data))

    def as_text(self, output: OutputT) -> str:
        """The output as text for humans."""
        if isinstance(output, str):
            return output
        return orjson.dumps(self.dump(output)).decode()


def _wrapped(schema: JsonObject) -> JsonObject:
    """A non-object output's schema as ``finish_task``'s single argument ``result``."""
    inner = dict(schema)
    defs = inner.pop("$defs", None)  # refs resolve from the root: hoist the definitions
    wrapped: JsonObject = {
        "type": "object",
        "properties": {"result": inner},
        "required": ["result"],
        "additionalProperties": False,
    }
    if defs is not None:
        wrapped["$defs"] = defs
    return wrapped


def _checker(schema: JsonObject) -> Callable[[JsonObject], object]:
    validator: Any = local_validator(schema)

    def check(arguments: JsonObject) -> None:
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [
                f"{'.'.join(str(p) for p in e.absolute_path) or '<output>'}: {e.message}"
                for e in errors[:10]
            ]
            raise ModelRetry("invalid output: " + "; ".join(lines))

    return check


_LABEL = re.compile(r"\bK(\d{1,4})\b")
_BRACKETS = re.compile(r"\[([^\[\]]{1,80})\]")


def cited_labels(text: str) -> list[str]:
    """The citation labels ``text`` names, in order, once each (``[K1]``, ``[K2, K3]``)."""
    labels: list[str] = []
    for group in _BRACKETS.findall(text):
        for number in _LABEL.findall(group):
            label = f"K{int(number)}"
            if label not in labels:
                labels.append(label)
    return labels


def _cited(arguments: JsonObject) -> str:
    """A cited answer: its text, then the labels ``citations`` names that the text does not."""
    extra = set(arguments) - {"answer", "citations"}
    answer, citations = arguments.get("answer"), arguments.get("citations", [])
    if extra or not isinstance(answer, str):
        raise ModelRetry(
            "invalid output: finish_task takes 'answer' (text) and 'citations' (labels like K1)"
        )
    if not isinstance(citations, list) or not all(
        isinstance(c, str) and re.fullmatch(r"K[0-9]{1,4}", c) for c in citations
    ):
        raise ModelRetry("invalid output: citations: a list of labels like K1, as shown in [K1]")
    present = cited_labels(answer)
    missing = [c for c in dict.fromkeys(cast(list[str], citations)) if c not in present]
    if not missing:
        return answer
    return " ".join([answer.rstrip(), *(f"[{c}]" for c in missing)])


def ask_user_definition() -> ToolDefinition:
    """The ``ask_user`` tool: ends the run with ``waiting_for_user`` and the question."""
    return ToolDefinition(
        name=ASK_USER,
        description=(
            "Ask the user a question when you cannot go on without their answer. "
            "The run pauses until they reply."
        ),
        input_schema={
            "type": "object",
            "properties": {"question": {"type": "string", "description": "The question."}},
            "required": ["question"],
            "additionalProperties": False,
        },
        annotations=ToolAnnotations(read_only=True, open_world=False),
    )
