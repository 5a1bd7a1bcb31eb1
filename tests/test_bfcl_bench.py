"""``bench/bfcl.py`` turns BFCL's function docs into tools a JSON Schema grammar accepts."""

from __future__ import annotations

from typing import Any

import jsonschema

from tests.support import load_bench


def _bench() -> Any:
    return load_bench("bfcl", "bfcl_bench")


def test_bfcl_functions_become_json_schema_tools() -> None:
    bench = _bench()
    case = {
        "function": [
            {
                "name": "geometry.area",
                "description": "Area of a shape.",
                "parameters": {
                    "type": "dict",
                    "properties": {
                        "size": {"type": "float", "description": "Its size."},
                        "corners": {"type": "tuple", "items": {"type": "integer"}},
                        "extra": {"type": "any", "optional": True, "default": None},
                        "options": {
                            "type": "dict",
                            "properties": {"exact": {"type": "boolean"}},
                        },
                    },
                    "required": ["size"],
                },
            }
        ]
    }
    (tool,) = bench.tools_of(case)
    assert tool.name == "geometry_area"  # dots are not allowed in tool names
    schema = tool.input_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert schema["properties"]["size"] == {"type": "number", "description": "Its size."}
    assert schema["properties"]["corners"] == {"type": "array", "items": {"type": "integer"}}
    assert schema["properties"]["extra"] == {"default": None}  # any value; "optional" dropped
    assert schema["properties"]["options"]["type"] == "object"
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"size": 2.5, "corners": [1, 2], "extra": "x"})  # pyright: ignore[reportUnknownMemberType]
    assert not validator.is_valid({"size": "big"})  # pyright: ignore[reportUnknownMemberType]
