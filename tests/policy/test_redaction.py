"""Redaction: secrets never reach the log, a JSONL file, the store, an export or the console."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tether import Agent, tool
from tether.cli.app import app
from tether.codec import encode_event, read_jsonl
from tether.errors import ConfigError
from tether.events import Redacted
from tether.outcome import RunOutcome
from tether.policy.redaction import Redactor
from tether.replay import replay
from tether.stores import SqliteStore
from tether.testing import ScriptedModel, call, finish

SECRETS = {
    "openai_key": "sk-proj-Abcdefghijklmnopqrstuvwxyz012345",
    "anthropic_key": "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
    "aws_access_key": "AKIAIOSFODNN7EXAMPLE",
    "github_token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "slack_token": "xoxb-1234567890-abcdefghij",
    "google_api_key": "AIzaSyA1234567890abcdefghijklmnopqrstuv",
    "stripe_key": "sk_live_abcdefghijklmnop1234",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTYifQ.abcdefghijklmnopqrstuv",
}


@pytest.mark.parametrize(("kind", "secret"), sorted(SECRETS.items()))
def test_each_kind_of_secret_is_replaced_by_a_marker(kind: str, secret: str) -> None:
    text = f"here it is: {secret} (keep it safe)"
    out = Redactor().redact_text(text)
    assert secret not in out
    assert out == f"here it is: [REDACTED:{kind}] (keep it safe)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "postgres://app:hunter22@db:5432/x",
            "postgres://app:[REDACTED:url_password]@db:5432/x",
        ),
        ("password = 'correct horse'", "password = '[REDACTED:password]'"),
        ('PASSWD: "a b c" and more', 'PASSWD: "[REDACTED:password]" and more'),
        ('{"api_key": "s3cr3t-value"}', '{"api_key": "[REDACTED:password]"}'),
        (
            "Authorization: Bearer abcdefghijklmnop.qrstu",
            "Authorization: Bearer [REDACTED:bearer_token]",
        ),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nafter",
            "[REDACTED:private_key]\nafter",
        ),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\ncut off here", "[REDACTED:private_key]"),
        # the gaps found (issue 12, item 5)
        (
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "AWS_SECRET_ACCESS_KEY=[REDACTED:password]",
        ),
        (
            "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "aws_secret_access_key = [REDACTED:password]",
        ),
        (
            "postgres://admin:p/ss@w0rd@db.example.com:5432/app",
            "postgres://admin:[REDACTED:url_password]@db.example.com:5432/app",
        ),
        ("https://admin:p@ssw0rd!@host/x", "https://admin:[REDACTED:url_password]@host/x"),
        ("redis://:hunter2pw@cache:6379/0", "redis://:[REDACTED:url_password]@cache:6379/0"),
        (
            "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l",
            "Authorization: Basic [REDACTED:basic_auth]",
        ),
        (
            '{"Authorization": "Basic YWxhZGRpbjpvcGVu"}',
            '{"Authorization": "Basic [REDACTED:basic_auth]"}',
        ),
    ],
)
def test_passwords_tokens_and_keys_in_context(text: str, expected: str) -> None:
    assert Redactor().redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "the password is required",  # the word alone
        "sha256 " + "ab12" * 16,  # hashes and ids stay readable
        "run 01JD3K9ZQ4W5X6Y7Z8A9B0C1D2 call call_0_1",
        "https://example.com/path?q=1",
        "mail bob@example.com, call +1 415 555 2671, card 4111 1111 1111 1111",  # personal: off
        "PWD=/home/me OLDPWD=/home/me/src",  # the shell's directories, not passwords
        "tether run --agent app.secret_store:agent; password_reset:main",  # references
        "Secretary: John Smith",
        "Basic math is fun; basic: yes",
        "https://example.com/users/@alice and git@github.com:org/repo.git",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor().redact_text(text) == text


def test_personal_data_is_redacted_when_enabled() -> None:
    redactor = Redactor(personal=True)
    text = "mail bob@example.com, call +1 415 555 2671, card 4111 1111 1111 1111, order 1234567812345678"
    assert redactor.redact_text(text) == (
        "mail [REDACTED:email], call [REDACTED:phone], card [REDACTED:card_number], "
        "order 1234567812345678"  # 16 digits that fail the Luhn check are not a card
    )


def test_custom_patterns_and_callables() -> None:
    def employee_ids(text: str) -> str:
        return re.sub(r"EMP-\d+", "EMP-***", text)

    redactor = Redactor(patterns=[("ticket", r"TKT-\d{4}")], callables=[employee_ids])
    assert redactor.redact_text("TKT-1234 for EMP-77") == "[REDACTED:ticket] for EMP-***"
    with pytest.raises(ConfigError, match="not a valid regex"):
        Redactor(patterns=[("bad", "(")])


@pytest.mark.parametrize(
    "text",
    [
        f"OPENAI_API_KEY follows\n{SECRETS['openai_key']}\n",
        f"key:\t{SECRETS['aws_access_key']}",
        f'{{"token": "{SECRETS["github_token"]}"}}',
        '{"password": "hunter2hunter2"}',
        "db:\n  password: 'hunter2hunter2'\n",
    ],
)
def test_secrets_behind_json_escapes_are_probed_and_redacted(text: str) -> None:
    redactor = Redactor()
    assert redactor.might_match(orjson.dumps({"content": text}))
    out = redactor.redact_text(text)
    assert "[REDACTED:" in out
    for secret in (*SECRETS.values(), "hunter2hunter2"):
        assert secret not in out


def test_keys_of_objects_are_redacted_too() -> None:
    from tether.policy.redaction import Redaction

    found = Redaction()
    out = Redactor().redact_value({SECRETS["anthropic_key"]: 1, "ok": "fine"}, "arguments", found)
    assert out == {"[REDACTED:anthropic_key]": 1, "ok": "fine"}
    assert found.fields == ["arguments.[REDACTED:anthropic_key]"]


_SECRET_TEXT = st.sampled_from(sorted(SECRETS.values()))
_SEPARATOR = st.sampled_from([" ", "\n", "\t", "\r\n", '"', "'", "=", ": ", "\\", "/", "\x00", "é"])
_NOISE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=500)
@given(before=_NOISE, left=_SEPARATOR, secret=_SECRET_TEXT, right=_SEPARATOR, after=_NOISE)
def test_an_embedded_secret_never_survives_and_the_json_probe_sees_it(
    before: str, left: str, secret: str, right: str, after: str
) -> None:
    redactor = Redactor()
    text = f"{before}{left}{secret}{right}{after}"
    out = redactor.redact_text(text)
    assert secret not in out
    assert redactor.might_match(orjson.dumps({"text": text}))  # the fast path never skips it
    assert redactor.redact_text(out) == out  # redacting twice changes nothing more


@settings(max_examples=300)
@given(text=_NOISE)
def test_the_probe_is_never_stricter_than_the_patterns(text: str) -> None:
    redactor = Redactor(personal=True)
    if redactor.redact_text(text) != text:
        assert redactor.might_match(orjson.dumps([text]))


KEY = SECRETS["openai_key"]
TOKEN = SECRETS["github_token"]


@tool(read_only=True, open_world=False)
def read_env(name: str) -> str:
    """Reads a setting.

    Args:
        name: Which setting.
    """
    return f"{name}={KEY} and db postgres://app:hunter22@db/x"


def leaky_agent(tmp_path: Path, store: SqliteStore | None = None) -> Agent:
    return Agent(
        name="leaky",
        model=ScriptedModel([call("read_env", name=f"token {TOKEN}"), finish(f"the key is {KEY}")]),
        tools=[read_env],
        log_dir=tmp_path / "runs",
        store=store,
    )


def test_secrets_reach_neither_the_log_the_store_the_export_nor_the_console(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"

    async def go() -> RunOutcome[str]:
        store = SqliteStore(db)
        try:
            return await leaky_agent(tmp_path, store).run(f"use {TOKEN} to read OPENAI_API_KEY")
        finally:
            await store.close()

    outcome = asyncio.run(go())
    assert outcome.status == "finished"
    assert outcome.answer == "the key is [REDACTED:openai_key]"
    everything = b"\n".join(encode_event(e) for e in outcome.events)
    log = (tmp_path / "runs" / f"{outcome.run_id}.jsonl").read_bytes()
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("t.db*") if p.is_file())
    runner = CliRunner()
    shown = runner.invoke(app, ["show", outcome.run_id, "--db", str(db)])
    exported = runner.invoke(app, ["export", outcome.run_id, "--db", str(db)])
    assert shown.exit_code == 0, shown.output
    assert exported.exit_code == 0, exported.output
    for where in (everything, log, stored, shown.output.encode(), exported.output.encode()):
        for secret in (KEY, TOKEN, "hunter22"):
            assert secret.encode() not in where
    marks = [e for e in outcome.events if isinstance(e, Redacted)]
    assert [(m.of_seq, m.fields, m.kinds) for m in marks] == [
        (0, ("goal",), ("github_token",)),
        (2, ("tool_calls[0].arguments.name",), ("github_token",)),
        (4, ("arguments.name",), ("github_token",)),
        (7, ("content[0].text",), ("openai_key", "github_token", "url_password")),
        (9, ("tool_calls[0].arguments.answer",), ("openai_key",)),
        (11, ("arguments.answer",), ("openai_key",)),
        (16, ("output", "answer"), ("openai_key",)),
    ]
    assert outcome.events[-1].kind == "run_finished"
    assert "[REDACTED:" in shown.output


async def test_the_tool_still_gets_the_real_arguments(tmp_path: Path) -> None:
    seen: list[str] = []

    @tool(read_only=True, open_world=False)
    def echo(text: str) -> str:
        """Echoes.

        Args:
            text: The text.
        """
        seen.append(text)
        return "ok"

    agent = Agent(model=ScriptedModel([call("echo", text=KEY), finish("done")]), tools=[echo])
    outcome = await agent.run("echo it")
    assert seen == [KEY]  # redaction guards what is written, not what the tool receives
    assert KEY.encode() not in b"".join(encode_event(e) for e in outcome.events)


async def test_a_redacted_log_replays_without_divergence(tmp_path: Path) -> None:
    outcome = await leaky_agent(tmp_path).run(f"use {TOKEN}")
    events = read_jsonl(tmp_path / "runs" / f"{outcome.run_id}.jsonl")
    report = await replay(events, agent=leaky_agent(tmp_path / "again"))
    assert report.ok, report.divergence


async def test_redaction_can_be_turned_off(tmp_path: Path) -> None:
    agent = Agent(model=ScriptedModel([finish(f"the key is {KEY}")]), redactor=None)
    outcome = await agent.run("go")
    assert outcome.answer == f"the key is {KEY}"
    assert not any(isinstance(e, Redacted) for e in outcome.events)


async def test_a_secret_found_once_is_redacted_wherever_the_run_meets_it_again(
    tmp_path: Path,
) -> None:
    secret = "hunter2-Zq9!x"
    given: list[str] = []

    @tool(read_only=True, open_world=False)
    def set_password(password: str) -> str:
        """Sets the password.

        Args:
            password: The new password.
        """
        given.append(password)
        return f"done: {password} is the new one"  # no pattern knows this is a secret

    model = ScriptedModel([call("set_password", password=secret), finish(f"set {secret}")])
    store = SqliteStore(tmp_path / "t.db")
    try:
        agent = Agent(model=model, tools=[set_password], store=store, log_dir=tmp_path / "runs")
        outcome = await agent.run("change my password")
    finally:
        await store.close()
    assert outcome.status == "finished"
    assert given == [secret]  # the tool got the real value
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("t.db*") if p.is_file())
    log = (tmp_path / "runs" / f"{outcome.run_id}.jsonl").read_bytes()
    everything = b"\n".join(encode_event(e) for e in outcome.events)
    for where in (stored, log, everything):
        assert secret.encode() not in where
    result = next(e for e in outcome.events if e.kind == "tool_call_finished")
    assert "done: [REDACTED:password] is the new one" in orjson.dumps(result).decode()
    assert outcome.answer == "set [REDACTED:password]"


@pytest.mark.parametrize("text", ["://a:" * 24_000, "password_" * 16_000, "eyJ-" * 80_000])
def test_text_built_to_make_redaction_backtrack_does_not_hold_the_loop(text: str) -> None:
    # a guard against the catastrophic case, not a speed goal (bench/ has those): 120 KB of
    # '://a:' held the event loop for 15 s (quadratic); it now takes about 0.02 s
    started = time.monotonic()
    Redactor().redact_text(text)
    assert time.monotonic() - started < 5


def test_long_secrets_are_still_redacted() -> None:
    token = "T" * 1000  # an RDS IAM token as a URL password is about 1 KB
    assert Redactor().redact_text(f"postgres://admin:{token}@db.internal:5432/x") == (
        "postgres://admin:[REDACTED:url_password]@db.internal:5432/x"
    )
    named = "api_key_" + "x" * 70 + "=abcd1234efgh"
    assert Redactor().redact_text(named).endswith("=[REDACTED:password]")


async def _stored(result: object) -> tuple[bytes, RunOutcome[str]]:
    """A run whose one tool returns ``result``: every event's encoding, and the outcome."""

    @tool(read_only=True, open_world=False)
    async def fetch() -> object:
        """Fetch."""
        return result

    agent = Agent(model=ScriptedModel([call("fetch"), finish("done")]), tools=[fetch])
    outcome = await agent.run("fetch it")
    return b"\n".join(encode_event(e) for e in outcome.events), outcome


