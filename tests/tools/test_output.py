"""``OutputSpec``: the agent's output type as ``finish_task``'s arguments."""

from __future__ import annotations

import dataclasses

import jsonschema
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel
from typing_extensions import TypedDict

from tether.content import JsonObject
from tether.errors import ModelRetry
from tether.messages import FINISH_TASK
from tether.tools import ToolAnnotations
from tether.tools.output import OutputSpec, ask_user_definition


class Report(BaseModel):
    title: str
    score: int = 0
    tags: list[str]


@dataclasses.dataclass
class Point:
    x: float
    y: float
    label: str = "p"


class Movie(TypedDict):
    name: str
    year: int


class Node(BaseModel):
    value: int
    children: list[Node] = []


# -- text ---------------------------------------------------------------------------------------


def test_text_schema() -> None:
    spec = OutputSpec[str].for_type(str)
    assert spec.is_text
    assert spec.output_type is str
    assert spec.wrapped == "answer"
    assert spec.schema == {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "description": "The final answer for the user."}
        },
        "required": ["answer"],
        "additionalProperties": False,
    }


def test_text_validate() -> None:
    spec = OutputSpec[str].for_type(str)
    assert spec.validate({"answer": "Paris."}) == "Paris."
    assert spec.validate({"answer": ""}) == ""


@pytest.mark.parametrize(
    "arguments",
    [{}, {"result": "x"}, {"answer": "x", "extra": 1}],
    ids=["missing", "wrong-name", "extra"],
)
def test_text_validate_wrong_arguments(arguments: JsonObject) -> None:
    with pytest.raises(
        ModelRetry,
        match=r"^invalid output: finish_task takes exactly one argument 'answer'$",
    ):
        OutputSpec[str].for_type(str).validate(arguments)


def test_text_validate_wrong_type() -> None:
    with pytest.raises(ModelRetry, match=r"^invalid output: .*valid string"):
        OutputSpec[str].for_type(str).validate({"answer": 42})


def test_text_dump_load_as_text() -> None:
    spec = OutputSpec[str].for_type(str)
    assert spec.dump("héllo") == "héllo"
    assert spec.load("héllo") == "héllo"
    assert spec.as_text("héllo") == "héllo"


def test_finish_task_definition() -> None:
    spec = OutputSpec[str].for_type(str)
    d = spec.definition()
    assert d.name == FINISH_TASK == "finish_task"
    assert d.input_schema == spec.schema
    assert d.annotations == ToolAnnotations(read_only=True, open_world=False)
    assert d.description


def test_ask_user_definition() -> None:
    d = ask_user_definition()
    assert d.name == "ask_user"
    assert d.input_schema == {
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question."}},
        "required": ["question"],
        "additionalProperties": False,
    }
    assert d.annotations.is_read_only
    assert not d.annotations.is_open_world


# -- a pydantic model ---------------------------------------------------------------------------


def test_model_schema() -> None:
    spec = OutputSpec[Report].for_type(Report)
    assert not spec.is_text
    assert spec.wrapped is None
    assert spec.schema == {
        "type": "object",
        "properties": {
            "title": {"title": "Title", "type": "string"},
            "score": {"title": "Score", "type": "integer", "default": 0},
            "tags": {"title": "Tags", "type": "array", "items": {"type": "string"}},
        },
        "required": ["title", "tags"],
    }
    assert spec.definition().input_schema == spec.schema


def test_model_validate() -> None:
    spec = OutputSpec[Report].for_type(Report)
    out = spec.validate({"title": "Q3", "score": "7", "tags": ["a", "b"]})
    assert out == Report(title="Q3", score=7, tags=["a", "b"])
    assert spec.validate({"title": "Q3", "tags": []}) == Report(title="Q3", score=0, tags=[])


def test_model_validate_invalid() -> None:
    spec = OutputSpec[Report].for_type(Report)
    with pytest.raises(ModelRetry) as info:
        spec.validate({"score": "high", "tags": ["ok", 3]})
    message = info.value.message
    assert message.startswith("invalid output: ")
    assert "title: Field required" in message
    assert "score: Input should be a valid integer" in message
    assert "tags.1: Input should be a valid string" in message


def test_model_dump_load_as_text() -> None:
    spec = OutputSpec[Report].for_type(Report)
    report = Report(title="Q3", score=7, tags=["a"])
    data = spec.dump(report)
    assert data == {"title": "Q3", "score": 7, "tags": ["a"]}
    assert spec.load(data) == report
    assert spec.load(orjson.loads(orjson.dumps(data))) == report
    assert spec.as_text(report) == '{"title":"Q3","score":7,"tags":["a"]}'


# -- a dataclass and a TypedDict ----------------------------------------------------------------


def test_dataclass_schema() -> None:
    spec = OutputSpec[Point].for_type(Point)
    assert spec.wrapped is None
    assert spec.schema == {
        "type": "object",
        "properties": {
            "x": {"title": "X", "type": "number"},
            "y": {"title": "Y", "type": "number"},
            "label": {"title": "Label", "type": "string", "default": "p"},
        },
        "required": ["x", "y"],
    }


def test_dataclass_validate() -> None:
    spec = OutputSpec[Point].for_type(Point)
    assert spec.validate({"x": 1, "y": 2.5}) == Point(x=1.0, y=2.5, label="p")
    with pytest.raises(ModelRetry, match=r"^invalid output: y: Field required$"):
        spec.validate({"x": 1})
    with pytest.raises(ModelRetry, match=r"^invalid output: x: Input should be a valid number"):
        spec.validate({"x": "far", "y": 1})


