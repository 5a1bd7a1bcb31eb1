"""Redaction's former gaps: key names and formats, encoded and hidden secrets, long lists of
known ones; and the ordinary text around them (token counts, ports) that must stay."""

from __future__ import annotations

import base64
import re
import time
from urllib.parse import quote

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether import Agent, tool
from tether.codec import encode_event
from tether.policy.redaction import Redaction, Redactor
from tether.policy.secretpatterns import SECRET_PATTERNS, SECRET_WORD_BITS, secret_words_in
from tether.testing import ScriptedModel, call, finish

PW = "S3cretPass"
TOK = "Zq9xYw8vUt7sRq6pOn5m"  # 20 characters, both cases and digits: a token's look


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a bare "token" key, and names that end in it
        (f'{{"token": "{TOK}"}}', '{"token": "[REDACTED:token]"}'),
        (f"{{'token': '{TOK}'}}", "{'token': '[REDACTED:token]'}"),
        (f"refresh_token={TOK}&x=1", "refresh_token=[REDACTED:token]&x=1"),
        (f"VAULT_TOKEN={TOK}", "VAULT_TOKEN=[REDACTED:token]"),
        (f'sessionToken: "{TOK}"', 'sessionToken: "[REDACTED:token]"'),
        (f"Private-Token: {TOK}", "Private-Token: [REDACTED:token]"),
        (f"gh auth login --token {TOK}", "gh auth login --token [REDACTED:token]"),
        ("--auth-token=ab1", "--auth-token=[REDACTED:token]"),
        # clients that take a password in a flag of their own
        (f"mysql -u root -p{PW} app", "mysql -u root -p[REDACTED:password] app"),
        (
            f"mysqldump -h db -uroot -p'{PW} x' app",
            "mysqldump -h db -uroot -p'[REDACTED:password]' app",
        ),
        (f'["mysql", "-u", "root", "-p{PW}"]', '["mysql", "-u", "root", "-p[REDACTED:password]"]'),
        (f"mysql --password {PW} app", "mysql --password [REDACTED:password] app"),
        (f"sshpass -p {PW} ssh -p 22 host", "sshpass -p [REDACTED:password] ssh -p 22 host"),
        (
            f"sshpass -f /dev/null -p{PW} ssh host",
            "sshpass -f /dev/null -p[REDACTED:password] ssh host",
        ),
        (f"redis-cli -h cache -a {PW} ping", "redis-cli -h cache -a [REDACTED:password] ping"),
        (
            f"ldapsearch -x -D cn=admin -w {PW} -b dc=x",
            "ldapsearch -x -D cn=admin -w [REDACTED:password] -b dc=x",
        ),
        (
            f"sqlcmd -S db -U sa -P {PW} -Q 'select 1'",
            "sqlcmd -S db -U sa -P [REDACTED:password] -Q 'select 1'",
        ),
        (
            f"docker login -u me -p {PW} registry.example.com",
            "docker login -u me -p [REDACTED:password] registry.example.com",
        ),
        (
            f"mongosh -u admin -p {PW} --authenticationDatabase admin",
            "mongosh -u admin -p [REDACTED:password] --authenticationDatabase admin",
        ),
        (
            f"curl -u admin:{PW} https://api.example.com",
            "curl -u admin:[REDACTED:password] https://api.example.com",
        ),
        (
            f"openssl enc -aes256 -pass pass:{PW} -in x",
            "openssl enc -aes256 -pass pass:[REDACTED:password] -in x",
        ),
        (f"keytool -list -storepass {PW}", "keytool -list -storepass [REDACTED:password]"),
        (
            f'["helm", "repo", "add", "--password", "{PW}"]',
            '["helm", "repo", "add", "--password", "[REDACTED:password]"]',
        ),
        (
            f"ssh-keygen -t ed25519 --passphrase {PW}",
            "ssh-keygen -t ed25519 --passphrase [REDACTED:password]",
        ),
        # headers
        (f"Authorization: Token {TOK}", "Authorization: Token [REDACTED:authorization]"),
        (
            "Authorization: Bot MTk4NjIy.Cl2FMQ.ZnCjm1XVW7",
            "Authorization: Bot [REDACTED:authorization]",
        ),
        (f"-H 'Authorization: {TOK}'", "-H 'Authorization: [REDACTED:authorization]'"),
        (f"Cookie: sessionid={PW}; csrftoken=x", "Cookie: [REDACTED:cookie]"),
        (
            f"Set-Cookie: session={PW}; Path=/; HttpOnly\nnext",
            "Set-Cookie: [REDACTED:cookie]\nnext",
        ),
        # lists and objects in text, plural names, a passphrase
        (f"passwords: [{PW}, Other1Pass]", "passwords: [[REDACTED:password]]"),
        (f'"api_keys": ["{PW}", "k2k2k2k2"]', '"api_keys": [[REDACTED:password]]'),
        (f"{{'secrets': {{'db': '{PW}'}}}}", "{'secrets': {[REDACTED:password]}}"),
        (f'"secrets": "{PW}"', '"secrets": "[REDACTED:password]"'),
        ("passphrase: correct-horse-battery", "passphrase: [REDACTED:password]"),
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
        # formats
        ("glpat-abcdefghij0123456789", "[REDACTED:gitlab_token]"),
        ("hf_abcdefghijklmnopqrstuvwxyz012345", "[REDACTED:huggingface_token]"),
        ("npm_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED:npm_token]"),
    ],
)
def test_forms_the_patterns_did_not_know_are_redacted(text: str, expected: str) -> None:
    redactor = Redactor()
    assert redactor.redact_text(text) == expected
    assert redactor.might_match(orjson.dumps({"text": text}))  # the fast path looks