@pytest.mark.parametrize(
    ("result", "secret"),
    [
        # a secret as a key: the redacted event named the field through it
        ({"sessions": {"s3ssionT0kenAbc987": {"auth_token": "s3ssionT0kenAbc987"}}}, "s3ssionT0k"),
        ({"creds": {"hunter2hunter2": "password=hunter2hunter2"}}, "hunter2hunter2"),
        # values under a secret's name that are not text
        ({"password": 87654321}, "87654321"),
        ({"api_keys": ["Zx9QwErTyUiOp", "Lk2JhGfDsAzXc"]}, "Zx9QwErTyUiOp"),
        ({"secrets": {"db": "Zx9QwErTyUiOp"}}, "Zx9QwErTyUiOp"),
        # a quoted value longer than 200 characters; escaped forms
        ('{"client_secret": "' + "Ab3" * 70 + '"}', "Ab3Ab3Ab3Ab3"),
        ('{"body": "{\\"password\\": \\"Tr0ub4dor&3xyz\\"}"}', "Tr0ub4dor"),
        ('{"dsn": "postgres:\\/\\/admin:S3cretPgPass@db.internal\\/app"}', "S3cretPgPass"),
        ('{"key": "sk\\u002dproj-Q7xR2mT9vLk3Zp8aWc4YhN1sBf6Ud0Ej"}', "Q7xR2mT9vLk3"),
    ],
)
async def test_secrets_in_keys_odd_values_long_quotes_and_escapes_are_redacted(
    result: object, secret: str
) -> None:
    stored, _ = await _stored(result)
    assert secret.encode() not in stored


