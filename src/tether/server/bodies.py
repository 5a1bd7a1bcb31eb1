"""What the HTTP API reads and answers: request bodies, strict, and the error body."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model

__all__ = [
    "ERRORS",
    "Answer",
    "Decision",
    "Decisions",
    "ErrorBody",
    "StartRun",
    "start_run_body",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, regex_engine="python-re")


Tag = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        pattern=r"^(?!tenant:)[^\x00-\x1f\x7f]+$",  # tenant:... tags are the server's
    ),
]


class StartRun(_Strict):
    """A run to start."""

    goal: str = Field(min_length=1, max_length=100_000, description="The task, in words.")
    agent: str | None = Field(
        default=None, description="The agent's name (optional when the server has one)."
    )
    context: dict[str, Any] | None = Field(
        default=None, description="Structured data the task is about (a JSON object)."
    )
    tags: list[Tag] = Field(
        default_factory=list[str], max_length=32, description="Labels recorded with the run."
    )


def start_run_body(agents: Sequence[str]) -> type[StartRun]:
    """``StartRun`` whose ``agent`` names one of ``agents`` (required when there are several)."""
    names: list[JsonValue] = list(sorted(agents))
    described = f"The agent: one of {', '.join(map(str, names))}."
    if len(names) == 1:
        extra: dict[str, JsonValue] = {"enum": [*names, None]}
        field: Any = (
            str | None,
            Field(default=None, description=described, json_schema_extra=extra),
        )
    else:
        extra = {"enum": names}
        field = (str, Field(description=described, json_schema_extra=extra))
    made: type[StartRun] = create_model("StartRun", __base__=StartRun, agent=field)
    return made


class Answer(_Strict):
    """The user's answer to a run that asked a question."""

    text: str = Field(min_length=1, max_length=100_000)


class Decision(_Strict):
    """A human's decision on one pending call, bound to the arguments they saw."""

    call_id: str = Field(min_length=1, max_length=200)
    approve: bool = Field(description="Run the call (true) or deny it (false).")
    arguments_hash: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="The pending call's arguments_hash."
    )
    arguments: dict[str, Any] | None = Field(
        default=None, description="Edited arguments to run with (the policy checks them again)."
    )
    reason: str = Field(default="", max_length=10_000, description="Why (the model reads it).")


class Decisions(_Strict):
    """Decisions on calls a run waits for; calls left out keep waiting."""

    decisions: list[Decision] = Field(min_length=1, max_length=100)
    by: str = Field(
        default="",
        max_length=200,
        pattern=r"^[^\x00-\x1f\x7f]*$",  # an audit record's line: no control characters
        description="Who decided (with the key's id).",
    )


class ErrorBody(BaseModel):
    """Every error the API answers."""

    error: str = Field(description="What is wrong, and what to do.")


def _described(text: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": text}


ERRORS: dict[int | str, dict[str, Any]] = {
    400: _described("The request cannot be done as asked (the message says why)."),
    401: _described("No API key, not a key, an unknown or a revoked key."),
    403: _described("The key's scopes do not cover this."),
    404: _described("No such run (or another tenant's)."),
    409: _described("The run is not in a state that allows this, or the id is taken."),
    413: _described("The body is over 1 MB."),
    422: _described("The request does not match the schema."),
    429: _described("The server executes as many runs as it may: retry after Retry-After."),
    503: _described("The run store or a model failed; try again."),
}
"""The error answers every endpoint may give, for the OpenAPI schema."""
