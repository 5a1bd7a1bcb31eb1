"""JSON values as types: what tool arguments, structured results and outputs are made of.

``JsonValue`` is a recursive alias that type checkers and pydantic both understand, defined
here rather than imported from pydantic so that ``import tether`` does not load pydantic:
validation is only needed once a tool or an agent is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, Union

from typing_extensions import TypeAliasType

__all__ = ["JsonObject", "JsonValue"]

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
