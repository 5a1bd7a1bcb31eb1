"""``@frozen``: tether's frozen, keyword-only dataclasses, built with less generated code.

They are real dataclasses (``fields``, ``replace``, ``asdict``, pattern matching, pydantic
all work) that refuse attribute writes like ``frozen=True`` ones. What differs is how they
are made, because both costs land where users feel them:

- Import time. On Python 3.11, ``dataclass(frozen=True)`` compiles six methods per class
  with ``exec``; tether defines about eighty such classes. Here only the constructor is
  compiled; ``__eq__``, ``__hash__`` and ``__repr__`` are closures over the class's fields
  (unless the class body defines its own), and writes are refused by one shared
  ``__setattr__``.
- The loop's hot path. A frozen dataclass's ``__init__`` sets each field with
  ``object.__setattr__(self, name, value)``. This constructor sets each slot's member
  descriptor directly, or, for a class without slots, the whole ``__dict__`` in one call.

Why events and some small value types have no slots (``slots=False``): orjson serializes a
dict-backed dataclass several times faster than a slotted one; values nested in events (tool
calls, usage, content blocks) are serialized for every event's hash, and events themselves
for every store write.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from inspect import Parameter, Signature
from operator import attrgetter
from reprlib import recursive_repr
from typing import Any, TypeVar, overload

from typing_extensions import dataclass_transform

__all__ = ["frozen"]

C = TypeVar("C", bound=type[Any])
_MISSING = object()


def _refuse_set(self: object, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self: object, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


@overload
def frozen(cls: C, /) -> C: ...


@overload
def frozen(*, slots: bool = True) -> Callable[[C], C]: ...


@dataclass_transform(
    kw_only_default=True,
    frozen_default=True,
    field_specifiers=(dataclasses.field, dataclasses.Field),
)
def frozen(cls: C | None = None, /, *, slots: bool = True) -> C | Callable[[C], C]:
    """Make ``cls`` a frozen, keyword-only dataclass (with ``__slots__`` unless told not to)."""

    def wrap(c: C) -> C:
        return _build(c, slots=slots)

    return wrap if cls is None else wrap(cls)


def _build(cls: C, *, slots: bool) -> C:
    own = vars(cls)  # what the class body defined itself stays (as ``dataclasses`` does)
    # a frozen dataclass's subclass must say frozen too (``dataclasses`` checks the bases)
    frozen_base = any(
        getattr(getattr(base, "__dataclass_params__", None), "frozen", False)
        for base in cls.__mro__[1:]
    )
    dc: Any = dataclasses.dataclass(
        cls, kw_only=True, slots=slots, init=False, repr=False, eq=False, frozen=frozen_base
    )
    if not slots:
        # Dict-backed ones are what users may subclass (rules): they say they are frozen, so
        # that ``@dataclass(frozen=True)`` may extend them as it could the stdlib's. (Marking
        # the slotted ones too would make each event class compile two more methods.)
        marked = dc.__dataclass_params__
        marked.frozen = marked.eq = marked.repr = True
    params = dataclasses.fields(dc)
    dc.__init__ = _first_init(dc, params, slotted=slots)
    dc.__setattr__ = _refuse_set
    dc.__delattr__ = _refuse_delete
    if "__eq__" not in own:
        dc.__eq__ = _equality(params)
    if own.get("__hash__") is None:
        dc.__hash__ = _hashing(params)
    if "__repr__" not in own:
        dc.__repr__ = _representation(params)
    if slots:  # no ``__dict__``: the state is the fields' values (a dict-backed one pickles as is)
        names = tuple(f.name for f in params)
        values = _getter(names)
        set_attribute = object.__setattr__

        def getstate(self: object) -> tuple[Any, ...]:
            return values(self)

        def setstate(self: object, state: tuple[Any, ...]) -> None:
            for name, value in zip(names, state, strict=True):
                set_attribute(self, name, value)

        dc.__getstate__ = getstate
        dc.__setstate__ = setstate
    return dc


def _getter(names: tuple[str, ...]) -> Callable[[object], tuple[Any, ...]]:
    """The values of ``names`` as a tuple (also for one name, or none)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        (name,) = names
        return lambda obj: (getattr(obj, name),)
    return lambda obj: ()


