"""JSON values as types: what tool arguments, structured results and outputs are made of.

``JsonValue`` is a recursive alias that type checkers and pydantic both understand, defined
here rather than imported from pydantic so that ``import tether`` does not load pydantic:
validation is only needed once a tool or an agent is built.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeAlias, Union, cast

from typing_extensions import TypeAliasType

__all__ = ["JsonObject", "JsonValue", "non_finite"]

if TYPE_CHECKING:
    JsonValue: TypeAlias = Union[  # noqa: UP007 - a recursive alias needs the string form
        list["JsonValue"], dict[str, "JsonValue"], str, bool, int, float, None
    ]
else:
    JsonValue = TypeAliasType(
        "JsonValue", "list[JsonValue] | dict[str, JsonValue] | str | bool | int | float | None"
    )

JsonObject: TypeAlias = dict[str, JsonValue]
"""A JSON object, as tool arguments and structured content are."""


def non_finite(value: object, where: str = "") -> str | None:
    """The first NaN or infinity in JSON data and where (``nan (at rows[2].mean)``), else ``None``."""
    if isinstance(value, float):
        if math.isfinite(value):
            return None
        return f"{value!r} (at {where})" if where else repr(value)
    if isinstance(value, dict):
        for key, item in cast(dict[object, object], value).items():
            found = non_finite(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(cast(Sequence[object], value)):
            found = non_finite(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None
