"""Versioned prompt templates (``tether.prompts``): declared variables, a sandbox, the run store."""

from __future__ import annotations

import copy
import hashlib
import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether import Agent, ConfigError
from tether.events import RunStarted
from tether.prompts import PromptStore, PromptTemplate, RenderedPrompt
from tether.stores import MemoryStore, SqliteStore
from tether.testing import ScriptedModel, finish

TRIAGE = (
    "You sort {{ product }} tickets. Answer in {{ language }}.{% if vip %} Be quick.{% endif %}"
)


def test_a_template_declares_what_it_uses_and_renders_a_str_that_knows_its_origin() -> None:
    template = PromptTemplate("triage", TRIAGE)
    assert template.variables == {"product", "language", "vip"}
    assert template.version == hashlib.sha256(TRIAGE.encode()).hexdigest()[:16]
    text = template.render(product="Acme", language="English", vip=True)
    assert text == "You sort Acme tickets. Answer in English. Be quick."
    assert isinstance(text, str)
    assert isinstance(text, RenderedPrompt)
    assert text.provenance() == {
        "id": "triage",
        "version": template.version,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def test_values_are_checked_before_rendering() -> None:
    template = PromptTemplate("triage", TRIAGE)
    with pytest.raises(
        ConfigError, match=r"takes language, product, vip: no value for language, vip"
    ):
        template.render(product="Acme")
    with pytest.raises(ConfigError, match=r"tone not used by it"):
        template.render(product="Acme", language="en", vip=False, tone="warm")


def test_text_that_is_not_unicode_is_refused_with_what_to_do() -> None:
    with pytest.raises(ConfigError, match=r"not valid Unicode text .* errors='replace'"):
        PromptTemplate("bad", "\ud800 {{ name }}")
    with pytest.raises(ConfigError, match="rendered with these values is not valid Unicode"):
        PromptTemplate("ok", "Hi {{ name }}").render(name="\udfff")


def test_a_template_that_does_not_parse_is_refused_when_made() -> None:
    with pytest.raises(ConfigError, match=r"'broken' is not a valid template: .*\(line 1\)"):
        PromptTemplate("broken", "Hello {{ name ")
    for bad in (" ", "", "a@b", "-x", "two words"):
        with pytest.raises(ConfigError, match="id is letters, digits"):
            PromptTemplate(bad, "text")


def test_a_rendered_prompt_survives_a_copy_and_a_pickle() -> None:
    text = PromptTemplate("triage", TRIAGE).render(product="A", language="en", vip=False)
    for copied in (copy.copy(text), copy.deepcopy(text), pickle.loads(pickle.dumps(text))):
        assert copied == text
        assert isinstance(copied, RenderedPrompt)
        assert copied.provenance() == text.provenance()


def test_the_sandbox_keeps_a_template_out_of_python() -> None:
    template = PromptTemplate("sneaky", "{{ name.__class__.__mro__ }}")
    with pytest.raises(ConfigError, match="did not render"):
        template.render(name="x")
    escape = PromptTemplate("fmt", '{{ ("{0.__class__.__mro__}"|attr("format"))(name) }}')
    with pytest.raises(ConfigError, match="reads the values it is given and nothing else"):
        escape.render(name="x")  # CVE-2025-27516: refused since Jinja2 3.1.6
    calls = PromptTemplate("calls", "{{ name.upper() }} {{ items.append(1) }}")
    with pytest.raises(ConfigError, match="did not render"):
        calls.render(name="x", items=[])  # a sandboxed template cannot change its values


async def test_the_store_keeps_every_version(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "runs.db")
    prompts = PromptStore(store)
    try:
        first = await prompts.save(PromptTemplate("greet", "Hello {{ name }}."))
        second = await prompts.save(PromptTemplate("greet", "Hi {{ name }}!"))
        assert await prompts.versions("greet") == [first.version, second.version]
        assert (await prompts.get("greet")).source == "Hi {{ name }}!"
        await prompts.save(PromptTemplate("greet", "Hello {{ name }}."))  # back to the first
        assert await prompts.versions("greet") == [second.version, first.version]
        assert (await prompts.get("greet")).source == "Hello {{ name }}."
        await prompts.save(PromptTemplate("greet.v2", "Yo {{ name }}."))  # another id
        assert await prompts.versions("greet") == [second.version, first.version]
        old = await prompts.get("greet", first.version)
        assert old.render(name="Ada") == "Hello Ada."
        with pytest.raises(ConfigError, match=r"has no version 'nope' \(saved: "):
            await prompts.get("greet", "nope")
        with pytest.raises(ConfigError, match="no prompt 'other' is saved"):
            await prompts.get("other")
    finally:
        await store.close()


async def test_a_run_records_which_template_made_its_instructions() -> None:
    template = await PromptStore(MemoryStore()).save(PromptTemplate("triage", TRIAGE))
    instructions = template.render(product="Acme", language="English", vip=False)
    agent = Agent(name="t", instructions=instructions, model=ScriptedModel([finish("ok")]))
    outcome = await agent.run("Sort this.")
    started = outcome.events[0]
    assert isinstance(started, RunStarted)
    assert started.prompt == instructions.provenance()
    assert started.instructions.startswith("You sort Acme tickets.")
    plain = await Agent(name="p", instructions="Sort.", model=ScriptedModel([finish("ok")])).run(
        "x"
    )
    first = plain.events[0]
    assert isinstance(first, RunStarted)
    assert first.prompt is None


_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="{}%#\r", blacklist_categories=("Cs",)),
    max_size=12,
)
_RESERVED = frozenset(
    {"if", "in", "is", "or", "and", "not", "for", "true", "false", "none", "with", "as"}
    | {"self", "range", "dict", "lipsum", "cycler", "joiner"}  # Jinja2's own globals
)
_NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(lambda n: n not in _RESERVED)


