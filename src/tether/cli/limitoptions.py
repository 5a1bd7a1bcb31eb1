"""``--limit NAME=VALUE``: a run's limits, and its phases' own, set from the command line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from tether.errors import ConfigError
from tether.limits import PHASES, Limits, PhaseLimits

__all__ = ["with_limits"]

_EXAMPLES = "e.g. --limit max_seconds=120, --limit think.timeout=30, --limit max_cost=none"


def _kinds(cls: type[object]) -> dict[str, tuple[str, bool]]:
    """Each settable field of ``cls``: ``int`` or ``float``, and whether ``None`` is allowed."""
    return {
        f.name: ("float" if "float" in str(f.type) else "int", "None" in str(f.type))
        for f in fields(cls)  # pyright: ignore[reportArgumentType] - a dataclass
        if f.name not in PHASES
    }


def with_limits(limits: Limits, options: Sequence[str]) -> Limits:
    """``limits`` with each ``NAME=VALUE`` of ``options`` set (``none``: no limit).

    ``NAME`` is a ``Limits`` field (``max_seconds``) or a phase's (``reflect.max_steps``).

    Raises:
        ConfigError: an option is not ``NAME=VALUE``, names no limit, or its value does not fit.
    """
    for option in options:
        name, sep, raw = option.partition("=")
        name, raw = name.strip(), raw.strip()
        if not sep or not name:
            raise ConfigError(f"--limit {option!r}: write NAME=VALUE ({_EXAMPLES})")
        phase, dot, field = name.partition(".")
        if dot:
            if phase not in PHASES:
                raise ConfigError(
                    f"--limit {option!r}: {phase!r} is not a phase with limits of its own "
                    f"(those are {', '.join(PHASES)})"
                )
            kinds = _kinds(PhaseLimits)
            if field not in kinds:
                raise ConfigError(f"--limit {option!r}: a phase's limits are {', '.join(kinds)}")
            value = _value(option, raw, kinds[field])
            current = limits.phase(phase) or PhaseLimits()  # pyright: ignore[reportArgumentType]
            updated = replace(current, **{field: value})
            # a phase with nothing set has no limits of its own: it is not recorded at all
            empty = all(getattr(updated, f) is None for f in kinds)
            limits = replace(limits, **{phase: None if empty else updated})
        else:
            kinds = _kinds(Limits)
            if name not in kinds:
                raise ConfigError(
                    f"--limit {option!r}: no such limit; the run's are {', '.join(kinds)}, "
                    f"and PHASE.FIELD for a phase's own ({_EXAMPLES})"
                )
            limits = replace(limits, **{name: _value(option, raw, kinds[name])})
    return limits


def _value(option: str, raw: str, takes: tuple[str, bool]) -> int | float | None:
    kind, optional = takes
    if raw.lower() in ("none", "null", ""):
        if not optional:
            raise ConfigError(f"--limit {option!r}: this limit cannot be none; give a number")
        return None
    try:
        return int(raw) if kind == "int" else float(raw)
    except ValueError:
        what = "a whole number" if kind == "int" else "a number"
        raise ConfigError(
            f"--limit {option!r}: {raw!r} is not {what} (or none, for no limit)"
        ) from None
