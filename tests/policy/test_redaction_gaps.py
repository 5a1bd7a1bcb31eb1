"""Redaction's former gaps: key names and formats, encoded and hidden secrets, long lists of
known ones; and the ordinary text around them (token counts, ports) that must stay."""

from __future__ import annotations

import time

import pytest

from tether.policy.redaction import Redactor

_HOSTILE = ["x-", "-p", "%2", "a@"]


@pytest.mark.parametrize("seed", _HOSTILE)
def test_text_built_to_make_the_new_patterns_backtrack_takes_linear_time(seed: str) -> None:
    # a guard against the catastrophic case, not a speed goal: 100 kB of "x-" held the
    # personal patterns' email search for 10 s (each start scanned to the end of the run)
    redactor = Redactor(personal=True)
    for text in ((seed * 100_000)[:100_000], seed + "a" * 100_000, (seed + " ") * 20_000):
        started = time.monotonic()
        redactor.redact_text(text, known={"hunter2hunter2": "password"})
        assert time.monotonic() - started < 2, (seed, text[:40])
