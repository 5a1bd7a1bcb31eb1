"""Redaction's former gaps: key names and formats, encoded and hidden secrets, long lists of
known ones; and the ordinary text around them (token counts, ports) that must stay."""

from __future__ import annotations

import base64
import time
from urllib.parse import quote

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import Agent, tool
from tether.codec import encode_event
from tether.policy.redaction import Redaction, Redactor
from tether.testing import ScriptedModel, call, finish

PW = "S3cretPass"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # URL-encoded
        (f"q=1&password%3D{PW}%26x%3D1", "q=1&password%3D[REDACTED:password]%26x%3D1"),
        (
            f"next=https%3A%2F%2Fadmin%3A{PW}%40db.example.com%2Fapp",
            "next=https%3A%2F%2Fadmin%3A[REDACTED:url_password]%40db.example.com%2Fapp",
        ),
        # invisible characters inside a name or a key
        (f"pass\u200bword={PW}", "pass\u200bword=[REDACTED:password]"),
        (f"api\u2060_key: {PW}", "api\u2060_key: [REDACTED:password]"),
        ("sk-ant-api03-abcdef\u200bghijklmnopqrstuvwxyz!", "[REDACTED:anthropic_key]!"),
        ("ghp_abcdefghijklmnop\ufeffqrstuvwxyz0123456789", "[REDACTED:github_token]"),
    ],
)
def test_forms_the_patterns_did_not_know_are_redacted(text: str, expected: str) -> None:
    redactor = Redactor()
    assert redactor.redact_text(text) == expected
    assert redactor.might_match(orjson.dumps({"text": text}))  # the fast path looks


@pytest.mark.parametrize(
    "text",
    [
        "https://example.com/search?q=a%20b&page=2 costs 50%",
        "in\u00adcredible caf\u00e9 \u200bzero width",
    ],
)
def test_ordinary_text_around_the_new_forms_is_left_alone(text: str) -> None:
    assert Redactor().redact_text(text) == text


async def test_hidden_keys_in_structured_results_are_redacted() -> None:
    @tool(read_only=True, open_world=False)
    def fetch() -> dict[str, object]:
        """Fetch."""
        return {"pass\u200bword": "hunter2hunter2"}

    outcome = await Agent(model=ScriptedModel([call("fetch"), finish("done")]), tools=[fetch]).run(
        "fetch it"
    )
    everything = b"\n".join(encode_event(e) for e in outcome.events)
    assert b"hunter2hunter2" not in everything


def test_a_known_secret_is_redacted_encoded_and_with_invisible_characters() -> None:
    redactor = Redactor()
    found = Redaction()
    secret = "hunter2-Zq9!x"
    assert redactor.redact_text(f"password={secret}", found) == "password=[REDACTED:password]"
    basic = base64.b64encode(f"admin:{secret}".encode()).decode()
    urlsafe = base64.urlsafe_b64encode(f"xy{secret}".encode()).decode()
    for text in (
        f"auth {basic} ok",  # base64(user:password), no Basic header to name it
        f"data={urlsafe}&x=1",
        f"q={quote(secret, safe='')}",
        "hun\u200bter2-Zq9!x",
    ):
        out = redactor.redact_text(text, known=found.values)
        assert "[REDACTED:password]" in out, text
        assert secret not in out
        assert basic[4:-4] not in out  # the whole base64 text goes
    assert redactor.redact_text(f"auth {basic} ok", known=found.values) == (
        "auth [REDACTED:password] ok"
    )


async def test_a_secret_echoed_encoded_reaches_no_event() -> None:
    secret = "hunter2-Zq9!x"

    @tool(read_only=True, open_world=False)
    def login(password: str) -> str:
        """Logs in.

        Args:
            password: The password.
        """
        basic = base64.b64encode(f"admin:{password}".encode()).decode()
        return f"sent {basic} to {quote(f'https://x/?p={password}', safe='')}"

    model = ScriptedModel([call("login", password=secret), finish("done")])
    outcome = await Agent(model=model, tools=[login]).run(f"log in, password={secret}")
    assert outcome.status == "finished"
    everything = b"\n".join(encode_event(e) for e in outcome.events)
    assert secret.encode() not in everything
    assert base64.b64encode(f"admin:{secret}".encode()) not in everything
    assert quote(secret, safe="").encode() not in everything


async def test_many_known_secrets_are_searched_in_one_pass() -> None:
    # one str.replace per known secret: 50,000 of them over 450 kB took 39 s (now 0.5 s)
    secrets = {f"Zq{i:06d}x": "password" for i in range(50_000)}
    text = " ".join(secrets)
    started = time.monotonic()
    out = Redactor().redact_text(text, known=secrets)
    assert time.monotonic() - started < 5
    assert out == " ".join(["[REDACTED:password]"] * len(secrets))
    # a tool's text built to make a search for them backtrack (each a near miss)
    near = {"a" * n + "b": "password" for n in range(6, 400)}
    started = time.monotonic()
    assert Redactor().redact_text("a" * 100_000, known=near) == "a" * 100_000
    assert time.monotonic() - started < 5


_HOSTILE = [
    *("x-", "-p", "%2", "a@", "%3A%2F%2Fa%3A", "\u200b", "\\u0041", "\\", '\\"', "://a:"),
]


@pytest.mark.parametrize("seed", _HOSTILE)
def test_text_built_to_make_the_new_patterns_backtrack_takes_linear_time(seed: str) -> None:
    # a guard against the catastrophic case, not a speed goal: 100 kB of "x-" held the
    # personal patterns' email search for 10 s (each start scanned to the end of the run)
    redactor = Redactor(personal=True)
    for text in ((seed * 100_000)[:100_000], seed + "a" * 100_000, (seed + " ") * 20_000):
        started = time.monotonic()
        redactor.redact_text(text, known={"hunter2hunter2": "password"})
        assert time.monotonic() - started < 2, (seed, text[:40])


_PART = st.sampled_from(
    [
        *("password", "secret", "api_key", "Bearer", "://", "%3A", "%2F", "%3D", "%22", "%40"),
        *("%20", "\u200b", "\u2060", "\ufeff", "\\u0041", "\\u200b", '\\"', "\\/", '"'),
        *("'", ":", "=", ",", " ", "\t", "\n", "@", "ab12CD34ef56GH78ij", "hunter22"),
        *("host.example.com", "sk-", "ghp_", "x", "1", "-", "_", "/"),
    ]
)


@settings(max_examples=1500, deadline=None)
@given(parts=st.lists(_PART, max_size=14))
def test_the_probe_is_never_stricter_than_what_a_reading_finds(parts: list[str]) -> None:
    redactor = Redactor(personal=True)
    text = "".join(parts)
    if redactor.redact_text(text) != text:
        assert redactor.might_match(orjson.dumps([text]))