def _equality(params: tuple[dataclasses.Field[Any], ...]) -> Callable[[object, object], Any]:
    """``__eq__`` as ``dataclasses`` writes it: same class, compared fields equal as tuples."""
    values = _getter(tuple(f.name for f in params if f.compare))

    def __eq__(self: object, other: object) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hashing(params: tuple[dataclasses.Field[Any], ...]) -> Callable[[object], int]:
    """``__hash__`` as ``dataclasses`` writes it for frozen classes: over the hashed fields."""
    values = _getter(tuple(f.name for f in params if (f.compare if f.hash is None else f.hash)))

    def __hash__(self: object) -> int:
        return hash(values(self))

    return __hash__


def _representation(params: tuple[dataclasses.Field[Any], ...]) -> Callable[[object], str]:
    """``__repr__`` as ``dataclasses`` writes it (``Name(a=1, b='x')``), unexec'd."""
    shown = tuple(f.name for f in params if f.repr)

    @recursive_repr()
    def __repr__(self: object) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({inner})"

    return __repr__


class _Factory:
    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()
"""How a signature shows a default made by a factory (as ``dataclasses`` shows it)."""


def _first_init(
    cls: type[Any], params: tuple[dataclasses.Field[Any], ...], *, slotted: bool
) -> Any:
    """An ``__init__`` that compiles the real one on its first call, then hands over to it.

    A class never made in a process (most events, most error details) never pays for
    compiling its constructor. Its signature is the real one's from the start.
    """

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        init = _constructor(cls, params, slotted=slotted)
        init.__signature__ = signature
        if cls.__dict__.get("__init__") is __init__:
            cls.__init__ = init
        init(self, *args, **kwargs)

    signature = Signature(
        [
            Parameter("self", Parameter.POSITIONAL_OR_KEYWORD),
            *(
                Parameter(
                    f.name,
                    Parameter.KEYWORD_ONLY,
                    default=(
                        f.default
                        if f.default is not dataclasses.MISSING
                        else _FACTORY
                        if f.default_factory is not dataclasses.MISSING
                        else Parameter.empty
                    ),
                    annotation=f.type,
                )
                for f in params
                if f.init
            ),
        ],
        return_annotation=None,
    )
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__signature__ = signature  # pyright: ignore[reportFunctionMemberAccess]
    return __init__


def _constructor(
    cls: type[Any], params: tuple[dataclasses.Field[Any], ...], *, slotted: bool
) -> Any:
    namespace: dict[str, Any] = {"_MISSING": _MISSING, "_set": object.__setattr__}
    args: list[str] = []
    body: list[str] = []
    given: list[str] = []  # the fields it sets (``init=False`` without a default: none)
    for f in params:
        default = f.default is not dataclasses.MISSING
        factory = f.default_factory is not dataclasses.MISSING
        if default:
            namespace[f"_default_{f.name}"] = f.default
        if factory:
            namespace[f"_factory_{f.name}"] = f.default_factory
        if not f.init:  # set from its default, or left for ``__post_init__``
            if default:
                body.append(f"{f.name} = _default_{f.name}")
            elif factory:
                body.append(f"{f.name} = _factory_{f.name}()")
            else:
                continue
        elif default:
            args.append(f"{f.name}=_default_{f.name}")
        elif factory:
            args.append(f"{f.name}=_MISSING")
            body.append(f"if {f.name} is _MISSING: {f.name} = _factory_{f.name}()")
        else:
            args.append(f.name)
        given.append(f.name)
        if slotted:
            namespace[f"_set_{f.name}"] = getattr(cls, f.name).__set__
            body.append(f"_set_{f.name}(self, {f.name})")
    if not slotted:
        items = ", ".join(f"{name!r}: {name}" for name in given)
        body.append(f"_set(self, '__dict__', {{{items}}})")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    signature = f"self, *, {', '.join(args)}" if args else "self"
    source = f"def __init__({signature}):\n    " + "\n    ".join(body or ["pass"])
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init
