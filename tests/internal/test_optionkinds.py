"""Options of a configuration file checked against their types: what each takes, in words."""

from __future__ import annotations

import datetime
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether._internal.optionkinds import checked_options, described, shown, wrong_kind
from tether.errors import ConfigError
from tether.knowledge import Knowledge
from tether.limits import Limits
from tether.memory.config import Remember
from tether.models.select import ModelNeeds
from tether.thinking import Thinking
from tether.tools.builtin import file_tools, http_tools, shell_tool, sql_tool


@pytest.mark.parametrize(
    ("annotation", "path", "says"),
    [
        (int, False, "a whole number such as 10"),
        (float | None, False, "a number such as 2.5"),
        (bool, False, "true or false"),
        (str, False, "a string"),
        (str, True, 'a path string such as "./data"'),
        (str | Path, False, 'a path string such as "./data"'),
        (Literal["a", "b", "c"], False, 'one of "a", "b" or "c"'),
        (Sequence[str], False, 'an array of strings such as ["a", "b"]'),
        (tuple[int, ...], False, "an array whose every item is a whole number such as 10"),
        (Mapping[str, str], False, 'a table of strings such as { NAME = "value" }'),
        (Mapping[str, int], False, "a table of names, each to a whole number such as 10"),
        (Limits, False, "a table of Limits options (max_steps, max_tool_calls, "),
        (Callable[[], None], False, None),
        (Callable[[], None] | None, False, None),
    ],
)
def test_what_an_option_takes_is_said_with_an_example(
    annotation: object, path: bool, says: str | None
) -> None:
    text = described(annotation, path=path)
    if says is None:
        assert text is None
    else:
        assert text is not None
        assert text.startswith(says)


def test_a_value_is_shown_as_the_file_wrote_it_and_cut_short() -> None:
    assert shown(True) == "true (a boolean)"
    assert shown({"a": [1, "b"]}) == '{ a = [1, "b"] } (a table)'
    assert shown(datetime.date(2025, 1, 31)) == "2025-01-31 (a date or time)"
    long = shown("x" * 500)
    assert len(long) < 80
    assert long.endswith("… (a string)")


def test_a_missing_value_and_a_secret_value_are_not_quoted() -> None:
    assert str(wrong_kind("f.toml", "name", None, "a string")) == (
        "f.toml: name must be a string (it is missing)"
    )
    error = wrong_kind("f.toml: [x]", "headers", {"A": 5}, "a table of strings", show=False)
    assert str(error) == "f.toml: [x]: headers must be a table of strings, not a table"


class _Reader(Protocol):
    def read(self) -> str: ...


def _configured(
    *,
    hook: Callable[[], None] | None = None,
    reader: _Reader | None = None,
    extra: Any = None,
) -> None:
    del hook, reader, extra


def test_what_a_file_cannot_hold_is_said_so_and_what_cannot_be_judged_is_let_through() -> None:
    with pytest.raises(ConfigError) as raised:
        checked_options(_configured, {"hook": "x"}, "f.toml: [t]")
    assert str(raised.value) == (
        'f.toml: [t]: hook must be left out (it takes a Python object), not "x" (a string)'
    )
    # a Protocol isinstance cannot check, and Any: the function itself judges them
    assert checked_options(_configured, {"reader": "x", "extra": 1}, "f.toml") == {
        "reader": "x",
        "extra": 1,
    }


def test_an_unknown_key_lists_the_known_ones_unless_the_function_takes_any() -> None:
    with pytest.raises(ConfigError, match=r"f.toml: unknown keys \['rot'\] \(known: .*root"):
        checked_options(file_tools, {"root": ".", "rot": 1}, "f.toml")

    def open_ended(root: str, **options: object) -> None:
        del root, options

    assert checked_options(open_ended, {"root": ".", "rot": 1}, "f.toml") == {
        "root": ".",
        "rot": 1,
    }


def test_a_table_given_for_a_dataclass_is_made_into_it_and_checked() -> None:
    options = checked_options(Limits, {"max_steps": 3, "think": {"max_steps": 1}}, "f.toml")
    assert options["think"].max_steps == 1
    with pytest.raises(ConfigError) as raised:
        checked_options(Limits, {"think": {"max_stepz": 1}}, "f.toml: [limits]")
    assert str(raised.value).startswith(
        "f.toml: [limits]: think: unknown keys ['max_stepz'] for PhaseLimits (known: "
    )


_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | st.dates()
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_KINDS: list[Callable[..., Any]] = [
    file_tools,
    http_tools,
    shell_tool,
    sql_tool,
    Limits,
    ModelNeeds,
    Remember,
    Knowledge,
    Thinking,
]


@given(kind=st.sampled_from(_KINDS), data=st.data())
def test_any_value_for_any_option_is_taken_or_refused_with_a_config_error(
    kind: Callable[..., Any], data: st.DataObject
) -> None:
    names = [
        n
        for n, p in inspect.signature(kind).parameters.items()
        if p.kind is p.KEYWORD_ONLY or p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    key = data.draw(st.sampled_from(names))
    value = data.draw(_VALUES)
    refused: ConfigError | None = None
    try:
        checked_options(kind, {key: value}, "f.toml: [t]")
    except ConfigError as exc:  # the only way to refuse it
        refused = exc
    if refused is not None:
        assert str(refused).startswith(f"f.toml: [t]: {key}")


@pytest.mark.parametrize("name", ["auth_token", "client_secret", "db_password", "api_keys"])
def test_a_value_under_a_name_that_holds_a_credential_word_is_not_quoted(name: str) -> None:
    # before: only names that were exactly "token", "secret", ... hid their values
    def configure(**options: str) -> None:
        del options

    def factory(auth_token: str = "", client_secret: str = "", db_password: str = "",
                api_keys: str = "") -> None:  # fmt: skip
        del auth_token, client_secret, db_password, api_keys

    with pytest.raises(ConfigError) as raised:
        checked_options(configure, {name: ["ghp_SECRETSECRET1234"]}, "a.toml", options_of=factory)
    assert "SECRETSECRET" not in str(raised.value)
    assert name in str(raised.value)
