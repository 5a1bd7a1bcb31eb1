"""Attack and legitimate-use corpora for the sandboxed tools and the policy gate.

Each module here (``paths``, ``shell``, ``http``, ``injection``) exposes
``async def run_corpus(workdir: Path) -> list[CaseResult]``: the tests assert on every case,
and ``bench/sandbox.py`` runs them all and prints the totals. A case's verdict is measured by
its effect (a file outside the root read or written, a marker created, a request received),
never by the absence of an exception alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CaseResult"]


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """The verdict on one case of a corpus."""

    area: str
    """Which corpus: ``paths``, ``shell``, ``http`` or ``injection``."""
    name: str
    """The case, in a few words."""
    attack: bool
    """True: the case must be refused; False: a legitimate use that must work."""
    refused: bool
    """The tool or the policy refused it."""
    escaped: bool
    """An attack whose effect was observed (must never happen)."""
    detail: str = ""
    """What happened, for a failing case."""

    @property
    def ok(self) -> bool:
        """An attack refused without effect, or a legitimate use that went through."""
        if self.attack:
            return self.refused and not self.escaped
        return not self.refused
