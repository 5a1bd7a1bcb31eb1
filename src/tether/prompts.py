"""Versioned prompt templates: declared variables, checked before render, kept in the run store.

    from tether.prompts import PromptTemplate, PromptStore

    triage = PromptTemplate(
        "triage",
        "You sort {{ product }} support tickets. Answer in {{ language }}.",
    )
    store = PromptStore(SqliteStore(".tether/tether.db"))
    saved = await store.save(triage)           # its version: the SHA-256 of its text
    agent = Agent(
        name="triage",
        instructions=saved.render(product="Acme", language="English"),
    )

A template is Jinja2 text, rendered in Jinja2's immutable sandbox (a template can neither
reach Python internals nor change the values it is given; a render draws at most a million
items from ``range()`` in all its loops, and ``*`` and ``**`` make nothing larger: bounds
on the common runaway loops, not on a template written to exhaust the machine; templates
are the developer's code, untrusted text their variables) with strict variables: every
variable the template uses is
declared (found by parsing it), and rendering checks the values first. A missing one, or
one the template does not use, is a ``ConfigError`` that names them. What ``render`` returns
is the text (a ``str``) that knows where it came from: as an agent's instructions, each
run's ``run_started`` records the template's id, version and the rendered text's hash.

A version is the first 16 hex digits of the SHA-256 of the template's text: the same text
always has the same version, and two processes saving at once cannot clash. ``PromptStore``
keeps every version in any run store that is also a key-value store (SQLite, memory,
PostgreSQL): ``get(id)`` is the one saved last, ``get(id, version)`` an exact one.

Needs the ``prompts`` extra (``pip install "tether[prompts]"``: Jinja2).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterator, Sequence, Sized
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast, overload

from tether.errors import ConfigError
from tether.jsontypes import JsonObject
from tether.stores.kv import KeyValueStore

if TYPE_CHECKING:
    from jinja2.environment import Template

__all__ = ["PromptStore", "PromptTemplate", "RenderedPrompt"]

_NAMESPACE = "tether.prompts"
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


def _jinja() -> tuple[Any, Any, Any]:
    """Jinja2, its ``meta`` and its ``sandbox`` (imported on first use: an extra)."""
    try:
        import jinja2
        import jinja2.meta as meta
        import jinja2.sandbox as sandbox
    except ImportError:
        raise ConfigError('prompt templates need Jinja2: pip install "tether[prompts]"') from None
    return jinja2, meta, sandbox


class RenderedPrompt(str):
    """A rendered template: the text itself, and which template and version made it."""

    prompt_id: str
    version: str

    def __new__(cls, text: str, *, prompt_id: str, version: str) -> RenderedPrompt:
        """The rendered ``text`` of version ``version`` of template ``prompt_id``."""
        made = super().__new__(cls, text)
        made.prompt_id = prompt_id
        made.version = version
        return made

    def __getnewargs_ex__(self) -> tuple[tuple[str], dict[str, str]]:
        """What a copy or a pickle rebuilds it from (the text and where it came from)."""
        return (str(self),), {"prompt_id": self.prompt_id, "version": self.version}

    @property
    def digest(self) -> str:
        """SHA-256 of the rendered text."""
        return hashlib.sha256(self.encode()).hexdigest()

    def provenance(self) -> JsonObject:
        """What a run records of it: the template's id and version, the text's hash."""
        return {"id": self.prompt_id, "version": self.version, "sha256": self.digest}


class PromptTemplate:
    """A named Jinja2 template with declared variables (see the module docstring)."""

    __slots__ = ("_cache", "prompt_id", "source")

    def __init__(self, prompt_id: str, source: str) -> None:
        """Template ``prompt_id`` with the text ``source``.

        Raises:
            ConfigError: the id is empty, or the text is not a valid template.
        """
        if not _ID.fullmatch(prompt_id):
            raise ConfigError(
                f"a prompt template's id is letters, digits and . _ / - (it starts with a "
                f"letter or digit), not {prompt_id!r}: PromptTemplate('triage', text)"
            )
        _check_text(source, f"prompt {prompt_id!r}'s text")
        self.prompt_id = prompt_id
        """What the template is called (its versions share it)."""
        self.source = source
        """The template's text."""
        self._cache: tuple[Template, frozenset[str]] | None = None
        self._parsed()  # a template that does not parse is refused when it is made

    def __repr__(self) -> str:
        return f"PromptTemplate({self.prompt_id!r}, version={self.version!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PromptTemplate):
            return NotImplemented
        return (self.prompt_id, self.source) == (other.prompt_id, other.source)

    def __hash__(self) -> int:
        return hash((self.prompt_id, self.source))

    @property
    def version(self) -> str:
        """The first 16 hex digits of the SHA-256 of the text."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def variables(self) -> frozenset[str]:
        """Every variable the template uses."""
        return self._parsed()[1]

    def render(self, **values: Any) -> RenderedPrompt:
        """The text with ``values`` filled in.

        Raises:
            ConfigError: a variable the template uses has no value, or a value is given
                for one it does not use, or rendering failed (what the sandbox refused).
        """
        template, variables = self._parsed()
        missing = sorted(variables - values.keys())
        unknown = sorted(values.keys() - variables)
        if missing or unknown:
            parts: list[str] = []
            if missing:
                parts.append(f"no value for {', '.join(missing)}")
            if unknown:
                parts.append(f"{', '.join(unknown)} not used by it")
            raise ConfigError(
                f"prompt {self.prompt_id!r} (version {self.version}) takes "
                f"{', '.join(sorted(variables)) or 'no variables'}: {'; '.join(parts)}"
            )
        jinja2 = _jinja()[0]
        token = _budget.set([_MAX_ITEMS])
        try:
            text = template.render(**values)
        except jinja2.TemplateError as exc:
            raise ConfigError(
                f"prompt {self.prompt_id!r} (version {self.version}) did not render: {exc}. "
                "A template reads the values it is given and nothing else: no attributes "
                "that start with _, no methods that change a value"
            ) from None
        except Exception as exc:  # 1/0, a huge range, an include, a macro calling itself
            raise ConfigError(
                f"prompt {self.prompt_id!r} (version {self.version}) did not render: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        finally:
            _budget.reset(token)
        _check_text(text, f"prompt {self.prompt_id!r} rendered with these values")
        return RenderedPrompt(text, prompt_id=self.prompt_id, version=self.version)

    def _parsed(self) -> tuple[Template, frozenset[str]]:
        if self._cache is not None:
            return self._cache
        jinja2, meta, _ = _jinja()
        environment = _bounded_sandbox()(
            undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
        )
        try:
            tree = environment.parse(self.source)
        except jinja2.TemplateSyntaxError as exc:
            raise ConfigError(
                f"prompt {self.prompt_id!r} is not a valid template: {exc.message} "
                f"(line {exc.lineno})"
            ) from None
        variables = frozenset(cast("set[str]", meta.find_undeclared_variables(tree)))
        self._cache = (cast("Template", environment.from_string(tree)), variables)
        return self._cache


class PromptStore:
    """Every saved version of your prompt templates, in a run store (see the module docstring)."""

    def __init__(self, store: KeyValueStore) -> None:
        self._kv = store

    async def save(self, template: PromptTemplate) -> PromptTemplate:
        """Keep ``template``; it is now the latest (a text saved before keeps its version)."""
        key = f"{template.prompt_id}@{template.version}"
        now = datetime.now(UTC).isoformat()
        entry = await self._kv.kv_get(_NAMESPACE, key)
        old = entry.value if entry is not None else None
        first = cast(JsonObject, old).get("saved", now) if isinstance(old, dict) else now
        value: JsonObject = {"source": template.source, "saved": first, "last": now}
        await self._kv.kv_set(_NAMESPACE, key, value)
        return template

    async def get(self, prompt_id: str, version: str | None = None) -> PromptTemplate:
        """Version ``version`` of template ``prompt_id``; without one, the latest saved.

        Raises:
            ConfigError: no such template, or no such version of it.
        """
        if version is not None:
            entry = await self._kv.kv_get(_NAMESPACE, f"{prompt_id}@{version}")
            if entry is None:
                known = ", ".join(v for v, _ in await self._versions(prompt_id)) or "none"
                raise ConfigError(
                    f"prompt {prompt_id!r} has no version {version!r} (saved: {known})"
                )
            return PromptTemplate(prompt_id, _source(entry.value))
        versions = await self._versions(prompt_id)
        if not versions:
            raise ConfigError(f"no prompt {prompt_id!r} is saved; save it first")
        return await self.get(prompt_id, versions[-1][0])

    async def versions(self, prompt_id: str) -> list[str]:
        """The saved versions of ``prompt_id``, the one saved last at the end."""
        return [v for v, _ in await self._versions(prompt_id)]

    async def _versions(self, prompt_id: str) -> list[tuple[str, str]]:
        prefix = f"{prompt_id}@"
        found: list[tuple[str, str]] = []
        for key in await self._kv.kv_list(_NAMESPACE, prefix, limit=10_000):
            entry = await self._kv.kv_get(_NAMESPACE, key)
            if entry is not None and isinstance(entry.value, dict):
                value = cast(JsonObject, entry.value)
                found.append((key[len(prefix) :], str(value.get("last", value.get("saved", "")))))
        return sorted(found, key=lambda item: (item[1], item[0]))


_MAX_ITEMS = 1_000_000
"""What one render may make: items drawn from ``range()`` in all its loops together, the
length of a string or list made with ``*``, the bits of a number made with ``**``."""
_budget: ContextVar[list[int]] = ContextVar("tether_prompt_budget")
"""The ``range()`` items the render in progress may still draw."""


class _CountedRange(Sequence[int]):
    """A template's ``range()``: a range whose items are counted against the render's budget.

    Jinja2's sandbox caps each range at 100,000 items, but not loops inside loops:
    ``range(100000)`` in ``range(100000)`` ran for hours.
    """

    __slots__ = ("_range",)

    def __init__(self, items: range) -> None:
        self._range = items

    def __len__(self) -> int:
        return len(self._range)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> _CountedRange: ...
    def __getitem__(self, index: int | slice) -> int | _CountedRange:
        if isinstance(index, slice):
            return _CountedRange(self._range[index])
        return self._range[index]

    def __iter__(self) -> Iterator[int]:
        return _counted(iter(self._range))

    def __reversed__(self) -> Iterator[int]:
        return _counted(reversed(self._range))

    def __repr__(self) -> str:
        return repr(self._range)


def _counted(items: Iterator[int]) -> Iterator[int]:
    left = _budget.get([_MAX_ITEMS])
    for item in items:
        left[0] -= 1
        if left[0] < 0:
            raise OverflowError(
                f"the template drew more than {_MAX_ITEMS} items from range() in all its loops"
            )
        yield item


def _range(*args: int) -> _CountedRange:
    from jinja2.sandbox import safe_range

    return _CountedRange(safe_range(*args))


def _lipsum(n: object = 5, html: bool = True, min: object = 20, max: object = 100) -> str:
    from jinja2.utils import generate_lorem_ipsum

    if not (isinstance(n, int) and isinstance(max, int)) or n > 100 or max > 1_000:
        raise OverflowError("lipsum() makes at most 100 paragraphs of at most 1,000 words")
    return str(generate_lorem_ipsum(n=n, html=html, min=cast(int, min), max=max))


def _check_binop(operator: str, left: object, right: object) -> None:
    """Refuse ``*`` and ``**`` whose result would be huge (``'a' * 10**10`` ran out of memory)."""
    if operator == "*":
        for sized, times in ((left, right), (right, left)):
            if (
                isinstance(sized, str | bytes | list | tuple)
                and isinstance(times, int)
                and len(cast(Sized, sized)) * times > _MAX_ITEMS
            ):
                raise OverflowError(f"'*' would make more than {_MAX_ITEMS} items")
    elif (
        operator == "**"
        and isinstance(left, int)
        and isinstance(right, int)
        and abs(left) > 1
        and right * abs(left).bit_length() > _MAX_ITEMS
    ):
        raise OverflowError(f"'**' would make a number of more than {_MAX_ITEMS} bits")


@functools.cache
def _bounded_sandbox() -> Any:
    """Jinja2's immutable sandbox, with ``range``, ``lipsum``, ``*`` and ``**`` bounded."""
    _jinja()  # Jinja2 is installed, or the error says how to install it
    from jinja2.runtime import Context
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedSandbox(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            names = cast(dict[str, object], self.globals)  # pyright: ignore[reportUnknownMemberType] - Jinja2's dict[str, Any]
            names.update(range=_range, lipsum=_lipsum)

        def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
            _check_binop(operator, left, right)
            return super().call_binop(context, operator, left, right)

    return BoundedSandbox


def _check_text(text: str, what: str) -> None:
    """Refuse text that is not valid Unicode (a lone surrogate cannot be stored or hashed).

    Raises:
        ConfigError: it holds a lone surrogate.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{what} is not valid Unicode text (a lone surrogate at position {exc.start}); "
            "decode it with errors='replace' or fix its source"
        ) from None


def _source(value: object) -> str:
    source = cast(JsonObject, value).get("source") if isinstance(value, dict) else None
    if isinstance(source, str):
        return source
    raise ConfigError("a saved prompt is damaged (no source text): save it again")
