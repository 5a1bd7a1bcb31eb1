"""``bench/bfcl.py`` turns BFCL's function docs into tools a JSON Schema grammar accepts."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import jsonschema

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bfcl.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bfcl_bench", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
