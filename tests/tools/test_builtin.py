"""Built-in tools: ``evaluate`` / ``calculate``, ``current_time`` and ``days_until``."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.content import JsonObject, TextBlock, ToolResult
from tether.errors import ModelRetry
from tether.tools import Tool, ToolAnnotations, ToolContext
from tether.tools.builtin import calculate, current_time, days_until
from tether.tools.builtin.calculator import evaluate

CTX = ToolContext(run_id="run", call_id="call", tool="builtin")


async def call(t: Tool, arguments: JsonObject) -> ToolResult:
    return await t.handler(CTX, t.validator(arguments))


# -- evaluate: what it computes -----------------------------------------------------------------

EXACT: list[tuple[str, float]] = [
    ("1 + 2", 3),
    ("2 * 3 + 4", 10),
    ("2 * (3 + 4)", 14),
    ("10 - 4 - 3", 3),
    ("7 / 2", 3.5),
    ("7 // 2", 3),
    ("-7 // 2", -4),
    ("2 ** 10", 1024),
    ("2 ** -1", 0.5),
    ("-3 ** 2", -9),
    ("(-3) ** 2", 9),
    ("+5", 5),
    ("--5", 5),
    ("  42  ", 42),
    ("1e3 + 1", 1001.0),
    ("10 ** 300 // 10 ** 299", 10),
    # modulo: % followed by an operand
    ("10 % 3", 1),
    ("10 %3", 1),
    ("10%3", 1),
    ("-10 % 3", 2),
    ("10 % (4)", 2),
    ("7.5 % 2", 1.5),
    # percent: % not followed by an operand
    ("50%", 0.5),
    ("12.5%", 0.125),
    ("200 * 15%", 30.0),
    ("50% + 25%", 0.75),
    ("(10)%", 0.1),
    ("150% * 4", 6.0),
    # thousands separators
    ("1,234 + 1", 1235),
    ("1,000,000 / 4", 250000.0),
    ("-1,000 * 2", -2000),
    # a caret is a power, as on a calculator (never XOR), with a power's precedence
    ("2^20", 1048576),
    ("2 ^ 3 * 2", 16),
    ("-2^2", -4),
    ("2^3^2", 512),
    # unicode operators
    ("3 \u00d7 4", 12),
    ("8 \u00f7 2", 4.0),
    # functions
    ("sqrt(16)", 4.0),
    ("sqrt(2.25)", 1.5),
    ("abs(-5)", 5),
    ("abs(3 - 10)", 7),
    ("round(2.567)", 3),
    ("round(-2.5)", -2),
    ("floor(2.7)", 2),
    ("ceil(2.1)", 3),
    ("floor(-2.5)", -3),
    ("log10(1000)", 3.0),
    ("exp(0)", 1.0),
    ("sqrt(sqrt(16))", 2.0),
    ("min(3, 7)", 3),
    ("max(3, 7)", 7),
    ("max(1, 5, 2)", 5),
    ("min(4, -2, 9)", -2),
    ("max(2 * 3, 10 / 2)", 6),
    ("round(2.567, 2)", 2.57),
    # constants
    ("pi", math.pi),
    ("e", math.e),
    ("2 * pi", 2 * math.pi),
    ("log(e)", 1.0),
    # the boundaries of the limits
    ("10 ** 300", 10**300),
    ("1 ** -10000", 1.0),
    ("+".join(["1"] * 250), 250),
]


@pytest.mark.parametrize(("expression", "expected"), EXACT, ids=[e for e, _ in EXACT])
def test_evaluate_exact(expression: str, expected: float) -> None:
    result = evaluate(expression)
    assert result == expected
    assert type(result) is type(expected)


APPROX: list[tuple[str, float]] = [
    ("17% * 2340", 397.8),
    ("2,340 * 17%", 397.8),
    ("0.1 + 0.2", 0.3),
    ("sqrt(2)", 1.4142135623730951),
    ("1 / 3", 0.3333333333333333),
    ("pi * 2 ** 2", 12.566370614359172),
    ("5% * 1,200 + 3", 63.0),
]


@pytest.mark.parametrize(("expression", "expected"), APPROX, ids=[e for e, _ in APPROX])
def test_evaluate_approx(expression: str, expected: float) -> None:
    assert evaluate(expression) == pytest.approx(expected, rel=1e-12)


def test_percent_of_a_number() -> None:
    assert evaluate("17% * 2340") == pytest.approx(397.8)
    assert evaluate("17 % 2340") == 17


def test_modulo_of_a_function_result() -> None:
    assert evaluate("10 % sqrt(4)") == 0
    assert evaluate("7 % abs(-4)") == 3


def test_integer_arithmetic_stays_exact() -> None:
    assert evaluate("2 ** 64 + 1") == 18446744073709551617
    assert evaluate("99999999999999999 * 3") == 299999999999999997


# -- evaluate: what it refuses ------------------------------------------------------------------

REFUSED: list[tuple[str, str]] = [
    # not arithmetic
    ("__import__('os')", "unsupported element"),
    ("__import__('os').system('true')", "unsupported element"),
    ("().__class__", "unsupported element"),
    ("(1).__class__.__bases__", "unsupported element"),
    ("lambda: 1", "unsupported element"),
    ("(lambda: 1)()", "unsupported element"),
    ("[x for x in range(3)]", "unsupported element"),
    ("{x: 1 for x in range(3)}", "unsupported element"),
    ("'abc'", "unsupported element"),
    ("'a' * 3", "unsupported element"),
    ("b'1'", "unsupported element"),
    ("open('/etc/passwd')", "unsupported element"),
    ("eval('1')", "unsupported element"),
    ("pow(8)", "unsupported element"),
    ("hypot(3)", "unsupported element"),
    ("x + 1", "unsupported element"),
    ("sqrt", "unsupported element"),
    ("math.sqrt(4)", "unsupported element"),
    ("abs(x=1)", "unsupported element"),
    ("max(*[1])", "unsupported element"),
    ("True + 1", "unsupported element"),
    ("None", "unsupported element"),
    ("1j", "unsupported element"),
    ("~1", "unsupported element"),
    ("not 1", "unsupported element"),
    ("1 < 2", "unsupported element"),
    ("1 and 2", "unsupported element"),
    ("1 if 1 else 2", "unsupported element"),
    ("[1]", "unsupported element"),
    ("1 << 3", "unsupported element"),
    ("1 & 3", "unsupported element"),
    ("(x := 1)", "unsupported element"),
    ("f'{1}'", "unsupported element"),
    # not even Python expressions
    ("import os", "not an arithmetic expression"),
    ("1; 2", "not an arithmetic expression"),
    ("1 +", "not an arithmetic expression"),
    ("2 ** ", "not an arithmetic expression"),
    ("(1", "not an arithmetic expression"),
    # too large to compute
    ("2**99999", "exponent .* too large"),
    ("2 ** -99999", "exponent .* too large"),
    ("9**9**9", "exponent .* too large"),
    ("round(10**300, -3*10**7)", "round: -30000000 digits is too many"),  # minutes, on the loop
    ("log(2, 1)", "log: float division by zero"),
    ("10 ** 10001", "exponent .* too large"),
    ("10 ** 301", "not a real number of reasonable size"),
    ("10 ** 300 * 10", "not a real number of reasonable size"),
    ("-(10 ** 300) - 10 ** 300", "not a real number of reasonable size"),
    ("1e308 * 10", "not a real number of reasonable size"),
    ("(10 ** 300) ** 2", "not a real number of reasonable size"),
    ("1.5 ** 5000", "."),
    ("10.0 ** 400", "."),
    ("exp(1000)", "."),
    # not a real number
    ("(-8) ** 0.5", "not a real number"),
    ("sqrt(-1)", "sqrt: "),
    ("log(0)", "log: "),
    ("min()", "min: "),
    # division by zero
    ("1 / 0", "division by zero"),
    ("1 // 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("1 / (2 - 2)", "division by zero"),
    # empty and over-long
    ("", "1-500 characters"),
    ("   ", "1-500 characters"),
    (",", "not an arithmetic expression"),
    ("+".join(["1"] * 251), "1-500 characters"),
    ("1" * 501, "1-500 characters"),
]


@pytest.mark.parametrize(("expression", "pattern"), REFUSED, ids=[e[:40] for e, _ in REFUSED])
def test_evaluate_refuses(expression: str, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        evaluate(expression)


def test_refusal_lists_what_is_allowed() -> None:
    expression = "__import__('os')"
    with pytest.raises(
        ValueError, match=rf"^unsupported element {re.escape(repr(expression))}: "
    ) as info:
        evaluate(expression)
    for name in ("abs", "ceil", "exp", "floor", "log", "log10", "max", "min", "round", "sqrt"):
        assert name in str(info.value)


_OPERATORS: dict[str, Callable[[int, int], int]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}


@given(
    st.integers(min_value=-10_000, max_value=10_000),
    st.sampled_from(sorted(_OPERATORS)),
    st.integers(min_value=-10_000, max_value=10_000),
)
def test_evaluate_matches_python(a: int, op: str, b: int) -> None:
    result = evaluate(f"{a} {op} {b}")
    assert result == _OPERATORS[op](a, b)
    assert type(result) is int


# -- the calculate tool -------------------------------------------------------------------------


def test_calculate_definition() -> None:
    d = calculate.definition
    assert d.name == "calculate"
    assert d.annotations == ToolAnnotations(read_only=True, idempotent=True, open_world=False)
    assert d.input_schema["required"] == ["expression"]
    assert d.input_schema["additionalProperties"] is False
    properties = d.input_schema["properties"]
    assert isinstance(properties, dict)
    expression = properties["expression"]
    assert isinstance(expression, dict)
    assert expression["type"] == "string"
    assert d.description.startswith("Evaluate an arithmetic expression")


@pytest.mark.parametrize(
    ("expression", "text", "structured"),
    [
        ("17% * 2340", "397.8", 397.8),
        ("2 ** 10", "1024", 1024),
        ("sqrt(16)", "4", 4),
        ("7 / 2", "3.5", 3.5),
        ("1 / 3", "0.333333333333", 0.333333333333),
        ("0.1 + 0.2", "0.3", 0.3),
        ("10 / 4 * 2", "5", 5),
        ("-9 / 3", "-3", -3),
        ("2 ** 60", "1152921504606846976", 2**60),
        ("1,000 * 3", "3000", 3000),
    ],
)
async def test_calculate(expression: str, text: str, structured: float) -> None:
    result = await call(calculate, {"expression": expression})
    assert result == ToolResult(content=(TextBlock(text=text),), structured=structured)
    assert type(result.structured) is type(structured)


async def test_calculate_large_float_stays_float() -> None:
    result = await call(calculate, {"expression": "2.0 ** 60"})
    assert result.structured == 2.0**60
    assert type(result.structured) is float


@pytest.mark.parametrize(
    ("expression", "pattern"),
    [
        ("__import__('os')", r"^cannot calculate \"__import__\('os'\)\": unsupported element"),
        ("1 / 0", r"^cannot calculate '1 / 0': division by zero$"),
        ("2 ** 99999", r"^cannot calculate '2 \*\* 99999': exponent"),
        ("", r"^cannot calculate '': expression must be 1-500 characters$"),
        ("1.5 ** 5000", r"^cannot calculate '1\.5 \*\* 5000': "),
    ],
)
async def test_calculate_bad_input_is_model_retry(expression: str, pattern: str) -> None:
    with pytest.raises(ModelRetry, match=pattern):
        await call(calculate, {"expression": expression})


def test_calculate_validates_its_arguments() -> None:
    with pytest.raises(ModelRetry, match=r"^invalid arguments: expression: .*valid string"):
        calculate.validator({"expression": 5})
    with pytest.raises(ModelRetry, match=r"^invalid arguments: expression: Field required$"):
        calculate.validator({})
    with pytest.raises(ModelRetry, match="code: Extra inputs are not permitted"):
        calculate.validator({"expression": "1", "code": "x"})


# -- the clock tools ----------------------------------------------------------------------------


def test_clock_definitions() -> None:
    for t in (current_time, days_until):
        assert t.annotations.is_read_only
        assert not t.annotations.is_open_world
    assert current_time.definition.input_schema.get("required") is None
    assert days_until.definition.input_schema["required"] == ["target"]


async def test_days_until() -> None:
    before = datetime.now(UTC).date()
    result = await call(days_until, {"target": "2027-01-01"})
    after = datetime.now(UTC).date()
    data = result.structured
    assert isinstance(data, dict)
    assert data["target"] == "2027-01-01"
    expected = {(date(2027, 1, 1) - before).days, (date(2027, 1, 1) - after).days}
    assert data["days"] in expected
    assert data["today"] in {before.isoformat(), after.isoformat()}
    assert data["days"] == (date(2027, 1, 1) - date.fromisoformat(str(data["today"]))).days


async def test_days_until_a_past_date_is_negative() -> None:
    today = datetime.now(UTC).date()
    result = await call(days_until, {"target": " 2000-01-01 "})
    data = result.structured
    assert isinstance(data, dict)
    assert data["target"] == "2000-01-01"
    days = data["days"]
    assert isinstance(days, int)
    assert days < 0
    assert days in {(date(2000, 1, 1) - today).days, (date(2000, 1, 1) - today).days - 1}


async def test_days_until_today_is_zero() -> None:
    today = datetime.now(UTC).date()
    result = await call(days_until, {"target": today.isoformat()})
    data = result.structured
    assert isinstance(data, dict)
    assert data["days"] in {0, -1}
    assert data["days"] == (today - date.fromisoformat(str(data["today"]))).days


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "Pacific/Pago_Pago", "Europe/Paris"])
async def test_days_until_counts_from_today_in_the_zone(zone: str) -> None:
    tz = ZoneInfo(zone)
    before = datetime.now(tz).date()
    result = await call(days_until, {"target": "2030-06-15", "timezone": zone})
    after = datetime.now(tz).date()
    data = result.structured
    assert isinstance(data, dict)
    assert data["today"] in {before.isoformat(), after.isoformat()}
    assert data["days"] in {(date(2030, 6, 15) - before).days, (date(2030, 6, 15) - after).days}


@pytest.mark.parametrize("target", ["2027-13-01", "2027-02-30", "tomorrow", "", "01/01/2027"])
async def test_days_until_bad_date_is_model_retry(target: str) -> None:
    with pytest.raises(ModelRetry, match="is not a date: use YYYY-MM-DD"):
        await call(days_until, {"target": target})


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "../../etc/passwd", "Not A Zone"])
async def test_days_until_bad_timezone_is_model_retry(zone: str) -> None:
    with pytest.raises(ModelRetry, match="unknown time zone"):
        await call(days_until, {"target": "2027-01-01", "timezone": zone})


async def test_current_time_default_is_utc() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = await call(current_time, {})
    after = datetime.now(UTC)
    data = result.structured
    assert isinstance(data, dict)
    assert set(data) == {"datetime", "date", "weekday"}
    now = datetime.fromisoformat(str(data["datetime"]))
    assert now.utcoffset() == timedelta(0)
    assert before <= now <= after
    assert data["date"] == now.date().isoformat()
    assert data["weekday"] == now.strftime("%A")


@pytest.mark.parametrize(
    ("zone", "offsets"),
    [
        ("Asia/Kolkata", {timedelta(hours=5, minutes=30)}),
        ("Europe/Paris", {timedelta(hours=1), timedelta(hours=2)}),
        ("America/New_York", {timedelta(hours=-5), timedelta(hours=-4)}),
    ],
)
async def test_current_time_in_a_zone(zone: str, offsets: set[timedelta]) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = await call(current_time, {"timezone": zone})
    after = datetime.now(UTC)
    data = result.structured
    assert isinstance(data, dict)
    now = datetime.fromisoformat(str(data["datetime"]))
    assert now.utcoffset() in offsets
    assert now.utcoffset() == datetime.now(ZoneInfo(zone)).utcoffset()
    assert before <= now <= after
    assert data["date"] == now.date().isoformat()
    assert data["weekday"] == now.strftime("%A")


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "UTC+5"])
async def test_current_time_bad_timezone_is_model_retry(zone: str) -> None:
    with pytest.raises(
        ModelRetry, match=rf"^unknown time zone {re.escape(repr(zone))}: use an IANA name"
    ):
        await call(current_time, {"timezone": zone})