async def test_a_result_cut_inside_a_secret_keeps_none_of_it() -> None:
    # the policy's 1,000,000-byte cap cut before "@host" (or a closing quote): no pattern
    # matched the rest, and the password was stored
    cap = 1_000_000
    for space, head, tail in [
        (" ", "postgres://app:S3cretPgPass", "@db.internal:5432/app"),
        (" ", 'DB_PASSWORD="S3cretPgPass', '"\n'),
        ("", "postgres://app:S3cretPgPass", "@db.internal:5432/app"),  # one long token
    ]:
        filler = "x" * (cap - len(head) - len(space))
        stored, outcome = await _stored(filler + space + head + tail)
        assert outcome.status == "finished"
        assert b"S3cretPgPass" not in stored
        assert b"truncated by the policy" in stored


@pytest.mark.parametrize(
    "text",
    [
        'name = input("Enter your password: ")  # ask the user',
        'print("api_key: " + mask(key), file=sys.stderr)',
        "echo 'Enter secret: '; read -s pw",
    ],
)
def test_a_prompt_for_a_secret_is_not_a_secret(text: str) -> None:
    # an unclosed quote mid-text took the rest of the line (and remembered it as a secret)
    assert Redactor().redact_text(text) == text


async def test_an_object_under_a_secret_sounding_key_is_walked_not_wiped() -> None:
    stored, outcome = await _stored(
        {"secrets_backend": {"region": "eu-west-1", "password": "Zx9QwErTyUiOp"}}
    )
    assert b"eu-west-1" in stored
    assert b"Zx9QwErTyUiOp" not in stored
    assert outcome.status == "finished"