def test_dataclass_dump_load_as_text() -> None:
    spec = OutputSpec[Point].for_type(Point)
    point = Point(x=1.5, y=-2.0, label="q")
    data = spec.dump(point)
    assert data == {"x": 1.5, "y": -2.0, "label": "q"}
    assert spec.load(data) == point
    assert spec.as_text(point) == '{"x":1.5,"y":-2.0,"label":"q"}'


def test_typed_dict() -> None:
    spec = OutputSpec[Movie].for_type(Movie)
    assert spec.wrapped is None
    assert spec.schema == {
        "type": "object",
        "properties": {
            "name": {"title": "Name", "type": "string"},
            "year": {"title": "Year", "type": "integer"},
        },
        "required": ["name", "year"],
    }
    movie = spec.validate({"name": "Alien", "year": "1979"})
    assert movie == {"name": "Alien", "year": 1979}
    assert spec.load(spec.dump(movie)) == movie
    assert spec.as_text(movie) == '{"name":"Alien","year":1979}'
    with pytest.raises(ModelRetry, match=r"^invalid output: year: Field required$"):
        spec.validate({"name": "Alien"})


# -- wrapped types ------------------------------------------------------------------------------


def test_list_schema() -> None:
    spec = OutputSpec[list[int]].for_type(list[int])
    assert not spec.is_text
    assert spec.wrapped == "result"
    assert spec.schema == {
        "type": "object",
        "properties": {"result": {"type": "array", "items": {"type": "integer"}}},
        "required": ["result"],
        "additionalProperties": False,
    }


def test_list_validate() -> None:
    spec = OutputSpec[list[int]].for_type(list[int])
    assert spec.validate({"result": [1, 2, 3]}) == [1, 2, 3]
    assert spec.validate({"result": []}) == []
    with pytest.raises(ModelRetry, match=r"^invalid output: .*valid integer"):
        spec.validate({"result": [1, "two"]})
    with pytest.raises(ModelRetry, match=r"^invalid output: .*valid list"):
        spec.validate({"result": 5})


@pytest.mark.parametrize(
    "arguments",
    [{}, {"answer": [1]}, {"result": [1], "more": [2]}],
    ids=["missing", "wrong-name", "extra"],
)
def test_list_validate_wrong_arguments(arguments: JsonObject) -> None:
    with pytest.raises(
        ModelRetry, match=r"^invalid output: finish_task takes exactly one argument 'result'$"
    ):
        OutputSpec[list[int]].for_type(list[int]).validate(arguments)


def test_list_dump_load_as_text() -> None:
    spec = OutputSpec[list[int]].for_type(list[int])
    assert spec.dump([3, 1, 2]) == [3, 1, 2]
    assert spec.load([3, 1, 2]) == [3, 1, 2]
    assert spec.as_text([3, 1, 2]) == "[3,1,2]"
    assert spec.as_text([]) == "[]"


def test_int_schema_and_validate() -> None:
    spec = OutputSpec[int].for_type(int)
    assert spec.wrapped == "result"
    assert spec.schema == {
        "type": "object",
        "properties": {"result": {"type": "integer"}},
        "required": ["result"],
        "additionalProperties": False,
    }
    assert spec.validate({"result": 42}) == 42
    assert spec.validate({"result": "42"}) == 42
    with pytest.raises(ModelRetry, match=r"^invalid output: .*valid integer"):
        spec.validate({"result": "many"})
    with pytest.raises(ModelRetry, match="exactly one argument 'result'"):
        spec.validate({"answer": 42})


def test_int_dump_load_as_text() -> None:
    spec = OutputSpec[int].for_type(int)
    assert spec.dump(-7) == -7
    assert spec.load(-7) == -7
    assert spec.as_text(-7) == "-7"


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=20))
def test_list_round_trip(values: list[int]) -> None:
    spec = OutputSpec[list[int]].for_type(list[int])
    assert spec.validate({"result": spec.dump(values)}) == values
    assert spec.load(orjson.loads(spec.as_text(values))) == values


# -- the schema the model sees must accept exactly what validate accepts ------------------------


def test_error_location_names_the_wrapped_argument() -> None:
    with pytest.raises(ModelRetry) as info:
        OutputSpec[list[int]].for_type(list[int]).validate({"result": [1, "two"]})
    assert info.value.message.startswith("invalid output: result.1: ")
    with pytest.raises(ModelRetry) as info:
        OutputSpec[str].for_type(str).validate({"answer": 42})
    assert info.value.message.startswith("invalid output: answer: ")


def test_schema_of_a_list_of_models_is_self_contained() -> None:
    spec = OutputSpec[list[Report]].for_type(list[Report])
    arguments: JsonObject = {"result": [{"title": "a", "tags": ["x"]}]}
    jsonschema.validate(arguments, spec.schema)
    assert spec.validate(arguments) == [Report(title="a", tags=["x"])]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"result": [{"tags": ["x"]}]}, spec.schema)


def test_schema_of_a_recursive_model_is_self_contained() -> None:
    spec = OutputSpec[Node].for_type(Node)
    node = Node(value=1, children=[Node(value=2), Node(value=3, children=[Node(value=4)])])
    data = spec.dump(node)
    if spec.wrapped is not None:
        arguments: JsonObject = {spec.wrapped: data}
    else:
        assert isinstance(data, dict)
        arguments = data
    jsonschema.validate(arguments, spec.schema)
    assert spec.validate(arguments) == node
