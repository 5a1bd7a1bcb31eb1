"""What an ``Agent``'s settings and a run's context must be, checked where they are given.

A setting of the wrong kind (``Agent(limits=None)``, ``Agent(store="runs.db")``) used to
fail at the first run, deep inside, as an ``AttributeError``; a context holding NaN was
stored as ``null``. Here each is a ``ConfigError`` or a ``UserError`` that names it.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from types import NoneType
from typing import Any, cast

import orjson

from tether.errors import ConfigError, UserError
from tether.hooks import Hooks
from tether.jsontypes import JsonObject, non_finite
from tether.limits import Limits
from tether.models.base import Model, ModelSettings
from tether.models.select import ModelNeeds
from tether.policy.base import Policy
from tether.policy.redaction import Redactor
from tether.prompts import RenderedPrompt
from tether.retry import Backoff
from tether.stores.base import RunStore
from tether.tools.base import Tool

__all__ = ["check_settings", "goal_context"]

_KINDS: tuple[tuple[str, type | tuple[type, ...], str], ...] = (
    ("name", str, "a string"),
    ("instructions", (str, RenderedPrompt), "a string, or a rendered prompt"),
    ("model", (Model, str, ModelNeeds, NoneType), "a Model, a name ('local', 'openai:gpt-4o')"),
    ("limits", Limits, "a Limits(...)"),
    ("model_settings", ModelSettings, "a ModelSettings(...)"),
    ("policy", (Policy, NoneType), "a Policy (RulePolicy(...), AllowAll()) or None"),
    ("store", (RunStore, NoneType), "a run store (SqliteStore(path), MemoryStore()) or None"),
    ("log_dir", (str, os.PathLike, NoneType), "a folder's path or None"),
    ("redactor", (Redactor, NoneType), "a Redactor(...) or None"),
    ("backoff", Backoff, "a Backoff(...)"),
    ("hooks", (Hooks, NoneType), "a Hooks() or None"),
    ("can_ask_user", bool, "True or False"),
)


def check_settings(agent: object) -> None:
    """Check that each of an ``Agent``'s settings is of the kind it takes.

    A wrong one failed later, as an ``AttributeError`` or a ``TypeError``.

    Raises:
        ConfigError: one is not; the message names it and what it takes.
    """
    for name, kinds, what in _KINDS:
        value: object = getattr(agent, name)
        if not isinstance(value, kinds):
            raise ConfigError(f"Agent({name}=...) takes {what}, not {type(value).__name__}")
    tools: object = getattr(agent, "tools")  # noqa: B009 - any object
    if isinstance(tools, str) or not isinstance(tools, Sequence):
        raise ConfigError(f"Agent(tools=...) takes a list of tools, not {type(tools).__name__}")
    for item in cast(Sequence[object], tools):
        if not isinstance(item, Tool) and not inspect.isroutine(item):
            raise ConfigError(
                f"Agent(tools=...) takes @tool functions, plain functions and Tool objects, "
                f"not {type(item).__name__} ({item!r:.60})"
            )
    recoveries: object = getattr(agent, "max_recoveries")  # noqa: B009 - any object
    if isinstance(recoveries, bool) or not isinstance(recoveries, int) or recoveries < 0:
        raise ConfigError(
            f"Agent(max_recoveries=...) takes a whole number >= 0, not {recoveries!r}"
        )


def goal_context(context: Mapping[str, Any] | None) -> JsonObject | None:
    """The context given with a goal, as the log holds it (a JSON object), or ``None``.

    Raises:
        UserError: it is not a mapping of strings to JSON values.
    """
    if context is None:
        return None
    if not isinstance(context, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance] - callers
        raise UserError(f"context must be a mapping (a JSON object), not {type(context).__name__}")
    try:
        # inside two more levels: the event that holds it must be encodable too
        value: object = orjson.loads(orjson.dumps([[dict(context)]]))[0][0]
    except TypeError as exc:
        raise UserError(
            f"the context cannot be stored as JSON ({exc}); give strings, numbers, booleans, "
            "None, lists and dicts with string keys"
        ) from None
    found = non_finite(context)  # after the depth check: it recurses
    if found is not None:  # JSON has no such number: the log would hold null
        raise UserError(
            f"the context holds {found}, a number JSON cannot carry; give a string or None"
        )
    return cast(JsonObject, value)
