"""The secrets a run learns, and the regexes that find them, live as long as that run."""

from __future__ import annotations

import gc
import secrets
import types
from collections.abc import Iterator

from tether import Agent, tool
from tether.policy.knownsecrets import KnownSecrets
from tether.policy.redaction import Redactor
from tether.run import journal
from tether.testing import ScriptedModel, call, finish

_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def texts_held(*roots: object) -> Iterator[str]:
    """Every string reachable from ``roots`` through containers and instances (not through
    functions, classes or modules: those reach the whole program)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _OPAQUE):
            continue
        seen.add(id(item))
        if isinstance(item, str):
            yield item
            continue
        stack.extend(gc.get_referents(item))


@tool
async def login(user: str, password: str) -> str:
    """Log in.

    Args:
        user: Who.
        password: Their password.
    """
    return f"welcome {user}, your session key is {password}"  # echoed: no pattern sees it


@tool
async def database() -> str:
    """Where the database is."""
    return f"postgres://app:{PASSWORD}@db:5432/app"


PASSWORD = f"Hq7{secrets.token_hex(8)}"  # made at run time: no constant of the test holds it


async def test_a_run_s_secrets_are_not_kept_by_what_its_agent_s_runs_share() -> None:
    redactor = Redactor()
    model = ScriptedModel([call("database"), finish(f"connected with {PASSWORD}")])
    agent = Agent(model=model, tools=[database], redactor=redactor)
    # the goal names it before the run learns it, from the tool's result: the verdict on the
    # goal's text, which the agent's runs share, holds it
    outcome = await agent.run(f"is {PASSWORD} the database's password?")
    assert outcome.output == "connected with [REDACTED:url_password]"  # found by the run
    shared = (redactor, journal._PASSED.get(redactor))  # pyright: ignore[reportPrivateUsage]
    assert not [text for text in texts_held(*shared) if PASSWORD in text]


async def test_the_next_run_of_the_agent_knows_none_of_the_last_one_s_secrets() -> None:
    password = f"Zr4{secrets.token_hex(8)}"
    redactor = Redactor()
    first = Agent(
        model=ScriptedModel([call("login", user="ann", password=password), finish("done")]),
        tools=[login],
        redactor=redactor,
    )
    await first.run("log in")
    # bare, where no pattern sees it: another run's secret is not this run's to redact
    second = Agent(model=ScriptedModel([finish(f"ann's note: {password}")]), redactor=redactor)
    outcome = await second.run("what was the note?")
    assert outcome.output == f"ann's note: {password}"


def test_known_secrets_are_forgotten_with_their_regexes() -> None:
    known = KnownSecrets()
    known.learn([("s3cret-value-1", "password")])
    assert known.spans("a s3cret-value-1 b") == [(2, 16, "password")]
    joined = known.joined({"other-secret-2": "token"})
    assert joined.spans("other-secret-2 s3cret-value-1") == [
        (0, 14, "token"),
        (15, 29, "password"),
    ]
    assert "s3cret" not in repr(known)
    known.forget()
    assert len(known) == 0
    assert known.spans("a s3cret-value-1 b") == []
    assert not [text for text in texts_held(known) if "s3cret" in text]


def test_no_regex_of_a_run_s_secrets_stays_in_re2_s_cache() -> None:
    # before: re2.compile kept each alternation in its process-wide cache (128 patterns), so
    # the secrets outlived the run whatever ``forget`` dropped
    import gc

    known = KnownSecrets()
    known.learn([("cache-held-s3cret-9", "password")])
    assert known.spans("x cache-held-s3cret-9") == [(2, 21, "password")]
    known.forget()
    gc.collect()
    held = [
        r
        for r in gc.get_objects()
        if type(r).__name__ == "_Regexp" and "s3cret" in str(r.pattern)  # escaped: cache\-held...  # pyright: ignore[reportUnknownMemberType, reportAttributeAccessIssue]
    ]
    assert held == []