@given(
    parts=st.lists(st.tuples(_TEXT, _NAMES), min_size=1, max_size=5),
    tail=_TEXT,
    values=st.dictionaries(_NAMES, _TEXT, max_size=8),
)
def test_render_of_parse_round_trips_and_a_missing_variable_is_named(
    parts: list[tuple[str, str]], tail: str, values: dict[str, str]
) -> None:
    source = "".join(f"{text}{{{{ {name} }}}}" for text, name in parts) + tail
    template = PromptTemplate("p", source)
    names = {name for _, name in parts}
    assert template.variables == names
    filled = {name: values.get(name, f"<{name}>") for name in names}
    expected = "".join(f"{text}{filled[name]}" for text, name in parts) + tail
    assert template.render(**filled) == expected
    dropped = sorted(names)[0]
    with pytest.raises(ConfigError, match=f"no value for {dropped}"):
        template.render(**{k: v for k, v in filled.items() if k != dropped})


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("{{ 1/0 }}", {}),
        ("{% include 'x' %}", {}),
        ("{{ '%d' % x }}", {"x": "a"}),
        ("{% for i in range(10**8) %}{% endfor %}", {}),
        ("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", {}),
    ],
    ids=["zero-division", "include", "format", "huge-range", "recursion"],
)
def test_a_template_that_fails_to_render_is_a_config_error(
    text: str, values: dict[str, object]
) -> None:
    # each raised its own exception (ZeroDivisionError, TypeError, OverflowError, ...)
    with pytest.raises(ConfigError, match=r"prompt 'p' \(version \w+\) did not render"):
        PromptTemplate("p", text).render(**values)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
            "more than 1000000 items from range()",
        ),
        (
            "{% set r = range(1000) %}{% for i in r %}{% for j in r|reverse %}{% endfor %}"
            "{% endfor %}{{ r|length }}",
            "more than 1000000 items from range()",
        ),
        ("{{ 'ab' * 600000 }}", "'*' would make more than 1000000 items"),
        ("{{ (['a'] * 1000001)|length }}", "'*' would make more than 1000000 items"),
        ("{{ (2 ** 2000000) > 1 }}", "'**' would make a number of more than 1000000 bits"),
        ("{{ lipsum(101)|length }}", "lipsum() makes at most 100 paragraphs"),
    ],
    ids=["nested-ranges", "one-range-nested", "string-times", "list-times", "power", "lipsum"],
)
def test_a_template_cannot_make_a_render_run_for_hours_or_fill_memory(text: str, says: str) -> None:
    # each ran to the end: loops in loops for hours, 'a' * 10**10 until memory ran out
    with pytest.raises(ConfigError, match=r"did not render: OverflowError: ") as raised:
        PromptTemplate("p", text).render()
    assert says in str(raised.value)


def test_ranges_and_operators_within_bounds_render_as_jinja2s() -> None:
    template = PromptTemplate(
        "p",
        "{% for i in range(3) %}{{ loop.index }}/{{ loop.length }} {% endfor %}"
        "{{ range(5)|reverse|list }} {{ range(10)[2:4]|list }} {{ 3 in range(5) }} "
        "{{ range(0, 10, 3)|sum }} {{ '-' * 3 }} {{ [0] * 2 }} {{ 3 * 'x' }} {{ 2 ** 10 }}"
        "{{ lipsum(1, html=False)|length > 0 }}",
    )
    assert template.render() == "1/3 2/3 3/3 [4, 3, 2, 1, 0] [2, 3] True 18 --- [0, 0] xxx 1024True"
    many = PromptTemplate("p", "{% for i in range(100000) %}{% endfor %}{{ range(9)|length }}")
    assert [many.render() for _ in range(15)] == ["9"] * 15  # the budget is each render's