@pytest.mark.parametrize(
    "text",
    [
        '{"max_tokens": 512, "tokens": 40, "token_count": 7, "max_new_tokens": 64}',
        '"usage": {"input_tokens": 1234, "output_tokens": 56, "total_tokens": 1290}',
        '{"token": " world", "logprob": -0.31, "top_logprobs": [{"token": "Hello"}]}',
        '{"token": "implementation"}',
        "token: 42 and Token: 512; token_id=50256, pad_token_id: 0, tokenizer: gpt2",
        f'{{"NextToken": "{TOK}", "nextPageToken": "{TOK}", "next_token": "{TOK}"}}',
        f"aws s3api list-objects --starting-token {TOK} --max-items 5",
        "eos_token: </s>, bos_token='<s>'",
        "docker run -p 8080:80 nginx && ssh -p 22 host",
        "docker run --name mysql -p 3306:3306 mysql:8",
        "docker run --name mongo -p 27017:27017 mongo",
        "mysql -u root -p app  # asks for the password",
        "mysql -h db -P 3306 -u root app",
        "sshpass -e ssh -p 22 host",
        "curl -u admin https://api.example.com",
        "ffmpeg -i in.mp4 -pass 1 -f null /dev/null",
        "Authorization: required; authorization: pending review",
        "cookie: chocolate chip",
        "passwords: [] and secrets = {}",
        "https://example.com/search?q=a%20b&page=2 costs 50%",
        "in\u00adcredible caf\u00e9 \u200bzero width",
        "the password prompt, the api_key field, a secret santa",
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


async def test_token_keys_in_structured_results_are_redacted_and_page_tokens_kept() -> None:
    result: dict[str, object] = {
        "refresh_token": TOK,
        "NextToken": "AbCdEf0123456789xyzW",  # a page token: passed back, not a secret
        "logprobs": [{"token": " world", "logprob": -0.3}],
    }

    @tool(read_only=True, open_world=False)
    def fetch() -> dict[str, object]:
        """Fetch."""
        return result

    outcome = await Agent(model=ScriptedModel([call("fetch"), finish("done")]), tools=[fetch]).run(
        "fetch it"
    )
    everything = b"\n".join(encode_event(e) for e in outcome.events)
    assert TOK.encode() not in everything
    assert b"AbCdEf0123456789xyzW" in everything
    assert b'" world"' in everything


def test_many_known_secrets_are_searched_in_one_pass() -> None:
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
    *("token:", 'token: "', "--token ", "mysql -", "mongo -p ", "sshpass -f ", "sshpass -"),
    *("docker login ", "redis-cli -a", "sqlcmd -P", "curl -u ", "curl -u a:", "-pass pass:"),
    *("authorization:", "Authorization: token ", "cookie:", "set-cookie:a=", "passwords: ["),
    *("secrets:{a", "--password ", "-storepass ", 'password: "', "glpat-", "hf_"),
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


_NEW_PART = st.sampled_from(
    [
        *("token", "Token", "password", "secret", "api_key", "passphrase", "--token", "-p"),
        *("-a", "-w", "-P", "-u", "mysql", "mongo", "sshpass", "redis-cli", "curl", "-pass"),
        *("pass:", "storepass", "Cookie", "Authorization", "Token", "Bearer", "://", "%3A"),
        *("%2F", "%3D", "%22", "%40", "%20", "\u200b", "\u2060", "\ufeff", "\\u0041"),
        *("\\u200b", '\\"', "\\/", '"', "'", ":", "=", ",", " ", "\t", "\n", "[", "]"),
        *("{", "}", "@", "ab12CD34ef56GH78ij", "hunter22", "8080:80", "host.example.com"),
        *("sk-", "ghp_", "glpat-", "x", "1", "-", "_", "/"),
    ]
)


@settings(max_examples=1500, deadline=None)
@given(parts=st.lists(_NEW_PART, max_size=14))
def test_the_probe_is_never_stricter_than_the_new_patterns(parts: list[str]) -> None:
    redactor = Redactor(personal=True)
    text = "".join(parts)
    if redactor.redact_text(text) != text:
        assert redactor.might_match(orjson.dumps([text]))


@settings(max_examples=1500, deadline=None)
@given(parts=st.lists(_NEW_PART, max_size=14))
def test_a_pattern_is_skipped_only_where_it_cannot_match(parts: list[str]) -> None:
    # a text is searched only with the patterns one of whose words it holds
    text = "".join(parts)
    present = secret_words_in(text)
    for (kind, pattern), bits in zip(SECRET_PATTERNS, SECRET_WORD_BITS, strict=True):
        if re.search(pattern, text, re.ASCII) is not None:
            assert bits & present, (kind, text)


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        (
            "GET /login?user=bob&password=correct%20horse%20battery%20staple",
            "GET /login?user=bob&password=[REDACTED:password]",
        ),
        (
            'curl "https://x/?api_key=abcdEF12%2Cxyz987"',
            'curl "https://x/?api_key=[REDACTED:password]"',
        ),
        ("password=hunter2%26rest99&x=1", "password=[REDACTED:password]&x=1"),
    ],
)
def test_a_percent_encoded_value_is_redacted_whole(text: str, redacted: str) -> None:
    # the URL-decoded reading ended the value at its decoded "%20" (a space), and what
    # followed was left in the log: "password=[REDACTED:password]%20horse%20battery%20staple"
    assert Redactor().redact_text(text) == redacted
